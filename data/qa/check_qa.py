"""Check a labelled QA set written for this project against the books it is about.

Usage: python data/qa/check_qa.py data/qa/time_machine.jsonl [more.jsonl ...]

For every line: the required fields and their types; an answerable question has answers and
at least one evidence quote; an unanswerable one has no answers and says why
(``why_unanswerable``) and which terms were searched (``checked_terms``); every evidence quote
is a verbatim substring of its book once whitespace runs are collapsed and curly quotes are
folded; a ``multi_hop`` question quotes at least two passages that lie apart in the book (more
than 1,500 characters). Prints per-file counts (answerable, unanswerable, multi-passage) and
exits 1 with one line per problem when any check fails.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpora"
TYPES = {"who", "what", "where", "when", "why", "how", "numeric", "fact", "multi_hop",
         "unanswerable", "out_of_scope"}
_FOLD = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "_": ""})


def norm(text: str) -> str:
    return " ".join(text.translate(_FOLD).split()).lower()


def book_text(book: str, cache: dict[str, str]) -> str:
    if book not in cache:
        found = sorted(CORPORA.glob(f"*/{book}_*.txt"))
        if not found:
            raise SystemExit(f"no book file for {book!r} under {CORPORA}")
        cache[book] = norm(found[0].read_text(encoding="utf-8-sig"))
    return cache[book]


def check(path: Path, cache: dict[str, str]) -> list[str]:
    problems: list[str] = []
    counts: Counter[str] = Counter()
    ids: set[str] = set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc})")
            continue
        for key, kind in (("id", str), ("question", str), ("answers", list), ("answerable", bool),
                          ("book", str), ("evidence", list), ("type", str)):
            if not isinstance(row.get(key), kind):
                problems.append(f"{where}: field {key!r} missing or not {kind.__name__}")
        if problems and problems[-1].startswith(where):
            continue
        if row["id"] in ids:
            problems.append(f"{where}: duplicate id {row['id']}")
        ids.add(row["id"])
        if row["type"] not in TYPES:
            problems.append(f"{where}: type {row['type']!r} not one of {sorted(TYPES)}")
        text = book_text(row["book"], cache)
        spots = []
        for quote in row["evidence"]:
            at = text.find(norm(quote))
            if not norm(quote) or at < 0:
                problems.append(f"{where}: evidence not verbatim in {row['book']}: {quote[:70]!r}")
            spots.append(at)
        if row["answerable"]:
            counts["answerable"] += 1
            if not row["answers"] or not row["evidence"]:
                problems.append(f"{where}: answerable but no answers or no evidence")
            if row["type"] == "multi_hop":
                counts["multi_hop"] += 1
                good = [s for s in spots if s >= 0]
                if len(good) < 2 or max(good) - min(good) < 1500:
                    problems.append(f"{where}: multi_hop needs two quotes over 1,500 characters apart")
        else:
            counts["unanswerable"] += 1
            if row["answers"]:
                problems.append(f"{where}: unanswerable but has answers")
            if not row.get("why_unanswerable") or not row.get("checked_terms"):
                problems.append(f"{where}: unanswerable needs why_unanswerable and checked_terms")
            for term in row.get("checked_terms") or []:
                hits = len(re.findall(term.lower(), text))
                counts["checked_term_hits"] += hits
    total = counts["answerable"] + counts["unanswerable"]
    print(f"{path.name}: {total} questions, {counts['answerable']} answerable "
          f"({counts['multi_hop']} multi_hop), {counts['unanswerable']} unanswerable")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cache: dict[str, str] = {}
    problems = [p for arg in argv for p in check(Path(arg), cache)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
