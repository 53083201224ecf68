"""Section detection: turn a cleaned text into its section tree, flattened in document order.

Formats
    "markdown", "html"  ATX headings ``#`` .. ``######`` (the HTML loader has already turned
                        h1..h6 into such lines). Lines inside fenced code blocks (``` or ~~~)
                        are not headings. Level = number of ``#``; the path element is the
                        heading text. A first heading whose text equals the document title
                        is the title itself, not a section.
    "markdown" only     Setext headings too: a paragraph underlined by a line of ``=`` (level
                        1) or ``-`` (level 2); its text is the paragraph's lines joined, and
                        it starts at the paragraph's first line. A ``---`` line after a blank
                        line is a thematic break, after a list item or quote it ends that
                        block, and inside fenced code it is code. Heading text is made plain:
                        emphasis markers and code backticks dropped, links and images read as
                        their text, backslash escapes resolved ("**Bold** [a link](u)" gives
                        "Bold a link"). (HTML headings are plain text already, and text files
                        keep the ATX-only reading so that "----" rules in prose stay text.)
    "text", "pdf"       Book structure (``book_headings``). When a text has no book heading
                        at all, markdown headings are used instead, so a README saved as .txt
                        works.

Each ``Section`` has ``start`` = offset of its heading line, ``end`` = start of the next section
at the same or a higher level (smaller number) or ``len(text)``, and ``path`` = the titles from
the outermost enclosing section down to itself (the document title is not included).
"""

from __future__ import annotations

from collections.abc import Sequence

from self_improving_rag.types import Section

from .book_headings import book_headings
from .markdown_headings import markdown_headings
from .text_lines import Heading, split_lines

FORMATS = ("text", "markdown", "html", "pdf")


def detect_sections(text: str, fmt: str, title: str) -> tuple[Section, ...]:
    """Return the section tree of ``text`` flattened in document order (see module docstring)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    lines = split_lines(text)
    if fmt in ("markdown", "html"):
        headings = markdown_headings(lines, title, markdown=fmt == "markdown")
    else:
        # PDF extraction drops blank lines, so there a heading needs only its own line.
        headings = book_headings(lines, spaced=fmt == "text") or markdown_headings(lines, title)
    return _to_sections(headings, len(text))


def breadcrumb(doc_title: str, sections: Sequence[Section], offset: int) -> str:
    """Return "Doc Title > Part I > Chapter 3: The Problem" for the deepest section holding offset.

    Only the document title is returned when no section contains ``offset``.
    """
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    deepest: Section | None = None
    for section in sections:
        if section.start <= offset < section.end and (
            deepest is None or (section.start, section.level) >= (deepest.start, deepest.level)
        ):
            deepest = section
    parts = [doc_title] if doc_title else []
    if deepest is not None:
        parts.extend(deepest.path)
    return " > ".join(parts)


def section_spans(
    sections: Sequence[Section], text_len: int
) -> list[tuple[int, int, tuple[str, ...]]]:
    """Return the leaf spans (start, end, path) that tile [0, text_len) in order.

    A span runs from a heading to the next heading of any level; text before the first
    heading forms a leading span with path ``()``.
    """
    if text_len < 0:
        raise ValueError(f"text_len must be >= 0, got {text_len}")
    previous = 0
    for section in sections:
        if not previous <= section.start <= text_len:
            raise ValueError(
                f"section {section.title!r} starts at {section.start}: sections must be sorted"
                f" by start and lie within [0, {text_len}]"
            )
        previous = section.start
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    first = sections[0].start if sections else text_len
    if first > 0:
        spans.append((0, first, ()))
    for index, section in enumerate(sections):
        stop = sections[index + 1].start if index + 1 < len(sections) else text_len
        if stop > section.start:  # several headings at one offset: the last (deepest) wins
            spans.append((section.start, stop, section.path))
    return spans


def _to_sections(headings: list[Heading], text_len: int) -> tuple[Section, ...]:
    ends = [text_len] * len(headings)
    open_indices: list[int] = []
    for index, heading in enumerate(headings):
        while open_indices and headings[open_indices[-1]].level >= heading.level:
            ends[open_indices.pop()] = heading.start
        open_indices.append(index)
    sections = []
    stack: list[Heading] = []
    for index, heading in enumerate(headings):
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        path = tuple(h.title for h in stack)
        sections.append(Section(heading.title, heading.level, heading.start, ends[index], path))
    return tuple(sections)
