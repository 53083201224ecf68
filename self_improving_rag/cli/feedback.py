"""``sirag feedback``: an answer in memory labelled correct or wrong."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import Config
from .common import add_command, command, existing_memory, print_json


@command
def cmd_feedback(args: argparse.Namespace, config: Config) -> int:
    """Label an answer in memory as correct or wrong (used by `sirag calibrate`, whose fit the policy's
    counts then follow).

    Example: sirag feedback 3f2a9c1b --correct
    A different label replaces the outcome's earlier one; the same label again (without a new
    --note) changes nothing, and says so.
    """
    store = existing_memory(config, "feedback")
    try:
        outcome = store.show(args.outcome_id)
        oid = outcome["id"]
        seen: dict[str, Any] = {}  # the label in use, as the write found it (not as show() did, before it)
        written = store.add_feedback(oid, correct=args.correct, source="user", note=args.note or "",
                                     unless_current=True, current=seen)
    finally:
        store.close()
    before = seen or None
    notes = []
    same = before is not None and before["label"] == int(args.correct)
    if before is not None and written and not same:
        notes.append(f"it replaces the earlier {before['source']} label ({'correct' if before['label'] else 'wrong'})")
    elif written and same and before["source"] == "gold":
        notes.append("the gold label said the same; as a user label it is kept over any later gold label")
    elif written and same:
        notes.append("the outcome already had this label; the new note is kept with it")
    if outcome["refused"]:
        notes.append("this outcome is a refusal: the label is kept and counted, but calibration learns only from "
                     "labelled answers")
    if args.json:
        print_json({"outcome_id": oid, "correct": bool(args.correct), "source": "user", "note": args.note or "",
                     "replaced": before if written and not same else None, "written": written,
                     "refusal": bool(outcome["refused"])})
    elif not written:
        print(f"unchanged: outcome {oid[:12]} was already labelled {'correct' if args.correct else 'wrong'} by a "
              "user; nothing was written")
    else:
        print(f"recorded: outcome {oid[:12]} is {'correct' if args.correct else 'wrong'}")
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
    return 0


def add_parsers(sub: argparse._SubParsersAction, store_only: argparse.ArgumentParser) -> None:
    """Add ``feedback`` to the ``sirag`` parser."""
    sp = add_command(sub, "feedback", cmd_feedback, store_only)
    sp.add_argument("outcome_id", help="outcome id (or its first 6+ characters) from sirag ask")
    g = sp.add_mutually_exclusive_group(required=True)
    g.add_argument("--correct", action="store_true", dest="correct",
                   help="the answer is right (for a refusal: refusing was right)")
    g.add_argument("--wrong", action="store_false", dest="correct",
                   help="the answer is wrong (for a refusal: the documents did answer it)")
    sp.add_argument("--note", help="a note kept with the label")
