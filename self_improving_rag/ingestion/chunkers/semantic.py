"""Semantic chunker: breakpoints where adjacent sentence windows drift apart in meaning."""

from __future__ import annotations

import numpy as np

from ...types import Chunk, Document
from .base import EmbedFn, TokenCounter, Unit, embed_breadcrumb, make_chunk, pack, sentence_units, split_long
from .section import chunk_path, merge_small_spans, span_budget
from .base import leaf_spans


class SemanticChunker:
    """Splits each section where the cosine distance between consecutive sentence windows is
    above the ``percentile`` of that document's distances, within ``min_tokens``..``max_tokens``."""

    name = "semantic"

    def __init__(self, percentile: float = 90.0, window: int = 1, min_tokens: int = 40, max_tokens: int = 220,
                 embed_limit: int = 256) -> None:
        if not 0 < percentile < 100:
            raise ValueError(f"percentile must be in (0, 100), got {percentile}")
        if max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16, got {max_tokens}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0 <= min_tokens <= max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {min_tokens}")
        self.percentile = percentile
        self.window = window
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.embed_limit = embed_limit

    def params(self) -> dict:
        return {"percentile": self.percentile, "window": self.window, "min_tokens": self.min_tokens,
                "max_tokens": self.max_tokens, "embed_limit": self.embed_limit}

    def chunk(self, doc: Document, tokenizer: TokenCounter, embed: EmbedFn | None = None) -> list[Chunk]:
        if embed is None:
            raise ValueError("the semantic chunker needs an embed function")
        spans = merge_small_spans(doc, leaf_spans(doc), self.min_tokens, tokenizer)
        per_span: list[tuple[tuple[tuple[int, tuple[str, ...]], ...], int, list[Unit]]] = []
        all_units: list[Unit] = []
        for s, e, pieces in spans:
            budget = span_budget(doc, pieces, e, self.max_tokens, tokenizer, self.embed_limit)
            units: list[Unit] = []
            for u in sentence_units(doc.text, s, e, tokenizer):
                units.extend(split_long(doc.text, u, budget, tokenizer))
            per_span.append((pieces, budget, units))
            all_units.extend(units)
        if not all_units:
            return []
        vecs = embed([doc.text[u.start:u.end] for u in all_units])
        distances = window_distances(vecs, self.window)
        # One threshold per document: breakpoints are where this text changes topic most.
        threshold = float(np.percentile(distances, self.percentile)) if len(distances) else 1.0
        chunks: list[Chunk] = []
        offset = 0
        for pieces, budget, units in per_span:
            d = distances[offset:offset + len(units) - 1] if len(units) > 1 else np.zeros(0)
            offset += len(units)
            for group in self._groups(units, d, threshold, budget):
                for cs, ce, n in pack(group, budget):
                    path = chunk_path(pieces, cs, ce)
                    crumb = embed_breadcrumb(doc, path, tokenizer, self.embed_limit)
                    chunks.append(make_chunk(doc, self.name, cs, ce, n, path, len(chunks), embed_crumb=crumb))
        return chunks

    def _groups(self, units: list[Unit], d: np.ndarray, threshold: float, budget: int) -> list[list[Unit]]:
        groups: list[list[Unit]] = [[]]
        tokens = 0
        for i, u in enumerate(units):
            if groups[-1] and (tokens + u.n_tokens > budget or
                               (i > 0 and d[i - 1] > threshold and tokens >= self.min_tokens)):
                groups.append([])
                tokens = 0
            groups[-1].append(u)
            tokens += u.n_tokens
        return [g for g in groups if g]


def window_distances(vecs: np.ndarray, window: int) -> np.ndarray:
    """Cosine distance between the mean of the ``window`` sentences before each gap and after it.

    ``vecs`` rows are unit vectors of consecutive sentences (across section borders; distances
    at borders are ignored by the caller, which splits there anyway).
    """
    n = len(vecs)
    if n < 2:
        return np.zeros(0, dtype=np.float32)
    csum = np.vstack([np.zeros((1, vecs.shape[1]), dtype=np.float64), np.cumsum(vecs, axis=0, dtype=np.float64)])
    out = np.empty(n - 1, dtype=np.float32)
    for g in range(1, n):
        a = csum[g] - csum[max(0, g - window)]
        b = csum[min(n, g + window)] - csum[g]
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        out[g - 1] = 1.0 - float(a @ b / (na * nb)) if na and nb else 1.0
    return out
