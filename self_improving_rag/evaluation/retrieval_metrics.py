"""Metrics of retrieval: whether a chunk holds an evidence quote, recall@k and MRR.

Deterministic and side-effect free; recall@k and MRR are ``None`` for no queries, and bad
arguments (k < 1, an empty quote) raise ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["collapse_spaces", "evidence_hit", "recall_at_k", "mrr"]


def collapse_spaces(text: str) -> str:
    """``text`` with every run of whitespace (line breaks too) one space, and none at either end:
    the form in which :func:`evidence_hit` compares a quote with a passage."""
    return " ".join(text.split())


def evidence_hit(chunk_text: str, evidence_quote: str) -> bool:
    """True if the evidence quote occurs in the chunk after collapsing whitespace runs.

    Characters are compared exactly (curly and straight quotes differ): the quotes are
    verbatim copies of the source, so only line wrapping may differ.
    """
    quote = collapse_spaces(evidence_quote)
    if not quote:
        raise ValueError("evidence_quote is empty; an empty quote would match every chunk")
    return quote in collapse_spaces(chunk_text)


def _check_k(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")


def recall_at_k(ranked_hits_per_query: Sequence[Sequence[bool]], k: int) -> float | None:
    """Fraction of queries with at least one relevant item among their first k results.

    ``ranked_hits_per_query[q][i]`` says whether the i-th result of query q is relevant.
    ``None`` when there are no queries.
    """
    _check_k(k)
    if not ranked_hits_per_query:
        return None
    return sum(any(hits[:k]) for hits in ranked_hits_per_query) / len(ranked_hits_per_query)


def mrr(ranked_hits_per_query: Sequence[Sequence[bool]], k: int | None = None) -> float | None:
    """Mean reciprocal rank: mean over queries of 1 / (rank of the first relevant result).

    A query with no relevant result (within the first k, if k is given) contributes 0.
    ``None`` when there are no queries.
    """
    _check_k(k)
    if not ranked_hits_per_query:
        return None
    total = 0.0
    for hits in ranked_hits_per_query:
        window = hits if k is None else hits[:k]
        for rank, hit in enumerate(window, start=1):
            if hit:
                total += 1.0 / rank
                break
    return total / len(ranked_hits_per_query)
