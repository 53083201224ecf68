"""Markup read as a reader sees it: HTML code blocks, page furniture and list items; markdown
titles, front matter, setext headings and plain breadcrumbs; invisible format characters and
PDF line-end hyphens. Each test holds a small document written for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from self_improving_rag.errors import IngestionError
from self_improving_rag.ingestion.chunkers import make_chunker
from self_improving_rag.ingestion.html_text import MARKS as _MARKS
from self_improving_rag.ingestion.loaders import load_document
from self_improving_rag.ingestion.sections import detect_sections
from self_improving_rag.retrieval.embedder import HashEmbedder
from tests.ingestion.test_loaders import _pdf_bytes

TOK = HashEmbedder(dim=64).tokenizer


def _load(tmp_path: Path, name: str, data: str | bytes):
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return load_document(path)


def _crumb_of(doc, word: str) -> str:
    """The breadcrumb of the section chunk holding ``word``."""
    chunks = make_chunker("section", {"max_tokens": 60, "min_tokens": 0}, 256).chunk(doc, TOK)
    return next(c.section for c in chunks if word in c.text)


# ---------------------------------------------------------------- HTML


CODE_PAGE = ("<h1>Tips</h1><p>Type:</p><pre>```python\nprint(1)\n```</pre>"
             "<h2>Second Topic</h2><p>About secondword.</p>")


def test_a_fence_line_inside_pre_does_not_end_the_code_block(tmp_path: Path) -> None:
    """A ``` line inside <pre> flipped the tidier's "in code" state: later headings were not
    sections and the heading marker leaked into the text ("\\ue000## Second Topic")."""
    doc = _load(tmp_path, "tips.html", "<title>Coding notes</title>" + CODE_PAGE)
    assert [s.path for s in doc.sections] == [("Tips",), ("Tips", "Second Topic")]
    assert "## Second Topic" in doc.text.split("\n")
    assert "```python\nprint(1)\n```" in doc.text  # the code is kept as written
    assert _crumb_of(doc, "secondword") == "Coding notes > Tips > Second Topic"
    untitled = _load(tmp_path, "tips2.html", CODE_PAGE)
    assert untitled.title == "Tips" and [s.path for s in untitled.sections] == [("Second Topic",)]


def test_a_fence_line_in_a_paragraph_is_text_not_a_code_block(tmp_path: Path) -> None:
    page = "<title>T</title><p>```</p><h2>After</h2><p>Body text.</p><p>```</p>"
    doc = _load(tmp_path, "p.html", page)
    assert [s.path for s in doc.sections] == [("After",)]


MARKER_SOURCES = [
    ("a.html", "<title>T</title>" + CODE_PAGE),
    ("b.html", "<h1>A</h1><pre>~~~\n# not a heading\n~~~\n````\n```</pre><h2>B</h2><p>x</p>"),
    ("c.html", "<ul><li><h3>In a list</h3><p>item</p></li><li><pre>```\ncode\n```</pre></li></ul><h2>Z</h2>"),
    ("d.html", "<p>user \ue000## text \ue001 here</p><pre>\ue000# x\n\ue001```</pre><h2>Q</h2><p>q</p>"),
    ("e.md", "# Title\n\n```\n# code\n```\n\nText.\n"),
    ("f.txt", "CHAPTER I\n\nSome text.\n"),
    ("g.pdf", _pdf_bytes([["Heading", "", "Some text."]])),
]


@pytest.mark.parametrize("name,data", MARKER_SOURCES, ids=[n for n, _ in MARKER_SOURCES])
def test_no_loader_leaves_an_internal_marker_in_the_text(tmp_path: Path, name: str, data) -> None:
    doc = _load(tmp_path, name, data)
    assert not any(mark in doc.text for mark in _MARKS), repr(doc.text)
    assert not any(mark in s.title for s in doc.sections for mark in _MARKS)


