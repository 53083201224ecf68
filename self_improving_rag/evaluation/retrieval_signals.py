"""Signals of the retrieved passages, read before the answer: coverage (how much of the
question's content they hold, by words and by meaning), redundancy (how much they repeat each
other) and grounding (how many the reranker finds relevant). Formulas are in docs/signals.md.
"""

from __future__ import annotations

import re

import numpy as np

from ..retrieval.reranker import sigmoid
from ..text import capitalised_terms, content_terms, term_words
from ..types import Signal

__all__ = ["REDUNDANCY_THRESHOLD", "RELEVANCE_THRESHOLD", "coverage_score", "grounding_score", "redundancy_score",
           "soft_coverage"]

#: A hit counts as relevant (for grounding) from this relevance on: where the reranker's sigmoid
#: crosses 0.5, at ``retrieval.relevance_midpoint``.
RELEVANCE_THRESHOLD = 0.5
#: Two passages whose vectors' cosine reaches this are near duplicates (redundancy).
REDUNDANCY_THRESHOLD = 0.92


def coverage_score(question: str, context: str) -> Signal:
    """Weighted share of the question's content terms present in the context (names count 2x)."""
    q_terms = list(dict.fromkeys(content_terms(question)))
    if not q_terms:
        return Signal("coverage", None, "the question has no content words to look for")
    ctx = set(content_terms(context))
    names = capitalised_terms(question)
    weights = {t: (2.0 if t in names else 1.0) for t in q_terms}
    found = [t for t in q_terms if t in ctx]
    missing = [t for t in q_terms if t not in ctx]
    shown = term_words(question)
    missing_words = [shown.get(t, t) for t in missing]  # the question's own words, for messages
    value = sum(weights[t] for t in found) / sum(weights.values())
    reason = (f"{len(found)}/{len(q_terms)} question terms in the context"
              + (f"; missing: {', '.join(repr(m) for m in missing_words[:5])}" if missing else ""))
    return Signal("coverage", value, reason, {"found": found, "missing": missing, "missing_words": missing_words})


def soft_coverage(question_vec: np.ndarray, sentence_vecs: np.ndarray, sentences: list[str],
                  slope: float = 10.0, midpoint: float = 0.35) -> dict:
    """Embedding-based coverage: σ(slope · (max_s cos(question, s) − midpoint)) over the context's
    sentences, with the best sentence. Catches paraphrase (the context says it in other words),
    which the lexical share misses; reported beside it in ``coverage.detail``."""
    if len(sentences) == 0:
        return {"soft": None, "best_cosine": None, "best_sentence": None}
    sims = sentence_vecs @ question_vec
    i = int(np.argmax(sims))
    cos = float(sims[i])
    return {"soft": round(sigmoid(slope * (cos - midpoint)), 4),
            "best_cosine": round(cos, 4), "best_sentence": sentences[i][:200]}


def redundancy_score(vectors: np.ndarray, texts: list[str], threshold: float) -> Signal:
    """Share of passages that nearly duplicate an earlier one (cosine >= threshold or word Jaccard >= 0.6)."""
    n = len(texts)
    if n < 2:
        return Signal("redundancy", None, "fewer than two passages")
    dups = []
    word_sets = [set(re.findall(r"\w+", t.lower())) for t in texts]
    for j in range(1, n):
        for i in range(j):
            cos = float(vectors[i] @ vectors[j])
            jac = len(word_sets[i] & word_sets[j]) / max(1, len(word_sets[i] | word_sets[j]))
            if cos >= threshold or jac >= 0.6:
                dups.append({"passage": j + 1, "duplicates": i + 1, "cosine": round(cos, 3), "jaccard": round(jac, 3)})
                break
    value = len(dups) / (n - 1)
    return Signal("redundancy", value, f"{len(dups)} of {n} passages repeat an earlier one", {"pairs": dups})


def grounding_score(relevances: list[float], threshold: float) -> Signal:
    """Share of retrieved passages whose reranker relevance (after sigmoid) is >= threshold."""
    if not relevances:
        return Signal("grounding", 0.0, "retrieval returned nothing", {"relevance": []})
    rel = [r for r in relevances if r >= threshold]
    value = len(rel) / len(relevances)
    return Signal("grounding", value, f"{len(rel)}/{len(relevances)} passages relevant (max relevance {max(relevances):.2f})",
                  {"relevance": [round(r, 3) for r in relevances]})
