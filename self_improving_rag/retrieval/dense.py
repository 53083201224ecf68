"""Dense retrieval over a FAISS inner-product index of unit vectors."""

from __future__ import annotations

import numpy as np


class FaissDenseRetriever:
    """Top-k chunks by cosine similarity (inner product of normalised vectors)."""

    def __init__(self, index) -> None:
        self.index = index

    def retrieve(self, query_vec: np.ndarray, top_k: int) -> list[tuple[int, float]]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        n = self.index.ntotal
        if n == 0:
            return []
        q = np.ascontiguousarray(query_vec.reshape(1, -1), dtype=np.float32)
        scores, ids = self.index.search(q, min(top_k, n))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]