# Fragments of pages, with the heading each makes; fences and markers in code and text make none.
_HTML_PIECES = {"<h1>One</h1>": "One", "<h2>Two</h2>": "Two", "<h3>Three</h3>": "Three",
                "<li><h2>In item</h2></li>": "In item", "<p>Some words.</p>": None, "<p>```</p>": None,
                "<p># hash</p>": None, "<pre>```</pre>": None, "<pre>```py\nx = 1\n```</pre>": None,
                "<pre>~~~\n# c\n````</pre>": None, "<pre>\ue000## m\n\ue001```</pre>": None,
                "<p>\ue000 and \ue001</p>": None, "<ul><li><p>item</p></li></ul>": None,
                "<li><pre>```</pre></li>": None, "<nav>menu</nav>": None, "<br>": None, "text": None}


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.sampled_from(sorted(_HTML_PIECES)), min_size=1, max_size=10))
def test_random_pages_never_leak_a_marker_and_keep_every_heading(pieces: list[str]) -> None:
    from self_improving_rag.ingestion.html_text import html_to_markdown as _html_to_markdown

    text, _ = _html_to_markdown("<title>Page</title>" + "".join(pieces))
    assert not any(mark in text for mark in _MARKS), repr(text)
    wanted = [_HTML_PIECES[p] for p in pieces if _HTML_PIECES[p]]
    assert [s.title for s in detect_sections(text, "html", "Page")] == wanted, text


def test_html_page_furniture_is_not_indexed(tmp_path: Path) -> None:
    page = ("<html><head><title>Shop</title></head><body>"
            "<header><a href='/'>Logo headerword</a></header>"
            "<nav><a href='/'>Home</a> <a href='/x'>navword</a></nav>"
            "<main><article><header><h1>Lamps</h1><p>By Ann articlehead</p></header>"
            "<p>Oil lamps burn bodyword.</p>"
            "<aside>Note: trim the wick calloutword.</aside></article></main>"
            "<aside>Related links sidebarword</aside>"
            "<footer>Copyright footword</footer></body></html>")
    text = _load(tmp_path, "shop.html", page).text
    for kept in ("bodyword", "articlehead", "calloutword", "# Lamps"):
        assert kept in text
    for dropped in ("navword", "footword", "headerword", "sidebarword"):
        assert dropped not in text


def test_a_footer_inside_an_article_or_a_quote_is_text(tmp_path: Path) -> None:
    """A page's footer is furniture; an article's footer (footnotes, a byline) and a quote's
    (its attribution) are text, also on a page that marks no main content."""
    page = ("<body><article><p>The lamp was lit in 1852.</p><footer>1. Built by Clara footnoteword.</footer>"
            "</article><blockquote><p>Keep the light.</p><footer>Tobias quoteword</footer></blockquote>"
            "<footer>Copyright pageword</footer></body>")
    text = _load(tmp_path, "article.html", page).text
    assert "footnoteword" in text and "quoteword" in text and "pageword" not in text
    bare = "<body><p>Body text.</p><blockquote>Keep it.<footer>saidword</footer></blockquote><footer>siteword</footer></body>"
    text = _load(tmp_path, "bare.html", bare).text
    assert "saidword" in text and "siteword" not in text


def test_a_page_header_is_kept_when_the_page_marks_no_main_content(tmp_path: Path) -> None:
    page = "<body><header><h1>Notes</h1><p>headerword</p></header><p>Body.</p><nav>navword</nav></body>"
    doc = _load(tmp_path, "notes.html", page)
    assert "headerword" in doc.text and "navword" not in doc.text and doc.title == "Notes"


def test_a_page_of_only_navigation_is_refused(tmp_path: Path) -> None:
    page = "<html><body><nav><a href='/'>Home</a></nav><footer>(c) 2024</footer></body></html>"
    with pytest.raises(IngestionError, match="no visible text"):
        _load(tmp_path, "menu.html", page)


def test_a_list_item_holding_a_paragraph_reads_as_one_item(tmp_path: Path) -> None:
    page = "<ul><li><p>first item</p></li><li><p>second</p><p>more</p></li><li>third</li></ul>"
    lines = _load(tmp_path, "list.html", page).text.split("\n")
    assert "- first item" in lines and "- second" in lines and "- third" in lines
    assert "-" not in lines


# ---------------------------------------------------------------- markdown


def test_a_late_level_one_heading_is_not_the_document_title(tmp_path: Path) -> None:
    text = "Intro text.\n\n## Install\n\nRun installword.\n\n# Appendix\n\nMore appendixword.\n"
    doc = _load(tmp_path, "manual.md", text)
    assert doc.title == "manual"
    assert [s.path for s in doc.sections] == [("Install",), ("Appendix",)]
    assert _crumb_of(doc, "installword") == "manual > Install"
    after_text = _load(tmp_path, "late.md", "Some text first.\n\n# Later\n\nBody.\n")
    assert after_text.title == "late" and [s.path for s in after_text.sections] == [("Later",)]


