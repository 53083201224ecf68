"""``sirag memory``: the memory store's actions, each a subcommand with its own options. stats,
strategies, failures, show, search, export and report read the store; merge brings other stores
into it; backup copies it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, NoReturn

from ..config import Config
from ..errors import InputError
from .common import OUTPUT_SUFFIX, Parser, add_command, command, output_file, print_json, readable_memory
from .memory_files import memory_backup, memory_merge

#: How many matches `memory search` shows without --limit.
SEARCH_LIMIT = 20

#: The options of the memory actions, and the actions each belongs to. Every action parses them
#: all, showing only its own, so that one given to another action is refused by name, with the
#: actions it belongs to, rather than reported as an unknown argument.
_OPTIONS = (("--limit", ("search", "strategies", "failures")), ("--csv", ("export",)), ("--json-file", ("export",)),
            ("--html", ("report",)), ("--force", ("backup",)))

#: The actions that take words (the others are refused them by name), with how they show in --help.
_WORDS = {"show": ("ID", "outcome id (or its first 6+ characters); after --, it may begin with -"),
          "search": ("TEXT", "the words to look for (after --, a word may begin with -: memory search -- -Marsh)"),
          "merge": ("FILE", "the files of the other stores, merged into --memory"),
          "backup": ("FILE", "the file to write")}

#: Said under stats, strategies and failures: what their counts are, and what they are not.
_VERDICTS = ("(successes and success rates are the engine's own verdict when the attempt ran: the answer passed "
             "its checks, over every index folder in this memory; feedback and labelled_* count labels, which the "
             "strategy policy counts only through the confidence weights a calibration fits on them; the policy "
             "judges each attempt again under the confidence weights in use now, so its counts can differ from "
             "these, and counts each index folder's own record first)")


def _either(names: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@command
def cmd_memory(args: argparse.Namespace, config: Config) -> int:
    """Analyse the memory store: stats, strategies, failures, show ID, search TEXT, export, report;
    merge other stores into it; back it up.

    Examples: sirag memory stats; sirag memory show 3f2a9c; sirag memory search Baskerville;
    sirag memory export --csv out.csv; sirag memory report --html report.html;
    sirag memory merge shard1.db shard2.db --memory memory/memory.db;
    sirag memory backup backups/memory-2024-06-01.db
    Backup writes a consistent copy of the whole store (SQLite's backup API: safe while other
    commands write to it), never over an existing file unless --force; to restore, pass the copy
    as --memory, or copy it over the store while no sirag command runs. Every command checks the
    store when it opens it and refuses a damaged one.
    Merge creates the --memory store if it does not exist; every file is checked before any is
    merged, and a file of an older schema must be upgraded first (`sirag memory stats --memory
    FILE`). Merging the same file again adds only what is still missing.
    Each action has --help.
    """
    action = args.action
    words = list(args.arg or [])
    # Words or options of one action given to another are mistakes, not something to ignore.
    if words and action not in _WORDS:
        raise InputError(f"sirag memory {action} takes no argument (got {' '.join(words)!r}); only show ID, "
                         "search TEXT, merge FILE... and backup FILE do")
    if action == "show" and len(words) > 1:
        raise InputError(f"sirag memory show takes one outcome id, got {len(words)}: {' '.join(words)!r}")
    for flag in ("--csv", "--json-file", "--html"):
        value = getattr(args, _dest(flag))
        if value is not None and not value.strip():  # an empty variable in a script ("--csv $OUT")
            raise InputError(f"{flag} is empty; give a file name, e.g. out{OUTPUT_SUFFIX[flag]}")
    owned = [(flag, owners) for flag, owners in _OPTIONS
             if getattr(args, _dest(flag)) not in (None, False) and action not in owners]
    if owned:
        stray = [flag for flag, _ in owned]
        raise InputError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not an option of memory {action} "
                         f"({'; '.join(f'{flag} to memory {_either(owners)}' for flag, owners in owned)})")
    run, reads = ACTIONS[action]
    if not reads:
        return run(args, config)
    # Analysis only reads: the store is opened read-only, once its schema is upgraded if it needs that.
    store = readable_memory(config, "memory")
    try:
        data, notes = run(store, args, config)
    finally:
        store.close()
    _print_read(action, data, notes, args.json)
    return 0


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _print_read(action: str, data: Any, notes: list[str], as_json: bool) -> None:
    """What an action that reads the store found: JSON, or rows, an outcome, or ``key: value``
    lines, with the notes under them."""
    if as_json:
        print_json(data)
        return
    if action == "show":
        print(json.dumps(data, ensure_ascii=False, indent=2))
    elif isinstance(data, list):
        for row in data:
            print("  ".join(f"{k}={_short(v)}" for k, v in row.items()))
        if not data and not notes:
            print("(nothing yet)")
        for note in notes:
            print(note)
    else:
        for k, v in data.items():
            _print_item(k, v)
    if action in ("stats", "strategies", "failures") and data:
        print(_VERDICTS)


# -- the actions that read the store: each returns what to print, and notes said under it -----

def memory_stats(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Totals of the memory store: questions, outcomes answered and refused, attempts, rates,
    labels, the outcomes of each corpus (index folder), and the confidence weights in use with
    when the next automatic fit is due.

    Example: sirag memory stats --json
    """
    from ..evaluation.calibrate import calibration_status

    c = config.calibration
    return {**store.stats(), "calibration": calibration_status(store, c.auto_fit, c.auto_min_labels,
                                                               c.auto_refit_after)}, []


