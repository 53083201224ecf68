"""Section-aware chunker: chunks stay inside a section (tiny ones merge into the next); paragraphs, then sentences."""

from __future__ import annotations

from ...types import Chunk, Document
from ..sentences import split_paragraphs
from .base import (EmbedFn, TokenCounter, Unit, embed_breadcrumb, leaf_spans, make_chunk, pack, sentence_units,
                   split_long, text_budget)


class SectionChunker:
    """Chunks inside each leaf section; long sections split at paragraphs, then sentences.

    A section smaller than ``min_tokens`` is merged with the following one when both share
    a parent, so a title-only section never becomes a chunk of its own (a heading paragraph
    inside a section still stands alone when the paragraph after it fills a whole chunk). A
    chunk holding text of two merged sibling sections is labelled with both ("Parent > A – B");
    a chunk of one section, with that section. The breadcrumb is prepended to the embedded text
    (kept apart from the raw text).
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
        for s, e, pieces in spans:
            budget = span_budget(doc, pieces, e, self.max_tokens, tokenizer, self.embed_limit)
            units = self._units(doc.text, s, e, budget, tokenizer)
            for cs, ce, n in pack(units, budget):
                path = chunk_path(pieces, cs, ce)
                crumb = embed_breadcrumb(doc, path, tokenizer, self.embed_limit)
                chunks.append(make_chunk(doc, self.name, cs, ce, n, path, len(chunks), embed_crumb=crumb))
        return chunks


Path = tuple[str, ...]
#: A merged span: start, end, and the (start, path) of each section merged into it, in order
#: (one entry when nothing was merged).
MergedSpan = tuple[int, int, tuple[tuple[int, Path], ...]]


def merge_small_spans(doc: Document, spans: list[tuple[int, int, Path]], min_tokens: int,
                      tokenizer: TokenCounter) -> list[MergedSpan]:
    """Merge a tiny span into the next one under the same parent.

    Each merged span remembers where every section in it starts, so that a chunk is labelled
    by the sections its own text comes from (:func:`chunk_path`), not by the last one merged.
    """
    out: list[MergedSpan] = []
    pending: MergedSpan | None = None
    for s, e, path in spans:
        if not doc.text[s:e].strip():
            continue
        pieces: tuple[tuple[int, Path], ...] = ((s, path),)
        if pending is not None:
            ps, pe, ppieces = pending
            ppath = ppieces[-1][1]
            # Merge into a sibling, or into the first child of a parent whose title stands alone.
            if ppath[:-1] == path[:-1] or path[:len(ppath)] == ppath:
                s = ps
                pieces = ppieces + pieces
            else:
                out.append(pending)
            pending = None
        if tokenizer.count(doc.text[s:e]) < min_tokens:
            pending = (s, e, pieces)
        else:
            out.append((s, e, pieces))
    if pending is not None:
        out.append(pending)
    return out


def _piece_ends(pieces: tuple[tuple[int, Path], ...], end: int) -> list[int]:
    """Where each piece of a merged span ends: the next one's start, the last at ``end``."""
    return [p[0] for p in pieces[1:]] + [end]


def span_budget(doc: Document, pieces: tuple[tuple[int, Path], ...], end: int, max_tokens: int,
                tokenizer: TokenCounter, embed_limit: int) -> int:
    """Tokens of text a chunk of this merged span may hold: enough room is left for the longest
    label any of its chunks can get (the sections from piece i to piece j, for every i <= j)."""
    bounds = _piece_ends(pieces, end)
    labels = {chunk_path(pieces, pieces[i][0], bounds[j]) for i in range(len(pieces)) for j in range(i, len(pieces))}
    return min(text_budget(doc, label, max_tokens, tokenizer, embed_limit, with_breadcrumb=True) for label in labels)


def chunk_path(pieces: tuple[tuple[int, Path], ...], start: int, end: int) -> Path:
    """The section path of text [start, end) of a merged span with these ``pieces``.

    One section: its path. A parent's lone title followed by its child: the child's path (it
    names the parent too). Sibling sections: their parent, then "first – last" of the sections
    the text runs through, so a citation never names only a section the text is not from.
    """
    bounds = _piece_ends(pieces, end)
    paths = [path for (s, path), e in zip(pieces, bounds) if s < end and e > start] or [pieces[-1][1]]
    last = paths[-1]
    # A path that is a prefix of the last one (a parent's lone title) is named by it already.
    others = [p for p in paths if last[:len(p)] != p]
    if not others:
        return last
    first = others[0]
    common = 0
    while common < min(len(first), len(last)) - 1 and first[common] == last[common]:
        common += 1
    return (*last[:common], f"{' > '.join(first[common:])} – {' > '.join(last[common:])}")
