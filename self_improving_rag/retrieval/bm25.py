"""BM25 retrieval (bm25s, English stemming and stop words)."""

from __future__ import annotations

from .index import bm25_tokenize


class BM25Retriever:
    """Top-k chunks by BM25 over the embedded text (breadcrumb included)."""

    def __init__(self, bm25, n_docs: int) -> None:
        self.bm25 = bm25
        self.n_docs = n_docs

    def retrieve(self, query: str, top_k: int) -> list[tuple[int, float]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if self.n_docs == 0 or self.bm25 is None:
            return []
        tokens = bm25_tokenize([query])
        if not tokens.ids or not tokens.ids[0]:
            return []
        ids, scores = self.bm25.retrieve(tokens, k=min(top_k, self.n_docs), show_progress=False, n_threads=1)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]
