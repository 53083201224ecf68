"""The blocks at a document's edges that name it and are not its text: a markdown file's YAML
front matter, and a Project Gutenberg book's licence header and footer (its Title and Author read
from the header)."""

from __future__ import annotations

import re
from typing import Any

_GUTENBERG_START = re.compile(
    r"^\s*\*{3}\s*START OF (?:THIS|THE) PROJECT GUTENBERG E-?BOOK.*$", re.IGNORECASE | re.MULTILINE
)
_GUTENBERG_END = re.compile(
    r"^\s*\*{3}\s*END OF (?:THIS|THE) PROJECT GUTENBERG E-?BOOK.*$", re.IGNORECASE | re.MULTILINE
)
# The "End of (the) Project Gutenberg's X" line that precedes the END marker.
_GUTENBERG_END_NOTE = re.compile(r"^\s*End of (?:the )?Project Gutenberg", re.IGNORECASE)
_END_NOTE_LOOKBACK = 10
_HEADER_FIELD = re.compile(r"^(Title|Author):[ \t]*(.*)$", re.IGNORECASE)
# A YAML block between "---" lines at the very top of a markdown file (Jekyll, Hugo, Pandoc).
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)


def strip_gutenberg(text: str) -> str | None:
    """The body between the START and END markers, or None when the text is not a PG book."""
    start = _GUTENBERG_START.search(text)
    end = _GUTENBERG_END.search(text, start.end() if start else 0)
    if start is None and end is None:
        return None
    body_start = start.end() if start else 0
    body_end = end.start() if end else len(text)
    lines = text[body_start:body_end].split("\n")
    # Drop the "End of Project Gutenberg's ..." note that sits just above the END marker.
    for index in range(len(lines) - 1, max(-1, len(lines) - 1 - _END_NOTE_LOOKBACK), -1):
        if _GUTENBERG_END_NOTE.match(lines[index]):
            lines = lines[:index]
            break
    return "\n".join(lines)


def gutenberg_fields(text: str) -> tuple[str | None, str | None]:
    """Title and Author from the header above the START marker (first line of each)."""
    start = _GUTENBERG_START.search(text)
    header = text[: start.start()] if start else text[:5000]
    fields: dict[str, str] = {}
    for line in header.split("\n"):
        match = _HEADER_FIELD.match(line.strip())
        if match and match.group(2).strip():
            fields.setdefault(match.group(1).lower(), " ".join(match.group(2).split()))
    return fields.get("title"), fields.get("author")


def split_front_matter(text: str) -> tuple[str, dict | None]:
    """(text without its front matter, the front matter's fields), or (text, None) when the text
    has none. Front matter is a "---" line at the very top, a YAML mapping, and a closing "---" or
    "..." line; a block that does not read as a mapping ("---", a paragraph, "---") is a thematic
    break and a setext heading, and stays text."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, None
    import yaml  # a dependency already (config files)

    block = match.group(1) or ""
    try:
        fields = yaml.safe_load(block)
    except yaml.YAMLError:
        return text, None
    if fields is None and not block.strip():
        fields = {}  # "---" twice: empty front matter
    if not isinstance(fields, dict):
        return text, None
    return text[match.end():], fields


def field_text(value: Any) -> str | None:
    """A front matter field as one line of text: a string or number, or a list of them joined
    by commas (several authors); None for anything else or nothing."""
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return None
    return " ".join(str(value).split()) or None
