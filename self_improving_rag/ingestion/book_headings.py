"""Book headings, read in "text" and "pdf" documents: PART, BOOK, CHAPTER and LETTER lines, bare
roman numerals, front and back matter; contents listings and running page headers dropped.

A heading is a short line (at most 80 characters) that stands alone: a blank line or the edge of
the text before and after it. PDF text extraction loses blank lines, so in "pdf" texts a
numbered or front-matter heading needs only a line of its own (bare numerals must still stand
alone).
    PART / BOOK + number   "PART I.", "Part 2--The Marsh", "PART ONE"      -> "Part I"
    CHAPTER / LETTER + n   "CHAPTER I. MR. SHERLOCK HOLMES.", "Chapter 3"   -> "Chapter 3"
    bare roman numeral     "IV" or "IV." -- only in books with no CHAPTER line
                           and at least two such lines                      -> "Chapter IV"
    front and back matter  PREFACE, PROLOGUE, EPILOGUE, FOREWORD,
                           INTRODUCTION, AFTERWORD (optionally "THE ...")   -> "Preface"
Numbers may be arabic, roman or words (one .. twenty). A chapter's title, written after a
separator on the same line or on the next non-blank line when the heading line is bare
("Chapter I" then "The Art of Waiting"), is appended after a colon, giving path elements such
as "Chapter I: Mr. Sherlock Holmes" or "Part 2: The Marsh". All-capital titles are title-cased;
a final full stop, surrounding underscores and footnote marks such as "[6]" are dropped. An
inline "title" that reads like prose (two or more lower-case content words) means the line is a
sentence, not a heading.

Levels: BOOK 1, PART 1 (2 inside a book), chapters one below the innermost book or part seen so
far (1 when there is none); front and back matter are always level 1 and close open parts.

Contents listings: a heading whose key (kind, number and, for chapters, the enclosing part)
appears again later, and that is followed by fewer than ``MIN_BODY_CHARS`` non-space characters
before the next heading, is an entry of a contents listing and is dropped. So is a heading that
directly follows a dropped entry when its key recurs too: the last line of a listing may be
followed by front matter rather than by another heading. A heading with the same key as the
heading just before it (a PDF's running page header) is dropped as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .text_lines import Heading, Line, is_blank, normalise_space

MIN_BODY_CHARS = 200

_MAX_HEADING_CHARS = 80
_MAX_TITLE_CHARS = 70
_MAX_TITLE_WORDS = 12

_WORD_NUMBERS = {
    word: n
    for n, word in enumerate(
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
        " fifteen sixteen seventeen eighteen nineteen twenty".split(),
        start=1,
    )
}
_NUMBERED = re.compile(
    r"^(?P<kind>part|book|chapter|letter)\s+"
    r"(?P<num>\d{1,3}|[ivxlcdm]+|" + "|".join(_WORD_NUMBERS) + r")(?![\w'’])"
    r"\s*(?:(?:--|[.:,;\-—–])\s*)?(?P<rest>.*)$",
    re.IGNORECASE,
)
_ROMAN_LINE = re.compile(r"^(?P<num>[IVXLCDM]+)\.?$")
_ROMAN_STRICT = re.compile(r"^M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})$")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_SPECIAL = re.compile(
    r"^(?:the\s+)?(?P<kind>preface|prologue|epilogue|foreword|introduction|afterword)\.?$",
    re.IGNORECASE,
)

_FOOTNOTE = re.compile(r"\s*\[\d+\]\s*$")
_ABBREVIATION_END = re.compile(r"(?:\b\w\.){2,}$")  # "M.D." keeps its final stop
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
# Words that stay lower-case in a title; anything else lower-case marks prose.
_SMALL_WORDS = frozenset(
    "a an and as at but by for from in into nor of on onto or over the to upon with within"
    " without than that via vs".split()
)


@dataclass(frozen=True)
class _Candidate:
    line: int  # index of the heading line
    after: int  # index of the first line after the heading (and its title line)
    kind: str  # book | part | chapter | letter | roman | special
    number: int  # 0 for front and back matter
    title: str  # display title, e.g. "Chapter I: Mr. Sherlock Holmes"


def book_headings(lines: list[Line], spaced: bool) -> list[Heading]:
    """Book headings; ``spaced`` texts separate headings from body text by blank lines."""
    candidates = []
    index = 0
    while index < len(lines):
        candidate = _candidate_at(lines, index, spaced)
        if candidate is None:
            index += 1
        else:
            candidates.append(candidate)
            index = candidate.after
    candidates = _drop_stray_numerals(candidates)
    candidates = _drop_contents_entries(candidates, lines)
    candidates = _drop_repeats(candidates)
    return _assign_levels(candidates, lines)


def _candidate_at(lines: list[Line], index: int, spaced: bool) -> _Candidate | None:
    """Return the book heading starting at line ``index``, or None."""
    stripped = lines[index].text.strip()
    if not stripped or len(stripped) > _MAX_HEADING_CHARS:
        return None
    alone = is_blank(lines, index - 1) and is_blank(lines, index + 1)
    if spaced and not alone:
        return None
    special = _SPECIAL.match(stripped)
    if special:
        return _Candidate(index, index + 1, "special", 0, special.group("kind").capitalize())
    numbered = _NUMBERED.match(stripped)
    if numbered:
        return _numbered_candidate(lines, index, numbered, spaced)
    roman = _ROMAN_LINE.match(stripped)
    if roman and alone:  # a lone numeral inside running text is too ambiguous
        number = _roman_value(roman.group("num"))
        if number is None:
            return None
        label = f"Chapter {roman.group('num')}"
        return _with_next_line_title(lines, index, "roman", number, label, spaced)
    return None


def _numbered_candidate(
    lines: list[Line], index: int, match: re.Match[str], spaced: bool
) -> _Candidate | None:
    kind = match.group("kind").lower()
    written = match.group("num")
    number = _number_value(written)
    if number is None:
        return None
    shown = written.capitalize() if written.lower() in _WORD_NUMBERS else written.upper()
    label = f"{kind.capitalize()} {shown}"
    rest = match.group("rest").strip()
    if not rest:
        if kind == "letter":  # a letter's next line is its addressee, not a title
            return _Candidate(index, index + 1, kind, number, label)
        return _with_next_line_title(lines, index, kind, number, label, spaced)
    if rest.endswith((",", ";", ":")) or len(_prose_words(rest)) >= 2 or rest[:1].islower():
        return None  # a sentence that happens to start with "Part II, ..." or "Part 3 of the ..."
    title = _clean_title(rest)
    return _Candidate(index, index + 1, kind, number, f"{label}: {title}" if title else label)


def _with_next_line_title(
    lines: list[Line], index: int, kind: str, number: int, label: str, spaced: bool
) -> _Candidate:
    """Attach the next non-blank line as the title when it looks like one (short, title-cased
    and, in spaced texts, standing alone)."""
    nxt = index + 1
    while nxt < len(lines) and not lines[nxt].text.strip():
        nxt += 1
    if (
        nxt < len(lines)
        and (not spaced or is_blank(lines, nxt + 1))
        and _looks_like_title(lines[nxt].text)
    ):
        title = _clean_title(lines[nxt].text)
        if title:
            return _Candidate(index, nxt + 1, kind, number, f"{label}: {title}")
    return _Candidate(index, index + 1, kind, number, label)


def _looks_like_title(line: str) -> bool:
    stripped = line.strip()
    if (
        len(stripped) > _MAX_TITLE_CHARS
        or len(stripped.split()) > _MAX_TITLE_WORDS
        or stripped.endswith((",", ";", ":"))
        or _NUMBERED.match(stripped)
        or _SPECIAL.match(stripped)
        or _ROMAN_LINE.match(stripped)
    ):
        return False
    first_letter = next((ch for ch in stripped if ch.isalpha()), "")
    return first_letter.isupper() and not _prose_words(stripped)


def _prose_words(text: str) -> list[str]:
    """Lower-case content words: titles have none, sentences have several."""
    return [
        word
        for word in _WORD.findall(text)
        if len(word) >= 4 and word[0].islower() and word.lower() not in _SMALL_WORDS
    ]


def _clean_title(raw: str) -> str:
    title = _FOOTNOTE.sub("", raw.strip())
    title = title.strip("_ \t")
    if title.endswith(".") and not _ABBREVIATION_END.search(title):
        title = title[:-1]
    title = normalise_space(title.strip("_ \t"))
    if any(ch.isalpha() for ch in title) and not any(ch.islower() for ch in title):
        title = _title_case(title)
    return title


def _title_case(text: str) -> str:
    """Title-case an ALL-CAPS title, keeping small words, abbreviations and numerals readable."""
    words = []
    for position, word in enumerate(text.split()):
        bare = word.strip("\"'“”‘’()[]")
        if re.fullmatch(r"(?:[A-Z]\.){2,}", bare) or (len(bare) > 1 and _roman_value(bare)):
            words.append(word)
        elif position > 0 and word.lower() in _SMALL_WORDS:
            words.append(word.lower())
        else:
            words.append(_capitalise_first_letter(word.lower()))
    return " ".join(words)


def _capitalise_first_letter(word: str) -> str:
    """Capitalise a word after any opening quotes; "16th" stays "16th"."""
    for index, ch in enumerate(word):
        if ch.isalnum():
            return word[:index] + ch.upper() + word[index + 1 :]
    return word


def _number_value(written: str) -> int | None:
    if written.isdigit():
        return int(written)
    if written.lower() in _WORD_NUMBERS:
        return _WORD_NUMBERS[written.lower()]
    return _roman_value(written.upper())


def _roman_value(numeral: str) -> int | None:
    """Value of a well-formed upper-case roman numeral, else None ("DID" is a word, not 1001)."""
    if not numeral or not _ROMAN_STRICT.match(numeral):
        return None
    total = 0
    for index, ch in enumerate(numeral):
        value = _ROMAN_VALUES[ch]
        following = _ROMAN_VALUES[numeral[index + 1]] if index + 1 < len(numeral) else 0
        total += -value if value < following else value
    return total


def _drop_stray_numerals(candidates: list[_Candidate]) -> list[_Candidate]:
    """Bare numerals are chapter headings only in books that number chapters that way."""
    romans = [c for c in candidates if c.kind == "roman"]
    uses_chapter_lines = any(c.kind == "chapter" for c in candidates)
    if romans and (uses_chapter_lines or len(romans) < 2):
        return [c for c in candidates if c.kind != "roman"]
    return candidates


def _keys(candidates: list[_Candidate]) -> list[tuple[object, ...]]:
    keys: list[tuple[object, ...]] = []
    part = 0
    for candidate in candidates:
        if candidate.kind in ("part", "book"):
            part = candidate.number
            keys.append((candidate.kind, candidate.number))
        elif candidate.kind in ("chapter", "roman"):
            # Chapter numbers restart in each part of some books, so the part is in the key.
            keys.append(("chapter", part, candidate.number))
        else:
            keys.append((candidate.kind, part, candidate.number, candidate.title))
    return keys


def _drop_contents_entries(candidates: list[_Candidate], lines: list[Line]) -> list[_Candidate]:
    keys = _keys(candidates)
    last_seen = {key: index for index, key in enumerate(keys)}
    kept = []
    previous_dropped = False
    for index, candidate in enumerate(candidates):
        recurs = last_seen[keys[index]] > index
        body = _body_chars(candidates, index, lines)
        if recurs and (body < MIN_BODY_CHARS or previous_dropped):
            previous_dropped = True
            continue
        previous_dropped = False
        kept.append(candidate)
    return kept


def _drop_repeats(candidates: list[_Candidate]) -> list[_Candidate]:
    """Drop a heading that repeats the previous one, such as a PDF's running page header."""
    keys = _keys(candidates)
    return [
        candidate
        for index, candidate in enumerate(candidates)
        if index == 0 or keys[index] != keys[index - 1]
    ]


def _body_chars(candidates: list[_Candidate], index: int, lines: list[Line]) -> int:
    """Non-space characters between a heading block and the next candidate heading."""
    after = candidates[index].after
    stop = candidates[index + 1].line if index + 1 < len(candidates) else len(lines)
    return sum(len("".join(line.text.split())) for line in lines[after:stop])


def _assign_levels(candidates: list[_Candidate], lines: list[Line]) -> list[Heading]:
    headings = []
    in_book = in_part = False
    for candidate in candidates:
        if candidate.kind == "book":
            level, in_book, in_part = 1, True, False
        elif candidate.kind == "part":
            level, in_part = 1 + in_book, True
        elif candidate.kind == "special":
            level, in_book, in_part = 1, False, False
        else:
            level = 1 + in_book + in_part
        headings.append(Heading(lines[candidate.line].start, level, candidate.title))
    return headings
