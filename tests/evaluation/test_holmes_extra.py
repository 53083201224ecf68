"""The project's own Holmes question set (data/qa/holmes_extra.jsonl) stays usable as a held-out
set for sherlock_dev: it loads, its gold answers are in its books, and it asks none of
sherlock_dev's questions."""

from __future__ import annotations

import json
import re
from pathlib import Path

from self_improving_rag.evaluation.datasets import load_qa

REPO = Path(__file__).resolve().parents[2]
EXTRA = REPO / "data" / "qa" / "holmes_extra.jsonl"
BOOKS = {"pg244": "pg244_a_study_in_scarlet.txt", "pg2097": "pg2097_the_sign_of_the_four.txt",
         "pg2852": "pg2852_the_hound_of_the_baskervilles.txt", "pg3289": "pg3289_the_valley_of_fear.txt"}


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower().replace("’", "'")))


def test_the_set_loads_with_unique_ids_and_both_kinds_of_question():
    items = load_qa(EXTRA)
    assert len(items) == len({i.id for i in items}) == 128
    assert sum(not i.answerable for i in items) == 19
    assert all(i.answers for i in items if i.answerable)


def test_every_short_gold_answer_is_in_its_book(shared_dir):
    """A who/what/where/when/numeric/multi_hop answer is a span of its book (its first variant):
    a typo in a gold answer would mark every right answer wrong."""
    texts = {b: _words((shared_dir / "data/corpora/sherlock" / f).read_text(encoding="utf-8-sig"))
             for b, f in BOOKS.items()}
    rows = [json.loads(line) for line in EXTRA.read_text(encoding="utf-8").splitlines() if line.strip()]
    missing = [r["id"] for r in rows if r["answerable"] and r["type"] not in ("why", "how")
               and _words(r["answers"][0]) not in texts[r["book"]]]
    assert missing == []


def test_no_question_shares_a_gold_answer_and_its_words_with_sherlock_dev(shared_dir):
    """Held out: no question of this set asks for a fact a sherlock_dev question asks for (the same
    gold answer, asked about with many of the same words)."""
    stop = {"the", "a", "an", "of", "to", "in", "on", "at", "and", "was", "did", "what", "which", "who", "how",
            "when", "where", "why", "his", "her", "he", "she", "that", "for", "with", "by", "had", "from"}

    def terms(q: str) -> set[str]:
        return {w for w in _words(q).split() if w not in stop and len(w) > 2}

    dev = load_qa(shared_dir / "data/qa/sherlock_dev.jsonl")
    clashes = []
    for item in load_qa(EXTRA):
        for d in dev:
            same_answer = {_words(a) for a in item.answers} & {_words(a) for a in d.answers}
            a, b = terms(item.question), terms(d.question)
            if same_answer and len(a & b) / len(a | b) >= 0.1:
                clashes.append((item.id, d.id))
    assert clashes == []
