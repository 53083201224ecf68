"""Markdown headings: ATX headings outside fenced code, setext headings (in markdown files), heading
text made plain, and the title a markdown text gives itself. Which formats read them is in
``sections``' docstring."""

from __future__ import annotations

import re

from .text_lines import Heading, Line, normalise_space, split_lines

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# Lines that open a block of their own (a list item, a quote), which no underline makes a heading;
# indented code is such a block only when it opens the paragraph (it cannot interrupt one).
_BLOCK_OPENER = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|^ {0,3}>")
_INDENTED_CODE = re.compile(r"^(?: {4}|\t)")
# Inline markup, for plain heading text. Links and images first (their text may hold code spans).
_MD_IMAGE_OR_LINK = re.compile(r"!?(?<!\\)\[([^\[\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
_MD_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^<>\s]+)>", re.IGNORECASE)
_MD_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_MD_CODE_SPAN = re.compile(r"(?<!\\)(`+)(.+?)(?<!`)\1(?!`)")
_MD_EMPHASIS = (
    re.compile(r"(?<!\\)(\*\*)(?=\S)(.+?)(?<=\S)(?<!\\)\*\*"),
    re.compile(r"(?<![\w\\])(__)(?=\S)(.+?)(?<=\S)(?<!\\)__(?!\w)"),
    re.compile(r"(?<!\\)(~~)(?=\S)(.+?)(?<=\S)(?<!\\)~~"),
    re.compile(r"(?<!\\)(\*)(?=\S)(.+?)(?<=\S)(?<!\\)\*"),
    re.compile(r"(?<![\w\\])(_)(?=\S)(.+?)(?<=\S)(?<!\\)_(?!\w)"),  # not inside snake_case_words
)
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def markdown_title(text: str) -> str | None:
    """The title a markdown text gives itself: its first heading, when that is level 1 (``#`` or
    underlined with ``=``) and nothing but blank lines, HTML tags and images (a logo, a row of
    badges) stands above it; else None. A level-1 heading after body text or after other
    headings (an "Appendix" near the end) is a section, not the title of what comes before it."""
    lines = split_lines(text)
    headings = markdown_headings(lines, "", markdown=True)
    if not headings or headings[0].level != 1 or not _plain_inline(headings[0].title):
        return None  # (a heading of only an image, a logo, names nothing)
    for line in lines:
        if line.start >= headings[0].start:
            break
        stripped = line.text.strip()
        if stripped and not stripped.startswith(("<", "![", "[![")):
            return None
    return headings[0].title


def markdown_headings(lines: list[Line], doc_title: str, markdown: bool = False) -> list[Heading]:
    """ATX headings outside fenced code; with ``markdown``, setext headings too and plain
    heading text (see the docstring of ``sections``)."""
    plain = _plain_inline if markdown else normalise_space
    headings = []
    fence = ""
    paragraph: int | None = None  # index of the first line of the paragraph running so far
    for index, line in enumerate(lines):
        fence_match = _FENCE.match(line.text)
        if fence:
            stripped = line.text.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = ""
            continue
        if fence_match:
            fence, paragraph = fence_match.group(1), None
            continue
        match = _ATX.match(line.text)
        if match:
            if match.group(2) and match.group(2).strip():
                # A heading of only markup ("# ![](logo.png)") keeps its text as written.
                title = plain(match.group(2)) or normalise_space(match.group(2))
                headings.append(Heading(line.start, len(match.group(1)), title))
            paragraph = None
            continue
        if not line.text.strip():
            paragraph = None
            continue
        if markdown and paragraph is not None and _SETEXT_UNDERLINE.match(line.text):
            heading = _setext_heading(lines[paragraph:index], line.text)
            if heading is not None:
                headings.append(heading)
                paragraph = None
                continue
        if markdown and _THEMATIC_BREAK.match(line.text):
            paragraph = None  # "---" ends a list item or quote; it is no underline for what follows
            continue
        if paragraph is None:
            paragraph = index
    if headings and _same_title(headings[0].title, doc_title):
        headings = headings[1:]  # the document's own title heading is not a section
    return headings


def _setext_heading(block: list[Line], underline: str) -> Heading | None:
    """The heading a paragraph ``block`` makes with its ``underline``, or None when the block is
    a list item, a quote or indented code (where the underline is a rule or plain text)."""
    if _INDENTED_CODE.match(block[0].text) or any(_BLOCK_OPENER.match(line.text) for line in block):
        return None
    written = " ".join(line.text.strip() for line in block)
    return Heading(block[0].start, 1 if "=" in underline else 2, _plain_inline(written) or written)


def _plain_inline(text: str) -> str:
    """Markdown heading text as a reader sees it: "**Bold** and [a link](https://x.org)" gives
    "Bold and a link"; code spans keep their text as written, without the backticks."""
    previous = None
    while previous != text:  # a badge is an image inside a link: the image first, then the link
        previous, text = text, _MD_IMAGE_OR_LINK.sub(r"\1", text)
    text = _MD_AUTOLINK.sub(r"\1", text)
    parts = []
    position = 0
    for match in _MD_CODE_SPAN.finditer(text):
        parts.append(_plain_prose(text[position : match.start()]))
        parts.append(match.group(2).strip() or match.group(2))
        position = match.end()
    parts.append(_plain_prose(text[position:]))
    return normalise_space("".join(parts))


def _plain_prose(text: str) -> str:
    """Inline markup outside code spans removed: HTML tags, emphasis, backslash escapes."""
    text = _MD_HTML_TAG.sub("", text)
    for pattern in _MD_EMPHASIS:
        previous = None
        while previous != text:  # nested emphasis ("***both***") takes one pass per level
            previous, text = text, pattern.sub(r"\2", text)
    return _MD_ESCAPE.sub(r"\1", text)


def _same_title(a: str, b: str) -> bool:
    return bool(b) and normalise_space(a).casefold() == normalise_space(b).casefold()
