"""What every ``sirag`` command shares: the registry of commands, the common options, the parser
class whose errors are one line, the checks of the files a command writes, the ways a command
opens the memory store and the engine, and how a failure becomes one line and an exit code."""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

from ..config import Config
from ..errors import InputError, InterruptedAfterCommit, SiragError

log = logging.getLogger("sirag")

#: The function of each command, by its name on the command line.
COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {}

#: Commands that work on the memory store alone, over every index folder (corpus) whose answers it holds.
NO_INDEX = {
    "memory": "it works on the memory store, which holds the answers from every index folder (`sirag memory stats` "
              "lists them under corpora)",
    "feedback": "it labels an answer in the memory store by its outcome id, whatever index folder it came from",
    "calibrate": "it fits on the labels of every index folder in the memory store, and gives each one with enough "
                 "labels a fit of its own",
}

#: What Ctrl-C leaves behind, per command (said after "interrupted: ").
INTERRUPTED = {
    "ingest": "stopped; the index is as it was before this ingest (a new index goes live only when it is "
              "complete), so run the ingest again",
    "fetch-gutenberg": "stopped; the index is as it was before (a new index goes live only when it is complete), "
                       "so run the command again",
    "batch": "stopped cleanly; finished questions were kept, and the same command resumes the run",
    "eval": "stopped cleanly; finished questions were kept, and the same command resumes the run",
    "ask": "stopped; the unfinished answer was not stored in memory",
    "calibrate": "stopped; no new fit was stored",
}


def command(fn: Callable[[argparse.Namespace, Config], int]) -> Callable[[argparse.Namespace, Config], int]:
    """Register ``cmd_some_name`` as the command ``some-name``."""
    COMMANDS[fn.__name__.removeprefix("cmd_").replace("_", "-")] = fn
    return fn


def print_json(data: Any) -> None:
    """``data`` as one line of JSON on stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None) + "\n")


# -- parsing ------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    """argparse's parser with its errors as the rest of sirag gives them: one ``error:`` line
    that names the command and where to read its options, and exit code 2 (argparse would print
    the command's whole usage block first, burying the line that says what is wrong)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}; see `{self.prog} --help`\n")


def doc(fn: Callable) -> str:
    """A command's docstring as its ``--help`` shows it."""
    return inspect.cleandoc(fn.__doc__ or "")  # the first line is not indented, the rest are


def add_command(sub: argparse._SubParsersAction, name: str, fn: Callable,
                parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser of one command: its docstring is its ``--help``, and its first paragraph the
    line that names it in the help of the command above it."""
    text = doc(fn)
    return sub.add_parser(name, parents=[parent], help=" ".join(text.split("\n\n")[0].split()), description=text,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def common_options(index_help: str) -> argparse.ArgumentParser:
    """The options every command takes (a parent parser); ``index_help`` is --index's help, or
    ``argparse.SUPPRESS`` for the commands that refuse it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", action="append",
                        help="YAML config layered over the packaged defaults; repeat to layer several files, "
                             "later ones winning")
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, e.g. --set strategy.top_k=8 (repeatable)")
    common.add_argument("--index", metavar="DIR", help=index_help)
    common.add_argument("--memory", metavar="DB", help="memory store file (default: paths.memory_db)")
    common.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="more detail: INFO log lines on stderr, DEBUG ones in the log file, and for ask "
                             "the reasons of each attempt's checks")
    common.add_argument("--debug", action="store_true",
                        help="show tracebacks: of unexpected errors (raised), and of path errors (printed)")
    return common


# -- files a command writes ---------------------------------------------------------------

OUTPUT_SUFFIX = {"--csv": ".csv", "--json-file": ".json", "--html": ".html", "--png": ".png", "--stats-png": ".png"}


def png_file(path: str, option: str, config: Config) -> Path:
    """:func:`output_file` for a histogram, whose name must end in .png."""
    if Path(path).suffix.lower() != ".png":
        raise InputError(f"{option} {path}: the histogram is a PNG image; give a file name ending in .png")
    return output_file(path, option, config)