def memory_strategies(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Success by strategy: attempts, successes (the engine's own verdict), success rate, mean
    confidence and time, and how many of its answers carry a label, and how many of those are right.

    Example: sirag memory strategies --limit 5
    """
    return _limited(store.strategies(), args.limit, "strategies, by attempts")


def memory_failures(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Failure types by count: each one's share of all attempts, and the repair that most often
    followed it, with that repair's success rate.

    Example: sirag memory failures --json
    """
    return _limited(store.failures(), args.limit, "failure types, by count")


def _limited(rows: list[dict], limit: int | None, what: str) -> tuple[list[dict], list[str]]:
    """The first ``limit`` rows (the most used, or most frequent, first), and a note of what was cut."""
    if limit is None or len(rows) <= limit:
        return rows, []
    return rows[:limit], [f"(the first {limit} of {len(rows)} {what}; --limit sets how many)"]


def memory_show(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """One outcome with its attempts (strategy, signals, failure, repair, timings) and its labels.

    Example: sirag memory show 3f2a9c   (an outcome id, or its first 6+ characters)
    """
    oid = " ".join(args.arg or [])
    if not oid:
        raise InputError("sirag memory show needs an outcome id (or its first 6+ characters)")
    return store.show(oid), []


def memory_search(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Full-text search of the recorded questions and answers: the outcomes holding every word,
    best match first.

    Example: sirag memory search Baskerville   (a word that begins with -: sirag memory search -- -Marsh)
    """
    from ..memory.analysis import search_words

    text = " ".join(args.arg or [])
    if not text:
        raise InputError("sirag memory search needs some text to look for")
    if not search_words(text):  # nothing would be searched: "no outcome matches" would mislead
        raise InputError(f"sirag memory search: {text!r} holds no word to look for (quotes, "
                         "punctuation and operators such as * are not searched); give a word, e.g. "
                         "sirag memory search Holmes")
    limit = args.limit or SEARCH_LIMIT
    rows = store.search(text, limit=limit + 1)  # one more, to tell whether the limit left some out
    if not rows:
        return rows, [f"(no outcome matches {text!r})"]
    if len(rows) > limit:
        return rows[:limit], [f"(only the best {limit} shown; more outcomes match: --limit sets how many)"]
    return rows, []


def memory_export(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Export the outcomes with their attempts: CSV, one row per attempt; JSON, each outcome with
    its attempts. Both files are written from one reading of the store, and both or neither.

    Example: sirag memory export --csv out.csv --json-file out.json   (--json: the JSON on stdout)
    """
    targets = [(fmt, path) for fmt, path in (("csv", args.csv), ("json", args.json_file)) if path]
    if not targets and args.json:
        return store.export_records(), []  # the JSON export on stdout
    if not targets:
        raise InputError("sirag memory export needs --csv FILE and/or --json-file FILE, or --json for "
                         "JSON on stdout")
    if len(targets) == 2 and Path(args.csv).resolve() == Path(args.json_file).resolve():
        raise InputError("--csv and --json-file name the same file; give each format its own file")
    checked = [output_file(path, "--csv" if fmt == "csv" else "--json-file", config) for fmt, path in targets]
    # Both files or neither: a JSON file that cannot be written leaves no CSV behind.
    n = store.export_files([(fmt, path) for (fmt, _), path in zip(targets, checked)])
    return {"exported_outcomes": n, "files": [{"path": str(path), "format": fmt} for fmt, path in targets]}, []


def memory_report(store, args: argparse.Namespace, config: Config) -> tuple[Any, list[str]]:
    """Write a self-contained HTML report of the memory store: strategy success by kind of
    question, failure types over time, the confidence against accuracy, the learning curve.

    Example: sirag memory report --html report.html
    """
    if not args.html:
        raise InputError("sirag memory report needs --html FILE")
    from ..memory.report import write_html_report

    return {"report": str(write_html_report(store, output_file(args.html, "--html", config)))}, []


def _print_item(key: str, value: Any, indent: str = "") -> None:
    """``key: value`` on one line, or, for a dict too long for one (or the corpora), one line an item."""
    if isinstance(value, dict) and value and (key == "corpora" or _short(value).endswith("...")):
        print(f"{indent}{key}:")
        for k, v in value.items():
            _print_item(str(k), v, indent + "  ")
    else:
        print(f"{indent}{key}: {_short(value)}")


def _short(v: Any) -> str:
    """A value on one line of at most 120 characters; ``n/a`` for None."""
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        s = ", ".join(f"{k} {_short(x)}" for k, x in v.items()) or "none"
    elif isinstance(v, list):
        s = "; ".join(_short(x) for x in v)
    else:
        s = " ".join(str(v).split())  # an answer's newlines and tabs would spread one row over lines
    return s if len(s) < 120 else s[:117] + "..."


#: Each memory action, in the order --help lists them: its function, and whether it only reads the
#: store (it is then given the store, opened read-only, and returns what to print).
ACTIONS: dict[str, tuple[Callable[..., Any], bool]] = {
    "stats": (memory_stats, True), "strategies": (memory_strategies, True), "failures": (memory_failures, True),
    "show": (memory_show, True), "search": (memory_search, True), "export": (memory_export, True),
    "report": (memory_report, True), "merge": (memory_merge, False), "backup": (memory_backup, False)}


# -- the parser ---------------------------------------------------------------------------------

class _GroupParser(Parser):
    """The parser of `sirag memory` alone: without an action it names the actions."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required: action"):
            actions = next(a.choices for a in self._actions if a.dest == "action")
            message = f"name an action: {', '.join(actions)}"
        super().error(message)


class _ActionParser(Parser):
    """The parser of one memory action: words given after its options, or after ``--``, are its words
    (``memory search --limit 5 Holmes``, ``memory search --config c.yaml -- -Marsh``, ``memory show
    --json -- ID``). argparse fills the ``nargs="*"`` positional, empty, before the first option, and
    returns every later word as unrecognized. An option it does not know (a word that begins with -
    before any --, as in every CLI) is still reported, with what followed it."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extra = super().parse_known_args(args, namespace)
        cut = extra.index("--") if "--" in extra else len(extra)
        if any(w.startswith("-") for w in extra[:cut]):
            return namespace, extra
        namespace.arg = [*(getattr(namespace, "arg", None) or []), *extra[:cut], *extra[cut + 1:]]
        return namespace, []


class _ActionsInOneNamespace(argparse._SubParsersAction):
    """The memory actions parsed into the namespace of `sirag memory`'s own options, so that an option
    given before the action stays (``memory --json search``) and --set given on both sides adds up;
    argparse would parse the action into a new namespace whose defaults replace them."""

    def __call__(self, parser, namespace, values, option_string=None):
        action = self._name_parser_map.get(values[0])
        if action is None:
            return super().__call__(parser, namespace, values, option_string)  # says the choices
        setattr(namespace, self.dest, values[0])
        namespace, extra = action.parse_known_args(values[1:], namespace)
        if extra:
            vars(namespace).setdefault(argparse._UNRECOGNIZED_ARGS_ATTR, []).extend(extra)


def add_parsers(sub: argparse._SubParsersAction, store_only: argparse.ArgumentParser) -> None:
    """Add ``memory`` and its actions to the ``sirag`` parser."""
    sub._parser_class, default_class = _GroupParser, sub._parser_class
    group = add_command(sub, "memory", cmd_memory, store_only)
    sub._parser_class = default_class
    _add_options(group, None)  # unshown: an action's options given before it are its own (memory --limit 3 strategies)
    actions = group.add_subparsers(dest="action", required=True, action=_ActionsInOneNamespace,
                                   parser_class=_ActionParser)
    for name, (fn, _) in ACTIONS.items():
        sp = add_command(actions, name, fn, store_only)
        metavar, words_help = _WORDS.get(name, (None, argparse.SUPPRESS))
        sp.add_argument("arg", nargs="*", metavar=metavar, help=words_help)
        _add_options(sp, name)


def _add_options(parser: argparse.ArgumentParser, action: str | None) -> None:
    """Every option of the memory actions, shown in ``action``'s --help when it is one of its own."""
    from ..batch import int_at_least

    def option(flag: str, text: str, **kw: Any) -> None:
        own = any(flag == f and action in owners for f, owners in _OPTIONS)
        parser.add_argument(flag, help=text if own else argparse.SUPPRESS, **kw)

    option("--limit", {"search": f"matches shown (default {SEARCH_LIMIT})",
                       "strategies": "strategies shown, the most used first (default: all)",
                       "failures": "failure types shown, the most frequent first (default: all)"}.get(action or "", ""),
           type=int_at_least(1))
    option("--csv", "write CSV here: one row per attempt", metavar="FILE")
    option("--json-file", "write JSON here: each outcome with its attempts", metavar="FILE")
    option("--html", "write the HTML report here", metavar="FILE")
    option("--force", "replace FILE if it exists", action="store_true")
