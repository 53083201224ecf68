"""The ``sirag`` parser and :func:`main`: the commands of every module under one parser, the checks
of the options they share, then the command, whose failure becomes one line and an exit code."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
from pathlib import Path
from typing import NoReturn

from .. import __version__
from ..config import Config, load_config, pins_strategy
from ..errors import InputError
from . import ask, calibrate, feedback, ingest, memory, serve
from .common import COMMANDS, NO_INDEX, Parser, command, common_options, report_failure


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``sirag`` command."""
    from ..batch import add_batch_commands

    common = common_options("corpus index directory (default: paths.index_dir; for batch and eval: --index, or "
                            "--set paths.index_dir, which means the same there, replaces the batch file's index:; "
                            "without them, the batch file's index:, else a --config file's paths.index_dir (other "
                            "than the packaged index/default), else <output_dir>/<name>/index)")
    # The commands of the memory store alone take no --index (main says why, rather than ignore it).
    store_only = common_options(argparse.SUPPRESS)

    p = Parser(prog="sirag", description=(
        "A self-correcting RAG engine: answers questions from your documents with a local model, "
        "checks each answer, retries with another strategy or refuses, and remembers what worked."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start with: sirag ingest DOCS/  then  sirag ask \"QUESTION\". Each command has --help.")
    p.add_argument("--version", action="version", version=f"sirag {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    ingest.add_parsers(sub, common)
    ask.add_parsers(sub, common)
    memory.add_parsers(sub, store_only)
    feedback.add_parsers(sub, store_only)
    calibrate.add_parsers(sub, store_only)
    add_batch_commands(sub, common, COMMANDS, command)
    serve.add_parsers(sub, common)
    return p


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str],
                  action: str | None = None, words: list[str] | None = None) -> NoReturn:
    """Exit 2 with the usage of the command given (not the top-level one) and, for an option that
    belongs to other commands, which ones: ``sirag batch x.yaml --name n`` says --name is eval's.
    ``words``: the words ``memory search`` did take, for its hint about words beginning with -."""
    subs = _subcommands(parser)
    target = subs.get(command, parser)
    target = _subcommands(target).get(action, target) if action is not None else target
    # Every command and memory action, with the options it shows (another action's are parsed, unshown).
    leaves = [(f"{name} {inner}", q) for name, sp in subs.items() for inner, q in _subcommands(sp).items()] \
        + [(name, sp) for name, sp in subs.items() if not _subcommands(sp)]
    hints = []
    dashed = []  # memory search: words that begin with -, not options
    for arg in extra:
        option = arg.split("=", 1)[0]
        owners = [name for name, sp in leaves if sp is not target and option in sp._option_string_actions
                  and sp._option_string_actions[option].help is not argparse.SUPPRESS]
        if option.startswith("-") and owners:
            hints.append(f"{option} is an option of `sirag {'`, `sirag '.join(owners)}`")
        elif option == "--resume" and command in ("batch", "eval"):
            # Runs resume by themselves: the same batch (the same name) run again skips what it answered.
            hints.append("a run resumes by itself: run the same batch again, under the same name, and the "
                         "questions already answered are kept, not asked again")
        elif action == "search" and option.startswith("-") and not option.startswith("--") \
                and option not in target._option_string_actions:
            # Not an option anywhere: most likely a word to search for that begins with -.
            dashed.append(arg)
    if dashed:
        # One hint with every word (a search finds outcomes holding them all, in any order).
        hints.append(f"a word to search for that begins with - goes after --, with the other words (options "
                     "before the --): "
                     f"`sirag memory search -- {' '.join(shlex.quote(w) for w in [*(words or []), *dashed])}`")
    target.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


def _settings(args: argparse.Namespace) -> Config:
    """The settings of a command: its shared options checked, and the --config files and --set
    overrides (--memory among them) layered over the packaged defaults; logging set up."""
    if args.command in NO_INDEX and getattr(args, "index", None) is not None:
        # Accepted silently, it let `sirag calibrate --index A` look like a fit of A's labels alone.
        raise InputError(f"--index is not an option of sirag {args.command}: {NO_INDEX[args.command]}; "
                         "leave --index out (--memory chooses the store)")
    for option in ("index", "memory"):
        value = getattr(args, option, None)
        if value is not None and not value.strip():
            # An empty variable in a script ("--index $DIR"): the current folder or the default
            # store would be used in its place.
            raise InputError(f"--{option} is empty; give a path, e.g. --{option} "
                             + ("index/mine" if option == "index" else "memory/mine.db"))
    for option in ("index", "memory", "output_dir"):
        value = getattr(args, option, None)
        try:
            if value:
                Path(value).expanduser().resolve()
        except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop of links
            raise InputError(f"--{option.replace('_', '-')} {value} is a link that leads to itself (a loop of "
                             "links); remove the link, or give another path") from None
    if getattr(args, "index", None):
        args.index = os.path.expanduser(args.index)  # "--index=~/x" reaches us unexpanded, as paths.* would not
    # --memory is a --set of paths.memory_db; batch and eval re-apply these over a batch file's overrides.
    args.overrides = [*args.overrides, *([f"paths.memory_db={args.memory}"] if args.memory is not None else [])]
    if pins_strategy(args.overrides):
        args.overrides.append("policy.first_from_memory=false")
    from ..logging_setup import console_handler, setup_logging

    if not logging.getLogger().handlers:
        # Until setup_logging (which needs the settings' log folder) replaces it: what loading the
        # settings warns of (a removed setting) reads as the CLI's other warnings do.
        logging.getLogger().addHandler(console_handler(args.verbose))
    config = load_config(args.config, args.overrides)
    setup_logging(config.paths.log_dir, args.verbose, args.command)
    return config


def main(argv: list[str] | None = None) -> int:
    """Run the ``sirag`` command ``argv`` (default: the command line); returns its exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args.command, extra, getattr(args, "action", None), getattr(args, "arg", None))
    if not args.command:
        parser.print_help()
        return 2
    debug = getattr(args, "debug", False) or os.environ.get("SIRAG_DEBUG") == "1"
    try:
        return COMMANDS[args.command](args, _settings(args))
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        return report_failure(exc, args.command, debug)
