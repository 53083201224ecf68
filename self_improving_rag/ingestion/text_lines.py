"""A text as lines with their offsets, and the headings section detection finds in them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """One line of a text: its offset in the text and its text."""

    start: int
    text: str  # without its newline


@dataclass(frozen=True)
class Heading:
    """A heading found in a text: its line's offset, its level (1 is the outermost) and its title."""

    start: int
    level: int
    title: str


def split_lines(text: str) -> list[Line]:
    """The lines of ``text`` (split at "\\n") with their offsets."""
    lines = []
    position = 0
    for line in text.split("\n"):
        lines.append(Line(position, line))
        position += len(line) + 1
    return lines


def is_blank(lines: list[Line], index: int) -> bool:
    """Out-of-range lines count as blank: the edges of the text separate like blank lines."""
    return not 0 <= index < len(lines) or not lines[index].text.strip()


def normalise_space(text: str) -> str:
    """Runs of whitespace as one space, none at the ends."""
    return " ".join(text.split())
