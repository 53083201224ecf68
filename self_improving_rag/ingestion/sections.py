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
    "text", "pdf"       Book structure (below). When a text has no book heading at all,
                        markdown headings are used instead, so a README saved as .txt works.

Book headings. A heading is a short line (at most 80 characters) that stands alone: a blank
line or the edge of the text before and after it. PDF text extraction loses blank lines, so in
"pdf" texts a numbered or front-matter heading needs only a line of its own (bare numerals must
still stand alone).
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
a final full stop, surrounding underscores and footnote marks such as "[6]" are dropped. An inline "title" that reads like prose (two or more lower-case content
words) means the line is a sentence, not a heading.

Levels: BOOK 1, PART 1 (2 inside a book), chapters one below the innermost book or part seen so
far (1 when there is none); front and back matter are always level 1 and close open parts.

Contents listings: a heading whose key (kind, number and, for chapters, the enclosing part)
appears again later, and that is followed by fewer than ``MIN_BODY_CHARS`` non-space characters
before the next heading, is an entry of a contents listing and is dropped. So is a heading that
directly follows a dropped entry when its key recurs too: the last line of a listing may be
followed by front matter rather than by another heading. A heading with the same key as the
heading just before it (a PDF's running page header) is dropped as well.

Each ``Section`` has ``start`` = offset of its heading line, ``end`` = start of the next section
at the same or a higher level (smaller number) or ``len(text)``, and ``path`` = the titles from
the outermost enclosing section down to itself (the document title is not included).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from self_improving_rag.types import Section

FORMATS = ("text", "markdown", "html", "pdf")
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
_FOOTNOTE = re.compile(r"\s*\[\d+\]\s*$")
_ABBREVIATION_END = re.compile(r"(?:\b\w\.){2,}$")  # "M.D." keeps its final stop
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
# Words that stay lower-case in a title; anything else lower-case marks prose.
_SMALL_WORDS = frozenset(
    "a an and as at but by for from in into nor of on onto or over the to upon with within"
    " without than that via vs".split()
)


@dataclass(frozen=True)
class _Line:
    start: int
    text: str  # without its newline


@dataclass(frozen=True)
class _Heading:
    start: int
    level: int
    title: str


@dataclass(frozen=True)
class _Candidate:
    line: int  # index of the heading line
    after: int  # index of the first line after the heading (and its title line)
    kind: str  # book | part | chapter | letter | roman | special
    number: int  # 0 for front and back matter
    title: str  # display title, e.g. "Chapter I: Mr. Sherlock Holmes"


# ---------------------------------------------------------------- public API


def detect_sections(text: str, fmt: str, title: str) -> tuple[Section, ...]:
    """Return the section tree of ``text`` flattened in document order (see module docstring)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    lines = _split_lines(text)
    if fmt in ("markdown", "html"):
        headings = _markdown_headings(lines, title, markdown=fmt == "markdown")
    else:
        # PDF extraction drops blank lines, so there a heading needs only its own line.
        headings = _book_headings(lines, spaced=fmt == "text") or _markdown_headings(lines, title)
    return _to_sections(headings, len(text))


def markdown_title(text: str) -> str | None:
    """The title a markdown text gives itself: its first heading, when that is level 1 (``#`` or
    underlined with ``=``) and nothing but blank lines, HTML tags and images (a logo, a row of
    badges) stands above it; else None. A level-1 heading after body text or after other
    headings (an "Appendix" near the end) is a section, not the title of what comes before it."""
    lines = _split_lines(text)
    headings = _markdown_headings(lines, "", markdown=True)
    if not headings or headings[0].level != 1 or not _plain_inline(headings[0].title):
        return None  # (a heading of only an image, a logo, names nothing)
    for line in lines:
        if line.start >= headings[0].start:
            break
        stripped = line.text.strip()
        if stripped and not stripped.startswith(("<", "![", "[![")):
            return None
    return headings[0].title


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


# ---------------------------------------------------------------- shared helpers


def _split_lines(text: str) -> list[_Line]:
    lines = []
    position = 0
    for line in text.split("\n"):
        lines.append(_Line(position, line))
        position += len(line) + 1
    return lines


def _is_blank(lines: list[_Line], index: int) -> bool:
    """Out-of-range lines count as blank: the edges of the text separate like blank lines."""
    return not 0 <= index < len(lines) or not lines[index].text.strip()


def _to_sections(headings: list[_Heading], text_len: int) -> tuple[Section, ...]:
    ends = [text_len] * len(headings)
    open_indices: list[int] = []
    for index, heading in enumerate(headings):
        while open_indices and headings[open_indices[-1]].level >= heading.level:
            ends[open_indices.pop()] = heading.start
        open_indices.append(index)
    sections = []
    stack: list[_Heading] = []
    for index, heading in enumerate(headings):
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        path = tuple(h.title for h in stack)
        sections.append(Section(heading.title, heading.level, heading.start, ends[index], path))
    return tuple(sections)


def _normalise_space(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- markdown


def _markdown_headings(lines: list[_Line], doc_title: str, markdown: bool = False) -> list[_Heading]:
    """ATX headings outside fenced code; with ``markdown``, setext headings too and plain
    heading text (see the module docstring)."""
    plain = _plain_inline if markdown else _normalise_space
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
                title = plain(match.group(2)) or _normalise_space(match.group(2))
                headings.append(_Heading(line.start, len(match.group(1)), title))
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


def _setext_heading(block: list[_Line], underline: str) -> _Heading | None:
    """The heading a paragraph ``block`` makes with its ``underline``, or None when the block is
    a list item, a quote or indented code (where the underline is a rule or plain text)."""
    if _INDENTED_CODE.match(block[0].text) or any(_BLOCK_OPENER.match(line.text) for line in block):
        return None
    written = " ".join(line.text.strip() for line in block)
    return _Heading(block[0].start, 1 if "=" in underline else 2, _plain_inline(written) or written)


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
    return _normalise_space("".join(parts))


def _plain_prose(text: str) -> str:
    """Inline markup outside code spans removed: HTML tags, emphasis, backslash escapes."""
    text = _MD_HTML_TAG.sub("", text)
    for pattern in _MD_EMPHASIS:
        previous = None
        while previous != text:  # nested emphasis ("***both***") takes one pass per level
            previous, text = text, pattern.sub(r"\2", text)
    return _MD_ESCAPE.sub(r"\1", text)


def _same_title(a: str, b: str) -> bool:
    return bool(b) and _normalise_space(a).casefold() == _normalise_space(b).casefold()


# ---------------------------------------------------------------- books


def _book_headings(lines: list[_Line], spaced: bool) -> list[_Heading]:
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


def _candidate_at(lines: list[_Line], index: int, spaced: bool) -> _Candidate | None:
    """Return the book heading starting at line ``index``, or None."""
    stripped = lines[index].text.strip()
    if not stripped or len(stripped) > _MAX_HEADING_CHARS:
        return None
    alone = _is_blank(lines, index - 1) and _is_blank(lines, index + 1)
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
    lines: list[_Line], index: int, match: re.Match[str], spaced: bool
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
    lines: list[_Line], index: int, kind: str, number: int, label: str, spaced: bool
) -> _Candidate:
    """Attach the next non-blank line as the title when it looks like one (short, title-cased
    and, in spaced texts, standing alone)."""
    nxt = index + 1
    while nxt < len(lines) and not lines[nxt].text.strip():
        nxt += 1
    if (
        nxt < len(lines)
        and (not spaced or _is_blank(lines, nxt + 1))
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
    title = _normalise_space(title.strip("_ \t"))
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


def _drop_contents_entries(candidates: list[_Candidate], lines: list[_Line]) -> list[_Candidate]:
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


def _body_chars(candidates: list[_Candidate], index: int, lines: list[_Line]) -> int:
    """Non-space characters between a heading block and the next candidate heading."""
    after = candidates[index].after
    stop = candidates[index + 1].line if index + 1 < len(candidates) else len(lines)
    return sum(len("".join(line.text.split())) for line in lines[after:stop])


def _assign_levels(candidates: list[_Candidate], lines: list[_Line]) -> list[_Heading]:
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
        headings.append(_Heading(lines[candidate.line].start, level, candidate.title))
    return headings
