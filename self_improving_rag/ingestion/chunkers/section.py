"""Section-aware chunker: never crosses a section; paragraphs, then sentences."""

from __future__ import annotations

from ...types import Chunk, Document
from ..sentences import split_paragraphs
from .base import EmbedFn, TokenCounter, Unit, leaf_spans, make_chunk, pack, sentence_units, split_long, text_budget


class SectionChunker:
    """Chunks inside each leaf section; long sections split at paragraphs, then sentences.

    A section smaller than ``min_tokens`` is merged with the following one when both share
    a parent, so a title-only section never becomes a chunk of its own (a heading paragraph
    inside a section still stands alone when the paragraph after it fills a whole chunk). The
    breadcrumb is prepended to the embedded text (kept apart from the raw text).
    """

    name = "section"

    def __init__(self, max_tokens: int = 220, min_tokens: int = 40, embed_limit: int = 256) -> None:
        if max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16, got {max_tokens}")
        if not 0 <= min_tokens <= max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {min_tokens}")
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.embed_limit = embed_limit

    def params(self) -> dict:
        return {"max_tokens": self.max_tokens, "min_tokens": self.min_tokens, "embed_limit": self.embed_limit}

    def _units(self, text: str, s: int, e: int, budget: int, tokenizer: TokenCounter) -> list[Unit]:
        units: list[Unit] = []
        for ps, pe in split_paragraphs(text, s, e):
            n = tokenizer.count(text[ps:pe])
            if n <= budget:
                units.append(Unit(ps, pe, n))
                continue
            for u in sentence_units(text, ps, pe, tokenizer):
                units.extend(split_long(text, u, budget, tokenizer))
        return units

    def chunk(self, doc: Document, tokenizer: TokenCounter, embed: EmbedFn | None = None) -> list[Chunk]:
        spans = merge_small_spans(doc, leaf_spans(doc), self.min_tokens, tokenizer)
        chunks: list[Chunk] = []
        for s, e, path in spans:
            budget = text_budget(doc, path, self.max_tokens, tokenizer, self.embed_limit, with_breadcrumb=True)
            units = self._units(doc.text, s, e, budget, tokenizer)
            for cs, ce, n in pack(units, budget):
                chunks.append(make_chunk(doc, self.name, cs, ce, n, path, len(chunks), with_breadcrumb=True))
        return chunks


def merge_small_spans(doc: Document, spans: list[tuple[int, int, tuple[str, ...]]], min_tokens: int,
                      tokenizer: TokenCounter) -> list[tuple[int, int, tuple[str, ...]]]:
    """Merge a tiny span into the next one under the same parent (keeping the later path)."""
    out: list[tuple[int, int, tuple[str, ...]]] = []
    pending: tuple[int, int, tuple[str, ...]] | None = None
    for s, e, path in spans:
        if not doc.text[s:e].strip():
            continue
        if pending is not None:
            ps, _, ppath = pending
            # Merge into a sibling, or into the first child of a parent whose title stands alone.
            if ppath[:-1] == path[:-1] or path[:len(ppath)] == ppath:
                s = ps
            else:
                out.append(pending)
            pending = None
        if tokenizer.count(doc.text[s:e]) < min_tokens:
            pending = (s, e, path)
        else:
            out.append((s, e, path))
    if pending is not None:
        out.append(pending)
    return out
