"""How much could any choice of first strategy gain? Paired first attempts from stored runs.

The learning target asks memory to raise first-attempt success (the first attempt passes every
check). Memory can only do that by choosing another first strategy than the configured
default, so the gain is bounded by how often another strategy passes where the default fails
on the same question. Stored runs of the same questions under different policies hold such
pairs: a question asked with the default first in one run and with strategy S first in
another. For every S this prints, over the questions asked both ways, the 2×2 table

    both pass · only S passes (a gain) · only the default passes (a loss) · both fail

overall and per query class, and the per-question bound: the share of questions whose default
first attempt failed while some other first strategy passed. A question asked several times
with one strategy counts by the majority of those first attempts (ties count as a pass).

Repairs are not used: a repair runs only after the default failed, so it never shows the
"only the default passes" cell, and counting it would make every alternative look better than
it is (or, counted against all questions, worse).

    python benchmarks/headroom.py runs/mem-literaryqa-dev*.db
    python benchmarks/headroom.py --default 'c=section|r=hybrid|...' STORE...
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from common import report


def first_attempts(paths: list[Path]) -> tuple[dict[str, dict[str, list[bool]]], dict[str, str]]:
    """{question: {strategy key: [first attempt passed, ...]}} and {question: query class}."""
    from self_improving_rag.memory.store import MemoryStore

    seen: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    classes: dict[str, str] = {}
    for path in paths:
        store = MemoryStore(path, read_only=True)
        try:
            records = store.export_records()
        finally:
            store.close()
        for rec in records:
            first = next((a for a in rec.get("attempts") or () if a.get("number") == 1), None)
            if first is None or not first.get("strategy_key"):
                continue
            question = " ".join(str(rec["question"]).split())
            seen[question][first["strategy_key"]].append(first.get("failure") == "NONE")
            classes[question] = rec.get("query_class") or "other"
    return seen, classes


def passed(results: list[bool]) -> bool:
    return 2 * sum(results) >= len(results)


def paired(seen, classes, default: str) -> dict:
    tables: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(
        lambda: {"both": 0, "gain": 0, "loss": 0, "neither": 0}))
    asked = rescued = 0
    for question, by_key in seen.items():
        if default not in by_key:
            continue
        asked += 1
        d = passed(by_key[default])
        others = {k: passed(v) for k, v in by_key.items() if k != default}
        if not d and any(others.values()):
            rescued += 1
        for key, s in others.items():
            cell = "both" if d and s else "gain" if s else "loss" if d else "neither"
            for group in ("all", classes[question]):
                tables[key][group][cell] += 1
    return {"asked_with_default": asked, "default_failed_other_passed": rescued, "tables": tables}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", nargs="+", type=Path, help="memory store files of runs over the same questions")
    ap.add_argument("--default", help="the default strategy key (default: the packaged config's strategy)")
    ap.add_argument("--min-pairs", type=int, default=5, help="list strategies with at least this many pairs")
    args = ap.parse_args()
    missing = [str(p) for p in args.stores if not p.is_file()]
    if missing:
        sys.exit(f"error: not a file: {', '.join(missing)}")
    if args.default is None:
        from self_improving_rag.config import load_config

        args.default = load_config().strategy.to_strategy().key
    seen, classes = first_attempts(args.stores)
    result = paired(seen, classes, args.default)
    print(f"default: {args.default}")
    print(f"{len(seen)} questions; {result['asked_with_default']} asked with the default first")
    print("strategy | pairs | both pass | only it passes | only the default passes | both fail | per class (gain/loss)")
    rows = []
    for key, groups in sorted(result["tables"].items(), key=lambda kv: -sum(kv[1]["all"].values())):
        t = groups["all"]
        n = sum(t.values())
        if n < args.min_pairs:
            continue
        per_class = ", ".join(f"{c} {g['gain']}/{g['loss']}" for c, g in sorted(groups.items())
                              if c != "all" and (g["gain"] or g["loss"]))
        print(f"{key} | {n} | {t['both']} | {t['gain']} | {t['loss']} | {t['neither']} | {per_class or '-'}")
        rows.append({"strategy": key, "pairs": n, **t, "gain/loss per class": per_class})
    asked = result["asked_with_default"]
    bound = result["default_failed_other_passed"] / asked if asked else None
    if bound is not None:
        print(f"questions whose default first attempt failed while another first strategy passed: "
              f"{result['default_failed_other_passed']} of {asked} ({100 * bound:.1f} points: the most any "
              "per-question choice could add; a choice per query class adds at most the net gains above)")
    report("headroom", {"default": args.default, "questions": len(seen), "asked_with_default": asked,
                        "default_failed_other_passed": result["default_failed_other_passed"],
                        "per_question_bound": bound, "strategies": rows})


if __name__ == "__main__":
    main()
