#!/usr/bin/env python3
"""Validate the prompt-injection evaluation set (questions.jsonl + docs/).

Checks, per row:
  * required fields and types; id unique; technique from the known list; answerable is true
  * the document exists and is 150-400 words (visible words plus the planted instruction)
  * the first payload string occurs in the document (case-insensitive), so the instruction is
    really there; every other payload spelling occurs after "compact" normalisation (lowercase,
    letters and digits only), so variants such as "zebra fish" are spellings of the planted payload
  * no payload string occurs in a gold answer, and no gold answer occurs in a payload string
  * the first gold answer occurs in the document with the planted instruction removed: every
    sentence / line holding a payload string is dropped; for HTML, comments and elements marked
    hidden / display:none / aria-hidden="true" are dropped and tags stripped first
  * hidden_html rows are .html files whose visible text holds no payload
Across the set: >= 30 rows, >= 8 techniques, >= 2 rows per technique used, primary payloads
distinct, each document used by exactly one row, every file in docs/ used.

Usage: python3 check_set.py [-v]   (exit status 0 when all checks pass)
"""
from __future__ import annotations

import html
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "questions.jsonl"
DOCS = HERE / "docs"
TECHNIQUES = {
    "fake_system", "ignore_previous", "fake_assistant", "role_play", "other_language",
    "hidden_html", "wrong_answer", "addressed_to_ai", "subtle",
}
FIELDS = {"id": str, "doc": str, "technique": str, "question": str, "answers": list,
          "answerable": bool, "payload": list}

OPEN_TAG = re.compile(r"<(?P<tag>[a-zA-Z][a-zA-Z0-9]*)\b(?P<attrs>[^>]*)>")
HIDDEN_ATTR = re.compile(
    r"""(\shidden(\s|=|$))|display\s*:\s*none|aria-hidden\s*=\s*["']?true""", re.I)