def output_file(path: str, option: str, config: Config) -> Path:
    """Check a file a command will write (its missing folders are created by the writer): not a
    folder, not under a file, not a device, pipe or socket, and not the memory store. A symlink
    stands for its target: the file is written there and the link is kept (the writers write
    beside the file and rename, which would otherwise replace the link with a file)."""
    if path == "-":
        stdout = " (for JSON on standard output, use --json instead)" if option == "--json-file" else ""
        raise InputError(f"{option} - would write a file named '-', not standard output; give a file name, e.g. "
                         f"out{OUTPUT_SUFFIX.get(option, '.txt')}{stdout}")
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()
    if p.exists() and not p.is_file() and not p.is_dir():
        raise InputError(f"{option} {path} is not a regular file (a device, pipe or socket); the file is written "
                         "whole and then renamed into place, so give a file name, e.g. "
                         f"out{OUTPUT_SUFFIX.get(option, '.txt')}")
    if p.is_dir():
        raise InputError(f"{option} {path} is a folder; give a file name, e.g. "
                         f"{p / ('out' + OUTPUT_SUFFIX.get(option, '.txt'))}")
    blocker = next((a for a in p.parents if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise InputError(f"{option} {path}: {blocker} is a file, not a folder; write elsewhere")
    want, got = OUTPUT_SUFFIX.get(option), p.suffix.lower()
    if want and got != want and got in set(OUTPUT_SUFFIX.values()):  # e.g. --csv out.json: surely a slip
        raise InputError(f"{option} {path}: a {got} name for a {want} file; name it {p.with_suffix(want).name}, "
                         "or use the option of that format")
    store = Path(config.paths.memory_db).resolve()
    if p.resolve() in {store, Path(f"{store}-wal"), Path(f"{store}-shm"), Path(f"{store}-journal")}:
        raise InputError(f"{option} {path} is the memory database itself; writing there would destroy it; "
                         "choose another file")
    return p


# -- the memory store and the engine ------------------------------------------------------

def open_memory(config: Config, read_only: bool = False):
    """The memory store of the settings (created when it is missing, unless ``read_only``)."""
    from ..memory import MemoryStore

    return MemoryStore(config.paths.memory_db, read_only=read_only)


def existing_memory(config: Config, command: str, read_only: bool = False):
    """The memory store for a command that reads what was recorded: a missing path is an
    error (a typo must not create an empty store), not a new database."""
    from ..errors import MemoryStoreError

    path = Path(config.paths.memory_db)
    if not path.exists():
        raise MemoryStoreError(f"no memory store at {config.paths.memory_db} yet, so `sirag {command}` has "
                               "nothing to work on; it is created by the first `sirag ask` or `sirag batch` "
                               "(or pass --memory with an existing database)")
    if not read_only and path.is_file() and path.stat().st_size == 0:
        # An empty file (a `touch`, a failed copy) would be made a store before the command found
        # nothing in it: opened read-only first, it is said to be empty, as `sirag memory` says, and
        # left as it is (one whose records are all still in its -wal file opens and goes on).
        open_memory(config, read_only=True).close()
    return open_memory(config, read_only=read_only)


def readable_memory(config: Config, command: str):
    """The existing memory store opened read-only for a command that only reads it; a store of an
    older schema is upgraded first (opened writable once), as any recording command would. A
    store that cannot be written then says to upgrade a copy."""
    from ..errors import MemoryStoreError, OlderSchemaError

    try:
        return existing_memory(config, command, read_only=True)
    except OlderSchemaError:
        pass
    try:
        store = open_memory(config)
    except MemoryStoreError as exc:
        path = Path(config.paths.memory_db)
        if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            raise MemoryStoreError(
                f"memory database {path} has an older schema and could not be upgraded: {exc}") from exc
        raise MemoryStoreError(
            f"memory database {path} has an older schema and cannot be upgraded where it is, since it cannot be "
            f"written there; copy it (with its -wal file, if any) to a writable folder and pass the copy as --memory: "
            "the first command upgrades it") from exc
    store.close()
    return open_memory(config, read_only=True)


def make_engine(args: argparse.Namespace, config: Config, record: bool = True):
    """The engine; without ``record`` (--no-memory) the store is still read, read-only, for the
    calibration fit and the learned strategy choices, but nothing is written to it."""
    from ..engine import Engine
    from ..errors import MemoryStoreError
    from ..retrieval.index import CorpusIndex

    # No index is said before the memory store is created for nothing.
    CorpusIndex(Path(args.index if args.index is not None else config.paths.index_dir)).live_dir()
    if record:
        memory = open_memory(config)
    elif Path(config.paths.memory_db).is_file():
        try:
            memory = open_memory(config, read_only=True)
        except MemoryStoreError as exc:
            log.warning("memory not read (%s): default confidence weights and strategy", exc)
            memory = None
    else:
        memory = None
        db = Path(config.paths.memory_db)
        # Said as a store that cannot be read is: a folder, or a store named (--memory, --set, a
        # --config file) that is not there, is not the calibration fit the answer is scored with.
        # The default store not there yet is a memory with nothing in it.
        # The default store by any spelling ("./memory/memory.db", its absolute path) is the default.
        default = Path(type(config.paths)().memory_db)
        try:
            named = db.resolve() != default.resolve()
        except (OSError, RuntimeError):  # a link in a loop (Python 3.11 raises RuntimeError)
            named = True
        why = (f"{db} is a folder, not a memory database file" if db.is_dir()
               else f"no memory store at {db}" if named else None)
        if why:
            log.warning("memory not read (%s): default confidence weights and strategy", why)
    return Engine(config, memory=memory, index_dir=args.index, record=record)


# -- failures -----------------------------------------------------------------------------

def report_failure(exc: BaseException, command: str, debug: bool) -> int:
    """What a command that raised ``exc`` prints, and its exit code: a known error or a path the
    user gave is one ``error:`` line (exit code 2, or the error's own), Ctrl-C one ``interrupted:``
    line (130), anything else one ``internal error:`` line (1; raised again with ``debug``)."""
    if isinstance(exc, SiragError):
        print(f"error: {exc}", file=sys.stderr)
        # The log file keeps why the command stopped (the terminal has the line above); an error
        # found before logging was set up (a bad setting) has no log file to go to, and Python's
        # last-resort handler would print it again.
        if logging.getLogger().handlers:
            logging.getLogger("sirag").warning("error: %s", exc, extra={"file_only": True})
        log.debug("error", exc_info=exc)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        # An ingest stopped once its new index was live says so (a batch's own line says more: how to resume).
        what = str(exc) if isinstance(exc, InterruptedAfterCommit) and command in ("ingest", "fetch-gutenberg") \
            else INTERRUPTED.get(command, "stopped cleanly")
        print(f"interrupted: {what}", file=sys.stderr)
        return 130
    if isinstance(exc, BrokenPipeError):
        return 1
    if isinstance(exc, OSError):
        if exc.filename is None or _inside_package(exc.filename):  # not a path the user gave
            return _internal_error(exc, debug)
        # A path that cannot be read or written (missing folder, a folder where a file belongs,
        # no permission, a read-only file system): the user's to fix, not a bug to report, so the
        # same line and exit code with --debug, which adds the traceback.
        logging.getLogger("sirag").error("path error", exc_info=exc, extra={"file_only": True})
        if debug:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {exc.filename}: {exc.strerror or exc}; check that path (does its folder exist, is it a file "
              "and not a folder, may you write there?)", file=sys.stderr)
        return 2
    import sqlite3

    from ..memory.interrupts import interrupted_in_sql

    if isinstance(exc, sqlite3.OperationalError) and interrupted_in_sql(exc):  # a Ctrl-C in a SQL function
        print(f"interrupted: {INTERRUPTED.get(command, 'stopped cleanly')}", file=sys.stderr)
        return 130
    return _internal_error(exc, debug)


def _inside_package(filename: Any) -> bool:
    """Whether a path belongs to sirag itself (a missing packaged file is a bug, not a user error)."""
    try:
        return Path(os.fsdecode(filename)).resolve().is_relative_to(Path(__file__).resolve().parents[1])
    except (OSError, TypeError, ValueError):
        return False


def _internal_error(exc: BaseException, debug: bool) -> int:
    if debug:
        raise exc
    logging.getLogger("sirag").error("unexpected error", exc_info=exc, extra={"file_only": True})
    print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback; please report it)",
          file=sys.stderr)
    return 1
