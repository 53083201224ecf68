"""``sirag memory merge`` and ``sirag memory backup``: the memory actions that work on store files,
bringing other stores into this one and copying it whole."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import InputError
from .common import open_memory, output_file, print_json, readable_memory


def memory_merge(args: argparse.Namespace, config: Config) -> int:
    """Merge other memory stores into this one (--memory): from each file, what this store lacks,
    in one transaction per file.

    Example: sirag memory merge shard1.db shard2.db --memory memory/memory.db
    The --memory store is created if it does not exist; every file is checked before any is
    merged, and a file of an older schema must be upgraded first (`sirag memory stats --memory
    FILE`). Merging the same file again adds only what is still missing.
    """
    from ..evaluation.calibrate import calibration_status
    from ..memory.store import open_merge_source, same_file

    files = list(args.arg or [])
    if not files:
        raise InputError("sirag memory merge needs the file(s) of the store(s) to merge into --memory")
    target = Path(config.paths.memory_db).resolve()
    for f in files:
        if same_file(f, target):
            raise InputError(f"{f} is the --memory store itself; merge other stores into it")
        open_merge_source(f).close()  # missing, damaged, foreign or older: says so, and nothing is merged
    store = open_memory(config)
    results: list[dict[str, Any]] = []
    try:
        for f in files:
            try:
                results.append({"file": f, **store.merge_from(f)})
            except BaseException:
                # Each file is merged in its own transaction: the ones before this failure stay merged.
                # Say what is in the store now before the error, which names only the failure.
                _print_merged(results, files[len(results):], config, args.json)
                raise
        fit = store.latest_calibration() if any(r["fits_added"] for r in results) else None
        c = config.calibration
        due = (calibration_status(store, c.auto_fit, c.auto_min_labels, c.auto_refit_after)["automatic_fit"]
               if fit is None and any(r["feedback_added"] for r in results) and not args.json else None)
    finally:
        store.close()
    _print_merged(results, [], config, args.json)
    if not args.json:
        if fit is not None:
            what = ("the default weights (a reset)" if (fit["metrics"] or {}).get("reset_to_defaults")
                    else f"fit {fit['id']} made {fit['created_at']} on {fit['n']} label(s)")
            print(f"calibration in use now: {what} (the newest); run `sirag calibrate` to fit on all labels here, "
                  "or `sirag calibrate --reset` for the default weights")
        elif any(r["feedback_added"] for r in results):
            when = {"off": "off (calibration.auto_fit)", "due": "due at the engine's next start"}.get(due, due)
            print("labels added: `sirag calibrate` fits the confidence on all labels here; the automatic fit is "
                  + when)
    return 0


def memory_backup(args: argparse.Namespace, config: Config) -> int:
    """Write a consistent copy of the whole store (SQLite's backup API: safe while other commands
    write to it), checked first: a damaged store is refused, as by every command.

    Example: sirag memory backup backups/memory-2024-06-01.db
    An existing file is replaced only with --force. To restore, pass the copy as --memory, or copy
    it over the store while no sirag command runs.
    """
    from ..memory.integrity import backup

    words = list(args.arg or [])
    if len(words) != 1:
        raise InputError(f"sirag memory backup takes one file to write, got {len(words)}; e.g. sirag memory backup "
                         "backups/memory.db")
    if Path(words[0]).expanduser().is_dir():
        raise InputError(f"sirag memory backup {words[0]}: a folder; name the file to write, e.g. "
                         f"{Path(words[0]) / 'memory.db'}")
    target = output_file(str(Path(words[0]).expanduser()), "backup", config)  # not the store itself, nor a device
    store = readable_memory(config, "memory")
    try:
        backup(store.db.conn, target, force=args.force)
    finally:
        store.close()
    if args.json:
        print_json({"memory": config.paths.memory_db, "backup": str(target)})
    else:
        print(f"backed up {config.paths.memory_db} to {words[0]} (to restore it, pass --memory {words[0]}, or copy it "
              "over the store while no sirag command runs)")
    return 0


def _print_merged(results: list[dict[str, Any]], unmerged: list[str], config: Config, as_json: bool) -> None:
    """What ``memory merge`` added from each file merged; when a file failed (``unmerged``: it and those
    after it), what was merged before the failure and what was not, said before the error itself."""
    if as_json:
        print_json(results if not unmerged else {"merged": results, "not_merged": unmerged})
    else:
        for r in results:
            print(f"{r['file']}: {r['outcomes_added']} outcome(s) added with {r['attempts_added']} attempt(s), "
                  f"{r['questions_added']} new question(s), {r['feedback_added']} label(s), {r['fits_added']} "
                  f"calibration fit(s); skipped {r['outcomes_present']} already here and "
                  f"{r['outcomes_same_run_item']} of batch items recorded here under another id")
        if results or not unmerged:
            print(f"into {config.paths.memory_db}")
    if unmerged:
        done = (f"{_both(tuple(r['file'] for r in results))} {'was' if len(results) == 1 else 'were'} merged "
                f"into {config.paths.memory_db} and stay{'s' if len(results) == 1 else ''} merged"
                if results else f"nothing was merged into {config.paths.memory_db}")
        print(f"{done}; {_both(tuple(unmerged))} {'was' if len(unmerged) == 1 else 'were'} not merged (the message "
              "below says why): once that is fixed, run the same command again, which adds only what is still "
              "missing", file=sys.stderr)


def _both(names: tuple[str, ...]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
