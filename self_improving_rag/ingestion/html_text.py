"""An HTML page as a reader sees it: its visible text, with headings as markdown ``#`` lines.

Left out: what a browser never shows (scripts, styles, ``<noscript>``, ``<template>``, the head), what
a page hides (the ``hidden`` attribute, ``aria-hidden="true"``, ``display: none`` or ``visibility:
hidden`` in a ``style`` attribute: an invisible channel for text no reader would check), and site
furniture (navigation, and the page's header, footer and aside outside its content). Text hidden
by a stylesheet's rules is not seen here and stays. The walk keeps its own stack, so no nesting
depth (a page of a thousand unclosed tags) exhausts Python's.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_HEADING_LIKE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
# Private-use characters marking, until the HTML text is tidied, the heading lines made from
# h1..h6 and the fence lines around <pre> blocks: only lines so marked are headings or fences,
# whatever the page's own text holds. They are removed from the page's text before the walk.
HEADING_MARK = "\ue000"
CODE_MARK = "\ue001"
MARKS = (HEADING_MARK, CODE_MARK)
_NO_MARKS = dict.fromkeys(map(ord, MARKS))
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_DROPPED = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe"})
# Site furniture repeated on every page, not the page's content: indexed, a menu or a copyright
# line would match questions on every page, and a page of only these would be a document.
_FURNITURE = frozenset({"nav"})
_FURNITURE_ROLES = frozenset({"navigation"})
# A footer is the page's (copyright, links) outside an article, its main content or a quote;
# inside one it holds footnotes, a byline or a quote's attribution, which are text.
_FOOTER = frozenset({"footer"})
_FOOTER_ROLES = frozenset({"contentinfo"})
_HOLDS_FOOTER = frozenset({"main", "article", "blockquote"})
# A header or aside is furniture (a site banner, a sidebar of links) only outside the page's
# marked content (<main>, <article>): inside it, a header holds the article's title and byline
# and an aside a note or warning on the text. A page that marks no content keeps them both.
_PAGE_LEVEL = frozenset({"header", "aside"})
_PAGE_LEVEL_ROLES = frozenset({"banner", "complementary"})
_CONTENT = frozenset({"main", "article"})
_BLOCKS = frozenset(
    "address article aside blockquote body dd div dl dt fieldset figcaption figure footer form"
    " header hr html li main nav ol p section table tbody thead tfoot tr ul".split()
)
# A style attribute's declaration that hides the element ("display: none", "visibility: hidden").
_STYLE_HIDES = re.compile(r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse))"
                          r"\s*(?:!\s*important\s*)?(?:;|$)", re.IGNORECASE)


def html_to_markdown(html: str) -> tuple[str, str | None]:
    """Visible text with headings as ``#`` lines, and the page title (its <title>, else its first
    visible h1)."""
    from bs4 import BeautifulSoup  # parsing HTML is only needed for HTML sources

    soup = BeautifulSoup(html, "html.parser")
    title = None
    if soup.title and soup.title.get_text(strip=True):
        title = " ".join(soup.title.get_text().split())
    else:
        shown = (h for h in soup.find_all("h1") if not any(_unseen(t) for t in (h, *h.parents)))
        first_h1 = next((h for h in shown if "".join(_strings(h)).strip()), None)
        if first_h1 is not None:
            title = " ".join("".join(_strings(first_h1)).split())
    pieces: list[str] = []
    # A page that marks its content drops the header and aside outside it (see _PAGE_LEVEL).
    _walk(soup, pieces, outside_content=soup.find(_CONTENT) is not None)
    return _tidy_lines("".join(pieces)), title


def _hidden(tag: Any) -> bool:
    """Whether the page hides an element from its readers (see the module's docstring).
    ``hidden="until-found"`` is shown when the reader's search finds it: that stays text."""
    hidden = tag.get("hidden")
    if hidden is not None and str(hidden).strip().lower() != "until-found":
        return True
    if str(tag.get("aria-hidden") or "").strip().lower() == "true":
        return True
    return bool(_STYLE_HIDES.search(str(tag.get("style") or "")))


def _unseen(tag: Any) -> bool:
    """Whether an element's text is never shown: dropped by name, or hidden by the page."""
    return tag.name in _DROPPED or _hidden(tag)


def _strings(node: Any) -> Iterator[str]:
    """The text of ``node`` a reader sees, in order (hidden and dropped elements left out)."""
    from bs4 import Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

    stack = list(reversed(list(node.children)))
    while stack:
        child = stack.pop()
        if isinstance(child, (Comment, Declaration, Doctype, ProcessingInstruction)):
            continue
        if isinstance(child, NavigableString):
            yield str(child)
        elif isinstance(child, Tag) and not _unseen(child):
            stack.extend(reversed(list(child.children)))


def _tidy_lines(text: str) -> str:
    """Outside code: strip indentation, keep one blank line between blocks, and escape "#"
    and fence lines that did not come from headings or <pre> blocks. Only the lines the walk
    marked open or close a code block, so a "```" line in a <pre> block or a paragraph cannot
    turn the rest of the page into code (or code into text)."""
    lines: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if line.startswith(CODE_MARK):
            in_code = not in_code
            lines.append(line[len(CODE_MARK) :])
            continue
        if in_code:
            lines.append(line)
            continue
        line = line.strip()
        if not line and lines and not lines[-1]:
            continue
        if line.startswith(HEADING_MARK):
            line = line[len(HEADING_MARK) :]
        elif _MD_HEADING_LIKE.match(line) or _MD_FENCE.match(line):
            line = "\\" + line
        lines.append(line)
    # Every mark made starts a line and is consumed above; this only makes sure of it.
    return "\n".join(lines).translate(_NO_MARKS)


def _is_furniture(tag: Any, outside_content: bool, in_content: bool = False) -> bool:
    """Whether an element is site furniture, not page text (see _FURNITURE): ``in_content``,
    it is inside an article, the main content or a quote, whose footers are text."""
    role = str(tag.get("role") or "").strip().lower()
    if tag.name in _FURNITURE or role in _FURNITURE_ROLES:
        return True
    if not in_content and (tag.name in _FOOTER or role in _FOOTER_ROLES):
        return True
    return outside_content and (tag.name in _PAGE_LEVEL or role in _PAGE_LEVEL_ROLES)


def _code_fence(code: str) -> str:
    """A backtick fence longer than any run of backticks in ``code``, so no line of the code
    closes it (the rule section detection follows)."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def _finish_item(item: list[str], out: list[str]) -> None:
    """A list item's text into ``out``: "- " goes before its first text, also when that text is in
    a <p> of its own; an item that opens with a heading or code block keeps it at a line start,
    unbulleted."""
    body = "".join(item)
    first = body.lstrip()
    if first.startswith(MARKS):
        out.append("\n" + body)
    elif first:
        out.append("\n- " + first)


def _walk(root: Any, out: list[str], outside_content: bool = False) -> None:
    """Append the visible text under ``root`` to ``out``. Depth first with a stack of its own: an
    entry is a node to read with the list its text goes to and its two flags (``outside_content``:
    the page marks content and this is outside it; ``in_content``: inside an article, the main
    content or a quote), or something to do once a node's children are read (text to append, a
    list item to finish)."""
    from bs4 import Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

    stack: list[tuple] = []

    def children(node: Any, target: list[str], outside: bool, held: bool) -> None:
        stack.extend(("node", child, target, outside, held) for child in reversed(list(node.children)))

    children(root, out, outside_content, False)
    while stack:
        kind, child, target, outside, held = stack.pop()
        if kind == "text":
            target.append(child)
            continue
        if kind == "item":
            _finish_item(child, target)
            continue
        if isinstance(child, (Comment, Declaration, Doctype, ProcessingInstruction)):
            continue
        if isinstance(child, NavigableString):
            target.append(re.sub(r"\s+", " ", str(child).translate(_NO_MARKS)))
            continue
        if not isinstance(child, Tag) or _unseen(child) or _is_furniture(child, outside, held):
            continue
        name = child.name
        inner = outside and name not in _CONTENT
        held = held or name in _HOLDS_FOOTER
        if name in _HEADINGS:
            heading = " ".join(" ".join(_strings(child)).split())
            if heading:
                target.append(f"\n\n{HEADING_MARK}{'#' * _HEADINGS[name]} {heading}\n\n")
        elif name == "br":
            target.append("\n")
        elif name == "pre":
            # Fenced so that "#" lines in code are not taken for headings.
            code = "".join(_strings(child)).translate(_NO_MARKS).strip("\n")
            fence = _code_fence(code)
            target.append(f"\n\n{CODE_MARK}{fence}\n{code}\n{CODE_MARK}{fence}\n\n")
        elif name == "li":
            item: list[str] = []
            stack.append(("item", item, target, outside, held))
            children(child, item, inner, held)
        elif name in ("td", "th"):
            stack.append(("text", " ", target, outside, held))
            children(child, target, inner, held)
        elif name in _BLOCKS:
            target.append("\n\n")
            stack.append(("text", "\n\n", target, outside, held))
            children(child, target, inner, held)
        else:
            children(child, target, inner, held)
