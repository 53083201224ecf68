"""Fixed-size chunker: windows of N embedder tokens with overlap, snapped to sentence ends."""

from __future__ import annotations

from ...types import Chunk, Document
from .base import EmbedFn, TokenCounter, leaf_spans, make_chunk, pack, sentence_units, split_long, text_budget


class FixedChunker:
    """Windows of at most ``size`` tokens, snapped to sentence ends, ignoring section borders.
    Each window starts with the last whole sentences of the one before it that hold at most
    ``overlap`` tokens: when the last sentence alone is longer than that, nothing is repeated
    (a window never starts inside a sentence that is not itself cut for being too long)."""

    name = "fixed"

    def __init__(self, size: int = 200, overlap: int = 30, embed_limit: int = 256) -> None:
        if size < 16:
            raise ValueError(f"size must be >= 16 tokens, got {size}")
        if not 0 <= overlap < size:
            raise ValueError(f"overlap must be in [0, size), got {overlap} for size {size}")
        self.size = size
        self.overlap = overlap
        self.embed_limit = embed_limit

    def params(self) -> dict:
        return {"size": self.size, "overlap": self.overlap, "embed_limit": self.embed_limit}

    def chunk(self, doc: Document, tokenizer: TokenCounter, embed: EmbedFn | None = None) -> list[Chunk]:
        size = text_budget(doc, (), self.size, tokenizer, self.embed_limit, with_breadcrumb=False)
        units = []
        for u in sentence_units(doc.text, 0, len(doc.text), tokenizer):
            units.extend(split_long(doc.text, u, size, tokenizer))
        spans = leaf_spans(doc)
        chunks = []
        for pos, (s, e, n) in enumerate(pack(units, size, self.overlap)):
            path = next((p for a, b, p in spans if a <= s < b), ())
            chunks.append(make_chunk(doc, self.name, s, e, n, path, pos, embed_crumb=None))
        return chunks
