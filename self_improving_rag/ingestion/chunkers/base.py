"""What every chunker shares: units of text packed into token-bounded chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from ...types import Chunk, Document
from ..sentences import split_sentences, trim

EmbedFn = Callable[[list[str]], np.ndarray]


class TokenCounter(Protocol):
    def spans(self, text: str) -> list[tuple[int, int]]: ...
    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class Unit:
    """A sentence or paragraph span with its token count."""

    start: int
    end: int
    n_tokens: int


class Chunker(Protocol):
    name: str

    def params(self) -> dict: ...
    def chunk(self, doc: Document, tokenizer: TokenCounter, embed: EmbedFn | None = None) -> list[Chunk]: ...


#: Recorded with every chunker's parameters in the index manifest; bump it when chunking code
#: changes what the same parameters produce, so that an index built by the older code is
#: re-chunked (ingest) or named as built differently (search), never mixed silently. Bump it too
#: when reading a file (loaders.py, decoding.py, headers.py, html_text.py, sections.py and its
#: book_headings.py, markdown_headings.py) changes the text or sections of an unchanged file:
#: an ingest reuses the chunks of a file whose bytes and chunker settings are unchanged, and
#: only this version tells it that the same bytes now read differently.
#: 2: split_long cuts between words. 3: a chunk of merged sibling sections names them all.
#: 4: a merged span's text budget leaves room for the longest label any of its chunks gets.
#: 5: a word of over 100 characters counts one token per character, not one [UNK].
#: 6: split_long balances its pieces (no one-token tail after a full piece).
#: 7: split_long cuts at spaces first; a long breadcrumb is shortened for embedding so that it
#:    and the text fit the window; loaders: <pre> fences, no nav/footer, list items, markdown
#:    front matter, titles, setext headings and plain breadcrumbs, invisible characters dropped,
#:    PDF line-end hyphens joined.
CHUNKING_VERSION = 7
#: The most of the embedder's window a breadcrumb may take in a chunk's embedded text: the rest
#: is the chunk's own text, which is what a search should match.
BREADCRUMB_SHARE = 0.25


def leaf_spans(doc: Document) -> list[tuple[int, int, tuple[str, ...]]]:
    """Leaf section spans tiling the document (the whole text when it has no sections)."""
    from ..sections import section_spans

    if not doc.sections:
        return [(0, len(doc.text), ())]
    return section_spans(doc.sections, len(doc.text))


def breadcrumb(doc: Document, path: tuple[str, ...]) -> str:
    return " > ".join((doc.title, *path))


def embed_breadcrumb(doc: Document, path: tuple[str, ...], tokenizer: TokenCounter, embed_limit: int) -> str:
    """The breadcrumb put before a chunk's text for embedding: the full one when it takes at most
    ``BREADCRUMB_SHARE`` of the window, else the title and the innermost headings that fit, the
    middle cut out ("Manual > … > Wiring"), and as a last resort cut to that share. Unshortened,
    deep or long headings could fill the window and leave the chunk's text outside it, invisible
    to dense search. The chunk's ``section`` (shown and cited) keeps the full breadcrumb."""
    cap = max(1, int(embed_limit * BREADCRUMB_SHARE))
    crumb = breadcrumb(doc, path)
    if tokenizer.count(crumb) <= cap:
        return crumb
    for kept in range(len(path) - 1, 0, -1):  # innermost headings kept, most first
        shortened = " > ".join((doc.title, "…", *path[-kept:]))
        if tokenizer.count(shortened) <= cap:
            return shortened
    if len(path) > 1:  # even the title and the innermost heading are too long: as much as fits of
        # the title (at most half the room) and then of the innermost heading
        crumb = " > ".join((_cut_to_tokens(doc.title, max(2, cap // 2), tokenizer), "…", path[-1]))
    return _cut_to_tokens(crumb, cap, tokenizer)


def _cut_to_tokens(text: str, n: int, tokenizer: TokenCounter) -> str:
    """``text`` when it counts at most ``n`` tokens, else its longest start (without a dangling
    " >") that does with "…" after it."""
    if tokenizer.count(text) <= n:
        return text
    spans = tokenizer.spans(text)
    for k in range(min(n, len(spans)) - 1, 0, -1):
        cut = text[:spans[k - 1][1]].rstrip()
        cut = (cut[:-1].rstrip() if cut.endswith(">") else cut) + "…"
        if tokenizer.count(cut) <= n:
            return cut
    return "…"


def sentence_units(text: str, start: int, end: int, tokenizer: TokenCounter) -> list[Unit]:
    return [Unit(s, e, tokenizer.count(text[s:e])) for s, e in split_sentences(text, start, end)]


def split_long(text: str, unit: Unit, max_tokens: int, tokenizer: TokenCounter) -> list[Unit]:
    """Cut a unit longer than ``max_tokens`` into pieces of at most ``max_tokens`` tokens, each cut
    at a space; where a run of text without spaces is longer than a piece (a long URL), between
    two of its words at punctuation; and only where a single word is longer than ``max_tokens``,
    between its word pieces. Punctuation alone is no place to cut while a space is in reach: an
    e-mail address or URL cut at its "." or ":" is found by neither half. The pieces are balanced:
    the tokens left are shared evenly among the fewest pieces that hold them, so a sentence one
    token over the limit becomes two halves, not a full piece and a one-token tail (a lone "."
    that retrieval would return as a passage)."""
    if unit.n_tokens <= max_tokens:
        return [unit]
    piece = text[unit.start:unit.end]
    spans = tokenizer.spans(piece)

    def at_space(k: int) -> bool:  # is there a space before token k?
        return spans[k][0] > spans[k - 1][1]

    def between_words(k: int) -> bool:  # may the text be cut before token k?
        prev_end, start = spans[k - 1][1], spans[k][0]
        return start > prev_end or not (piece[prev_end - 1].isalnum() and piece[start].isalnum())

    def cut_before(i: int, j: int) -> int:
        """Where to end the piece from token i whose balanced end is j: the space nearest to j,
        before it (keeping at least a quarter of the balanced piece) or after it up to the limit (a run
        without spaces that fits a piece is never cut); else the last cut between words at
        punctuation before j; else j."""
        # A space far back would leave a sliver ("See" before a long URL): at least a quarter of
        # the balanced piece must come before it.
        back = next((k for k in range(j, i + max(1, (j - i) // 4) - 1, -1) if at_space(k)), None)
        ahead = next((k for k in range(j + 1, min(i + max_tokens, n - 1) + 1) if at_space(k)), None)
        if back is not None or ahead is not None:
            return min((k for k in (back, ahead) if k is not None), key=lambda k: (abs(k - j), k))
        return next((k for k in range(j, i, -1) if between_words(k)), j)  # j: one word over the limit

    out = []
    i, n = 0, len(spans)
    while i < n:
        left = n - i
        pieces = -(-left // max_tokens)  # the fewest pieces that hold what is left
        j = min(i + -(-left // pieces), n)
        if j < n:
            j = cut_before(i, j)
        s = unit.start + spans[i][0]
        e = unit.start + (spans[j][0] if j < n else len(piece))
        s, e = trim(text, s, e)
        if e > s:
            out.append(Unit(s, e, j - i))
        i = j
    return out


def pack(units: list[Unit], max_tokens: int, overlap: int = 0) -> list[tuple[int, int, int]]:
    """Greedily pack consecutive units into (start, end, tokens) windows of at most ``max_tokens``.

    With ``overlap`` > 0 each window restarts at the last units of the previous one whose
    tokens sum to at most ``overlap``, so windows stay snapped to unit (sentence) ends.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    out: list[tuple[int, int, int]] = []
    i = 0
    n = len(units)
    while i < n:
        j = i
        tokens = 0
        while j < n and (j == i or tokens + units[j].n_tokens <= max_tokens):
            tokens += units[j].n_tokens
            j += 1
        out.append((units[i].start, units[j - 1].end, tokens))
        if j >= n:
            break
        nxt = j
        if overlap > 0:
            back = 0
            k = j - 1
            while k > i and back + units[k].n_tokens <= overlap:
                back += units[k].n_tokens
                k -= 1
            nxt = k + 1
        i = nxt if nxt > i else j
    return out


def make_chunk(doc: Document, strategy: str, start: int, end: int, n_tokens: int, path: tuple[str, ...],
               position: int, embed_crumb: str | None) -> Chunk:
    """A chunk of ``doc.text[start:end]``; its embedded text is ``embed_crumb`` (from
    :func:`embed_breadcrumb`), a line break and the text, or the text alone when it is None."""
    text = doc.text[start:end]
    crumb = breadcrumb(doc, path)
    embed_text = f"{embed_crumb}\n{text}" if embed_crumb is not None else text
    return Chunk(
        chunk_id=Chunk.make_id(doc.doc_id, strategy, start, end, text),
        doc_id=doc.doc_id,
        strategy=strategy,
        text=text,
        embed_text=embed_text,
        start=start,
        end=end,
        section=crumb,
        n_tokens=n_tokens,
        position=position,
    )


def text_budget(doc: Document, path: tuple[str, ...], max_tokens: int, tokenizer: TokenCounter,
                embed_limit: int, with_breadcrumb: bool) -> int:
    """Tokens left for chunk text so that breadcrumb + text fits the embedder's window.

    The breadcrumb is the shortened one (:func:`embed_breadcrumb`), so some room is always left;
    there is no floor above it, which would let breadcrumb + text overflow the window."""
    room = embed_limit - 2  # [CLS] and [SEP]
    if with_breadcrumb:
        room -= tokenizer.count(embed_breadcrumb(doc, path, tokenizer, embed_limit)) + 1
    return max(1, min(max_tokens, room))