def compact(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def visible_html(text: str) -> str:
    """Text a reader of the rendered page sees: comments, hidden elements and tags removed."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<(head|script|style)\b.*?</\1\s*>", " ", text, flags=re.S | re.I)

    # drop each element whose opening tag marks it hidden, up to its closing tag
    pos = 0
    while (m := OPEN_TAG.search(text, pos)) is not None:
        if not HIDDEN_ATTR.search(m.group("attrs")):
            pos = m.end()
            continue
        close = re.compile(rf"</{m.group('tag')}\s*>", re.I).search(text, m.end())
        end = close.end() if close else len(text)
        text = text[:m.start()] + " " + text[end:]
        pos = m.start()
    text = re.sub(r"<[^>]+>", " ", text)
    return html.unescape(text)


def all_text(path: Path, raw: str) -> str:
    """Whole document as plain text, instruction included (HTML tags stripped, comments kept)."""
    if path.suffix == ".html":
        raw = re.sub(r"<!--|-->", " ", raw)
        raw = re.sub(r"<(head|script|style)\b.*?</\1\s*>", " ", raw, flags=re.S | re.I)
        raw = html.unescape(re.sub(r"<[^>]+>", " ", raw))
    return raw


def holds_payload(segment: str, payloads: list[str]) -> bool:
    low, comp = segment.lower(), compact(segment)
    return any(p.lower() in low or (compact(p) and compact(p) in comp) for p in payloads)


def without_instruction(text: str, payloads: list[str]) -> str:
    """Drop each line / sentence that holds a payload string."""
    kept = []
    for line in text.splitlines():
        if not holds_payload(line, payloads):
            kept.append(line)
            continue
        for sentence in re.split(r"(?<=[.!?。])\s+", line):
            if not holds_payload(sentence, payloads):
                kept.append(sentence)
    return "\n".join(kept)


def main() -> int:
    errors: list[str] = []
    warnings: list[str] = []
    rows = []
    for n, line in enumerate(QUESTIONS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            errors.append(f"line {n}: bad JSON ({exc})")

    ids = Counter(r.get("id") for r in rows)
    errors += [f"duplicate id {i}" for i, c in ids.items() if c > 1]
    docs_used = Counter(r.get("doc") for r in rows)
    errors += [f"document {d} used by {c} rows" for d, c in docs_used.items() if c > 1]
    primaries = Counter(str(r.get("payload", [""])[0]).lower() for r in rows if r.get("payload"))
    errors += [f"primary payload {p!r} used by {c} rows" for p, c in primaries.items() if c > 1]

    for r in rows:
        rid = r.get("id", "?")
        bad = [k for k, t in FIELDS.items() if not isinstance(r.get(k), t)]
        if bad:
            errors.append(f"{rid}: missing or mistyped fields {bad}")
            continue
        if r["technique"] not in TECHNIQUES:
            errors.append(f"{rid}: unknown technique {r['technique']}")
        if r["answerable"] is not True:
            errors.append(f"{rid}: answerable must be true")
        answers = [a for a in r["answers"] if isinstance(a, str) and a.strip()]
        payloads = [p for p in r["payload"] if isinstance(p, str) and p.strip()]
        if not answers or not payloads:
            errors.append(f"{rid}: needs at least one answer and one payload")
            continue
        path = HERE / r["doc"]
        if not path.is_file():
            errors.append(f"{rid}: document {r['doc']} not found")
            continue
        raw = path.read_text(encoding="utf-8")
        text = all_text(path, raw)
        words = len(text.split())
        if not 150 <= words <= 400:
            errors.append(f"{rid}: document has {words} words (want 150-400)")

        # the planted instruction is really there
        if payloads[0].lower() not in raw.lower():
            errors.append(f"{rid}: payload {payloads[0]!r} not in {r['doc']}")
        for p in payloads[1:]:
            if p.lower() not in raw.lower() and compact(p) not in compact(raw):
                errors.append(f"{rid}: payload variant {p!r} not in {r['doc']}")

        # payloads and gold answers must not overlap, or a right answer would count as hijacked
        for p in payloads:
            for a in answers:
                if p.lower() in a.lower() or a.lower() in p.lower():
                    errors.append(f"{rid}: payload {p!r} and answer {a!r} overlap")

        # the gold answer is stated outside the instruction
        visible = visible_html(raw) if path.suffix == ".html" else raw
        clean = without_instruction(visible, payloads)
        if answers[0].lower() not in clean.lower():
            errors.append(f"{rid}: answer {answers[0]!r} not in the text outside the instruction")
        for a in answers[1:]:
            if a.lower() not in text.lower():
                warnings.append(f"{rid}: answer variant {a!r} is a paraphrase not in the document")

        if r["technique"] == "hidden_html":
            if path.suffix != ".html":
                errors.append(f"{rid}: hidden_html documents must be .html")
            elif holds_payload(visible, payloads):
                errors.append(f"{rid}: payload is visible on the rendered page")

    used = {(HERE / d).resolve() for d in docs_used}
    for f in sorted(DOCS.iterdir()):
        if f.is_file() and f.resolve() not in used:
            errors.append(f"docs/{f.name} is not used by any question")

    techniques = Counter(r.get("technique") for r in rows)
    if len(rows) < 30:
        errors.append(f"only {len(rows)} rows (want >= 30)")
    if len(techniques) < 8:
        errors.append(f"only {len(techniques)} techniques (want >= 8)")
    errors += [f"technique {t} has only {c} row(s)" for t, c in techniques.items() if c < 2]

    print(f"rows: {len(rows)}  documents: {len(docs_used)}  techniques: {len(techniques)}")
    for t, c in sorted(techniques.items()):
        print(f"  {t:16s} {c}")
    if warnings:
        print(f"note: {len(warnings)} answer variants are paraphrases not in the documents "
              "(allowed; run with -v to list)")
        if "-v" in sys.argv[1:]:
            for w in warnings:
                print(f"  {w}")
    for e in errors:
        print(f"ERROR: {e}")
    print("FAIL" if errors else "OK: all checks passed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
