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
#: re-chunked (ingest) or named as built differently (search), never mixed silently.
#: 2: split_long cuts between words. 3: a chunk of merged sibling sections names them all.
#: 4: a merged span's text budget leaves room for the longest label any of its chunks gets.
#: 5: a word of over 100 characters counts one token per character, not one [UNK].
#: 6: split_long balances its pieces (no one-token tail after a full piece).
CHUNKING_VERSION = 6


def leaf_spans(doc: Document) -> list[tuple[int, int, tuple[str, ...]]]:
    """Leaf section spans tiling the document (the whole text when it has no sections)."""
    from ..sections import section_spans

    if not doc.sections:
        return [(0, len(doc.text), ())]
    return section_spans(doc.sections, len(doc.text))


def breadcrumb(doc: Document, path: tuple[str, ...]) -> str:
    return " > ".join((doc.title, *path))


def sentence_units(text: str, start: int, end: int, tokenizer: TokenCounter) -> list[Unit]:
    return [Unit(s, e, tokenizer.count(text[s:e])) for s, e in split_sentences(text, start, end)]


def split_long(text: str, unit: Unit, max_tokens: int, tokenizer: TokenCounter) -> list[Unit]:
    """Cut a unit longer than ``max_tokens`` into pieces of at most ``max_tokens`` tokens, each cut
    between two words (not between the word pieces of one word), unless a single word is longer
    than ``max_tokens``. The pieces are balanced: the tokens left are shared evenly among the
    fewest pieces that hold them, so a sentence one token over the limit becomes two halves, not
    a full piece and a one-token tail (a lone "." that retrieval would return as a passage)."""
    if unit.n_tokens <= max_tokens:
        return [unit]
    piece = text[unit.start:unit.end]
    spans = tokenizer.spans(piece)

    def between_words(k: int) -> bool:  # may the text be cut before token k?
        prev_end, start = spans[k - 1][1], spans[k][0]
        return start > prev_end or not (piece[prev_end - 1].isalnum() and piece[start].isalnum())

    out = []
    i, n = 0, len(spans)
    while i < n:
        left = n - i
        pieces = -(-left // max_tokens)  # the fewest pieces that hold what is left
        j = min(i + -(-left // pieces), n)
        if j < n:
            k = j
            while k > i + 1 and not between_words(k):
                k -= 1
            if between_words(k):  # else one word is longer than max_tokens: cut it at the limit
                j = k
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
               position: int, with_breadcrumb: bool) -> Chunk:
    text = doc.text[start:end]
    crumb = breadcrumb(doc, path)
    embed_text = f"{crumb}\n{text}" if with_breadcrumb else text
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
    """Tokens left for chunk text so that breadcrumb + text fits the embedder's window."""
    room = embed_limit - 2  # [CLS] and [SEP]
    if with_breadcrumb:
        room -= tokenizer.count(breadcrumb(doc, path)) + 1
    return max(16, min(max_tokens, room))