def test_a_leading_level_one_heading_is_the_title_even_below_badges(tmp_path: Path) -> None:
    text = ("[![build](https://ci.example/badge.svg)](https://ci.example)\n"
            "<img src='logo.png'>\n\n# Project Kite\n\nAbout it.\n\n## Use\n\nFly it.\n")
    doc = _load(tmp_path, "readme.md", text)
    assert doc.title == "Project Kite" and [s.path for s in doc.sections] == [("Use",)]


def test_front_matter_gives_the_title_and_is_not_text(tmp_path: Path) -> None:
    text = "---\ntitle: Handbook\nauthor: 'Ann Lee'\ntags: [a, b]\n---\n\n# Handbook\n\nHello.\n\n## Start\n\nBody.\n"
    doc = _load(tmp_path, "hb.md", text)
    assert doc.title == "Handbook" and doc.author == "Ann Lee"
    assert doc.text.startswith("# Handbook") and "tags:" not in doc.text and "title:" not in doc.text
    assert [s.path for s in doc.sections] == [("Start",)]
    for s in doc.sections:
        assert doc.text[s.start:].startswith("## Start")
    untitled = _load(tmp_path, "notes.md", "---\nlayout: post\n---\nJust text.\n")
    assert untitled.title == "notes" and untitled.text == "Just text."


def test_a_leading_thematic_break_is_not_front_matter(tmp_path: Path) -> None:
    text = "---\n\nSome text.\n\n---\n\nMore text.\n"
    doc = _load(tmp_path, "rules.md", text)
    assert doc.text == text.strip("\n")


def test_front_matter_alone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestionError, match="front matter"):
        _load(tmp_path, "empty.md", "---\ntitle: Nothing\n---\n")


def test_setext_headings_are_sections(tmp_path: Path) -> None:
    text = ("Field Guide\n===========\n\nIntro.\n\nBirds\n-----\n\nOwls hoot birdword.\n\n"
            "A paragraph.\n\n---\n\nAfter a break breakword.\n\n"
            "Two line\nheading\n---\n\nBody twoword.\n\n- a list item\n---\n\nlistword.\n\n"
            "```\nCode line\n---\n```\n\n> quoted\n---\n")
    doc = _load(tmp_path, "guide.md", text)
    assert doc.title == "Field Guide"
    assert [s.path for s in doc.sections] == [("Birds",), ("Two line heading",)]
    assert doc.text[doc.sections[0].start:].startswith("Birds\n-----")
    assert doc.text[doc.sections[1].start:].startswith("Two line\nheading\n---")
    assert _crumb_of(doc, "breakword") == "Field Guide > Birds"
    assert _crumb_of(doc, "listword") == "Field Guide > Two line heading"


def test_breadcrumbs_are_plain_text(tmp_path: Path) -> None:
    text = ("# The *Kite* `Book`\n\nIntro.\n\n## **Bold** and [a link](https://x.org/p) heading\n\nbodyword.\n\n"
            "### ![icon](i.png) Use `snake_case_name` and __strong__ ~~old~~ \\*stars\\*\n\ndeepword.\n")
    doc = _load(tmp_path, "kite.md", text)
    assert doc.title == "The Kite Book"
    assert _crumb_of(doc, "bodyword") == "The Kite Book > Bold and a link heading"
    assert _crumb_of(doc, "deepword").endswith("> icon Use snake_case_name and strong old *stars*")


# ---------------------------------------------------------------- invisible characters, PDF hyphens


def test_invisible_format_characters_do_not_split_words(tmp_path: Path) -> None:
    text = ("An extra\u00adordinary word\u2060joiner, zero\u200bwidth and mid\ufefftext.\n"
            "Kept: \u0646\u200c\u0645 and \U0001F469\u200d\U0001F4BB.\n")
    doc = _load(tmp_path, "soft.txt", text)
    assert "An extraordinary wordjoiner, zerowidth and midtext." in doc.text
    assert "\u200c" in doc.text and "\u200d" in doc.text
    html = _load(tmp_path, "soft.html", "<p>An extra&shy;ordinary lamp.</p>")
    assert html.text == "An extraordinary lamp."


def test_pdf_line_end_hyphens_are_joined(tmp_path: Path) -> None:
    lines = ["The labora-", "tory was quiet.", "A well-", "Known fact.", "Page 12-", "13 here."]
    doc = _load(tmp_path, "lab.pdf", _pdf_bytes([lines]))
    assert "The laboratory was quiet." in doc.text
    assert "well-\nKnown" in doc.text and "12-\n13" in doc.text
