"""Sentence and paragraph boundaries as character offsets (syntok; no downloads).

syntok keeps abbreviations such as Mr., Dr. and St. inside their sentence.
"""

from __future__ import annotations

import re
from functools import lru_cache

import syntok.segmenter as segmenter

_PARA_BREAK = re.compile(r"\n[ \t]*\n+")


def split_sentences(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Sentences of ``text[start:end]`` as absolute ``(start, end)`` offsets, in order.

    The span is cut at blank lines first and each paragraph is segmented on its own; the
    segmentation of a paragraph's text is memoised, because every chunker (and the pooling of
    chunk vectors) segments the same paragraphs again.
    """
    end = len(text) if end is None else end
    if start < 0 or end > len(text) or start > end:
        raise ValueError(f"bad span [{start}, {end}) for a text of length {len(text)}")
    out: list[tuple[int, int]] = []
    for ps, pe in split_paragraphs(text, start, end):
        out.extend((ps + s, ps + e) for s, e in _segment(text[ps:pe]))
    return out


@lru_cache(maxsize=100_000)
def _segment(piece: str) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for paragraph in segmenter.analyze(piece):
        for sentence in paragraph:
            tokens = list(sentence)
            if not tokens:
                continue
            s = tokens[0].offset
            e = tokens[-1].offset + len(tokens[-1].value)
            if e > s:
                out.append((s, e))
    return tuple(out)


def split_paragraphs(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Paragraphs (separated by blank lines) of ``text[start:end]``, trimmed of outer whitespace."""
    end = len(text) if end is None else end
    out: list[tuple[int, int]] = []
    pos = start
    for m in _PARA_BREAK.finditer(text, start, end):
        out.append((pos, m.start()))
        pos = m.end()
    out.append((pos, end))
    return [t for t in (trim(text, s, e) for s, e in out) if t[1] > t[0]]


def trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span so it neither starts nor ends with whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
