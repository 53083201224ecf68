"""Loaders: encodings, Project Gutenberg cleanup, markdown, HTML, PDF and every error case."""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path

import pytest

from self_improving_rag.errors import IngestionError
from self_improving_rag.ingestion.loaders import load_document
from self_improving_rag.ingestion.source_files import SUPPORTED_SUFFIXES, iter_source_files

FRENCH = (
    "Le café était plein. Nous avons mangé une crème brûlée près de la fenêtre, à côté"
    " du garçon qui lisait son journal. Où est la gare ? Déjà vu, dit l'élève naïve.\n\n"
)


def _write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _pdf_bytes(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica text line per entry, correct xref offsets."""
    page_ids = [4 + 2 * index for index in range(len(pages))]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}]"
        f" /Count {len(pages)} >>".encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, lines in zip(page_ids, pages):
        operators = ["BT", "/F1 12 Tf", "16 TL", "72 720 Td"]
        operators += [f"({_pdf_string(line)}) Tj T*" for line in lines]
        stream = "\n".join([*operators, "ET"]).encode("latin-1")
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            f" /Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>"
        ).encode()
        objects[page_id + 1] = (
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
        )
    trailer_extra = ""
    if title is not None:
        info_id = max(objects) + 1
        objects[info_id] = f"<< /Title ({_pdf_string(title)}) >>".encode("latin-1")
        trailer_extra = f" /Info {info_id} 0 R"
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for object_id in sorted(objects):
        offsets[object_id] = len(out)
        out += f"{object_id} 0 obj\n".encode() + objects[object_id] + b"\nendobj\n"
    xref_at = len(out)
    size = max(objects) + 1
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    for object_id in range(1, size):
        out += f"{offsets[object_id]:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {size} /Root 1 0 R{trailer_extra} >>\n".encode()
    out += f"startxref\n{xref_at}\n%%EOF\n".encode()
    return bytes(out)


def _error(path: Path, **kwargs: int) -> str:
    """Load a bad file and return its message, checking it is one line naming the file."""
    with pytest.raises(IngestionError) as caught:
        load_document(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    assert path.name in message
    return message


# ---------------------------------------------------------------- plain text and encodings


def test_utf8_with_bom(tmp_path: Path) -> None:
    raw = b"\xef\xbb\xbfHello world.\n\nSecond paragraph.\n"
    doc = load_document(_write(tmp_path, "My Notes.txt", raw))
    assert doc.text == "Hello world.\n\nSecond paragraph."
    assert doc.encoding == "utf-8"
    assert doc.meta["bom"] is True
    assert doc.meta["encoding_detected"] is False
    assert doc.meta["format"] == "text"
    assert doc.doc_id == "my_notes"
    assert doc.title == "My Notes"
    assert doc.path == str((tmp_path / "My Notes.txt").absolute())
    assert doc.sha256 == hashlib.sha256(raw).hexdigest()


def test_crlf_and_trailing_spaces_are_normalised(tmp_path: Path) -> None:
    raw = b"line one   \r\nline two\r\n\r\n\r\n\r\n\r\n\r\nnext paragraph\rlast\r\n"
    doc = load_document(_write(tmp_path, "crlf.txt", raw))
    assert "\r" not in doc.text
    assert doc.text == "line one\nline two\n\n\nnext paragraph\nlast"


def test_latin1_file_is_detected_and_reported(tmp_path: Path) -> None:
    doc = load_document(_write(tmp_path, "french.txt", (FRENCH * 4).encode("latin-1")))
    assert doc.encoding in {"cp1252", "latin_1", "iso8859_15"}
    assert doc.meta["encoding_detected"] is True
    assert "café était plein" in doc.text
    assert "garçon" in doc.text


def test_utf8_with_a_stray_byte_stays_utf8_with_the_byte_replaced_and_named(tmp_path: Path) -> None:
    """One byte pasted from another encoding must not send the whole file to detection, which
    would garble every other non-ASCII character ("café" read as Latin-1 is "cafÃ©")."""
    raw = "The naïve café owner Zoë sells crème brûlée. ".encode("utf-8") * 3 + b"A stray byte: \xe9 here."
    doc = load_document(_write(tmp_path, "mixed.txt", raw))
    assert doc.encoding == "utf-8" and "naïve café owner Zoë" in doc.text and "stray byte: \ufffd here" in doc.text
    assert doc.meta["invalid_utf8"] == {"count": 1, "first_byte": raw.index(b"\xe9")}
    doc = load_document(_write(tmp_path, "bom.txt", codecs.BOM_UTF8 + raw))  # with a BOM: not part of the text
    assert doc.text.startswith("The naïve café") and doc.meta["invalid_utf8"]["count"] == 1
    # A file that is Latin-1 throughout is still detected as such.
    doc = load_document(_write(tmp_path, "french.txt", (FRENCH * 4).encode("latin-1")))
    assert doc.meta["encoding_detected"] is True and "invalid_utf8" not in doc.meta


def test_utf16_with_bom_is_decoded(tmp_path: Path) -> None:
    doc = load_document(_write(tmp_path, "wide.txt", "Wide text, café.\n".encode("utf-16")))
    assert doc.text == "Wide text, café."
    assert doc.encoding == "utf-16"


# ---------------------------------------------------------------- Project Gutenberg


def _gutenberg_book(start: str, end: str) -> str:
    return "\r\n".join(
        [
            "The Project Gutenberg EBook of A Made Up Tale, by Jane Example",
            "",
            "Title: A Made Up Tale",
            "       or The Second Line",
            "",
            "Author: Jane Example",
            "",
            start,
            "",
            "Produced by a volunteer",
            "",
            "CHAPTER I. THE BEGINNING.",
            "",
            "It was a dark night and the tale began " * 10,
            "",
            "CHAPTER II. THE END.",
            "",
            "And then the tale was over, as all tales are " * 10,
            "",
            "End of the Project Gutenberg EBook of A Made Up Tale, by Jane Example",
            "",
            end,
            "",
            "***** This file should be named 99999.txt *****",
            "Licence text that must not be indexed.",
        ]
    )


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (
            "*** START OF THIS PROJECT GUTENBERG EBOOK A MADE UP TALE ***",
            "*** END OF THIS PROJECT GUTENBERG EBOOK A MADE UP TALE ***",
        ),
        (
            "***START OF THE PROJECT GUTENBERG EBOOK A MADE UP TALE***",
            "***END OF THE PROJECT GUTENBERG EBOOK A MADE UP TALE***",
        ),
        (
            "*** start of the project gutenberg e-book ***",
            "*** end of the project gutenberg e-book ***",
        ),
    ],
)
def test_gutenberg_header_and_footer_are_stripped(tmp_path: Path, start: str, end: str) -> None:
    doc = load_document(_write(tmp_path, "pg99999.txt", "\ufeff" + _gutenberg_book(start, end)))
    assert doc.title == "A Made Up Tale"
    assert doc.author == "Jane Example"
    assert doc.meta["gutenberg"] is True
    assert doc.text.startswith("Produced by a volunteer")
    assert doc.text.endswith("as all tales are")
    assert "Gutenberg" not in doc.text
    assert "Licence" not in doc.text
    assert "\r" not in doc.text
    assert [s.title for s in doc.sections] == ["Chapter I: The Beginning", "Chapter II: The End"]


def test_gutenberg_book_with_empty_body_is_an_error(tmp_path: Path) -> None:
    text = (
        "Title: Nothing\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK X ***\n"
    )
    message = _error(_write(tmp_path, "hollow.txt", text))
    assert "Gutenberg" in message


# ---------------------------------------------------------------- markdown and HTML


def test_markdown_title_and_sections(tmp_path: Path) -> None:
    text = (
        "# Field Guide\n\nIntro.\n\n## Birds\n\nText.\n\n```python\n# not a heading\n```\n\n"
        "### Owls\n\nHoot.\n\n## Fish\n\nBlub.\n"
    )
    doc = load_document(_write(tmp_path, "guide.md", text))
    assert doc.title == "Field Guide"
    assert doc.meta["format"] == "markdown"
    assert [s.path for s in doc.sections] == [("Birds",), ("Birds", "Owls"), ("Fish",)]


def test_markdown_without_heading_uses_the_stem(tmp_path: Path) -> None:
    doc = load_document(_write(tmp_path, "plain.markdown", "Just *some* text.\n"))
    assert doc.title == "plain"
    assert doc.sections == ()


HTML_PAGE = """<!DOCTYPE html>
<html><head><title>Pond Life</title><style>body { color: red; }</style>
<script>var secret = "do not index";</script></head>
<body>
<h1>Pond Life</h1>
<p>Ponds are   small
   bodies of water.</p>
<h2>Frogs <em>and</em> Toads</h2>
<p>Frogs jump.<br>Toads walk.</p>
<p># hashtag paragraph</p>
<ul><li>green frog</li><li>cane toad</li></ul>
<h3>Tadpoles</h3>
<pre># code comment
x = 1</pre>
<noscript>enable javascript</noscript>
</body></html>
"""


def test_html_headings_kept_and_scripts_dropped(tmp_path: Path) -> None:
    doc = load_document(_write(tmp_path, "pond.html", HTML_PAGE))
    assert doc.title == "Pond Life"
    assert doc.meta["format"] == "html"
    assert "## Frogs and Toads" in doc.text.split("\n")
    assert "Ponds are small bodies of water." in doc.text
    assert "Frogs jump.\nToads walk." in doc.text
    assert "- green frog" in doc.text
    for hidden in ("secret", "color: red", "enable javascript"):
        assert hidden not in doc.text
    # The page's own h1 is its title; code and "#" paragraphs are not headings.
    assert [s.path for s in doc.sections] == [
        ("Frogs and Toads",),
        ("Frogs and Toads", "Tadpoles"),
    ]
    assert "x = 1" in doc.text


def test_html_title_falls_back_to_first_h1(tmp_path: Path) -> None:
    page = "<body><h1>Only Heading</h1><p>Body.</p></body>"
    doc = load_document(_write(tmp_path, "page.htm", page))
    assert doc.title == "Only Heading"
    assert doc.text == "# Only Heading\n\nBody."


def test_html_without_visible_text_is_an_error(tmp_path: Path) -> None:
    page = "<html><head><script>x()</script></head><body> </body></html>"
    _error(_write(tmp_path, "blank.html", page))


# ---------------------------------------------------------------- PDF


def test_pdf_text_and_metadata_title(tmp_path: Path) -> None:
    pages = [["CHAPTER 1", "", "First page text."], ["Second page text."]]
    pdf = _pdf_bytes(pages, title="A Tiny PDF")
    doc = load_document(_write(tmp_path, "tiny.pdf", pdf))
    assert doc.title == "A Tiny PDF"
    assert doc.meta["format"] == "pdf"
    assert doc.meta["pages"] == 2
    assert "First page text." in doc.text
    assert "\n\nSecond page text." in doc.text
    assert doc.text.index("First page") < doc.text.index("Second page")
    assert [s.title for s in doc.sections] == ["Chapter 1"]


def test_pdf_without_title_uses_the_stem(tmp_path: Path) -> None:
    doc = load_document(_write(tmp_path, "untitled.pdf", _pdf_bytes([["Some words."]])))
    assert doc.title == "untitled"


def test_pdf_without_text_is_an_error(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "scan.pdf", _pdf_bytes([[]])))
    assert "no extractable text" in message


def test_corrupt_pdf_is_an_error(tmp_path: Path) -> None:
    _error(_write(tmp_path, "broken.pdf", b"%PDF-1.4\nthis is not really a pdf\n"))


# ---------------------------------------------------------------- errors


def test_missing_file(tmp_path: Path) -> None:
    assert "not found" in _error(tmp_path / "absent.txt")


def test_folder_given_as_file(tmp_path: Path) -> None:
    folder = tmp_path / "notes.txt"
    folder.mkdir()
    assert "folder" in _error(folder)


def test_unsupported_suffix(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "report.docx", "text"))
    assert ".docx" in message and ".txt" in message


def test_empty_file(tmp_path: Path) -> None:
    assert "empty" in _error(_write(tmp_path, "empty.txt", b""))


def test_whitespace_only_file(tmp_path: Path) -> None:
    assert "whitespace" in _error(_write(tmp_path, "spaces.md", " \n\t\r\n  \n"))


def test_binary_file_with_nul_bytes(tmp_path: Path) -> None:
    assert "binary" in _error(_write(tmp_path, "image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))


def test_binary_file_of_control_bytes(tmp_path: Path) -> None:
    assert "binary" in _error(_write(tmp_path, "blob.txt", bytes(range(1, 32)) * 20))


def test_undecodable_bytes(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "mojibake.txt", bytes(range(128, 256)) * 3))
    assert "UTF-8" in message


def test_file_larger_than_limit(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "big.txt", "x" * 101), max_bytes=100)
    assert "larger than" in message


def test_file_at_limit_is_accepted(tmp_path: Path) -> None:
    assert load_document(_write(tmp_path, "fits.txt", "x" * 100), max_bytes=100).text == "x" * 100


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files whatever their permissions")
def test_unreadable_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "secret.txt", "hidden")
    path.chmod(0)
    try:
        assert "permission" in _error(path)
    finally:
        path.chmod(0o644)


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_bad_max_bytes(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        load_document(_write(tmp_path, "a.txt", "a"), max_bytes=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- iter_source_files


def test_iter_source_files_expands_folders(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "b_sub" / "deeper").mkdir(parents=True)
    (root / ".hidden_dir").mkdir()
    for name in ("a.txt", "c.MD", "b_sub/page.html", "b_sub/deeper/z.pdf", "b_sub/deeper/y.htm"):
        _write(root, name, "x")
    ignored = ("notes.docx", "b_sub/data.csv", ".hidden.txt", ".hidden_dir/in.txt", "b_sub/noext")
    for name in ignored:
        _write(root, name, "x")
    files, problems = iter_source_files([root])
    assert [f.relative_to(root.absolute()).as_posix() for f in files] == [
        "a.txt",
        "b_sub/deeper/y.htm",
        "b_sub/deeper/z.pdf",
        "b_sub/page.html",
        "c.MD",
    ]
    supported = ", ".join(SUPPORTED_SUFFIXES)
    assert problems == [
        f"skipped 3 entries in {root}: b_sub/data.csv (unsupported type), b_sub/noext (unsupported type), "
        f"notes.docx (unsupported type) (supported types: {supported})"
    ]


def test_folder_walk_stays_inside_the_folder_and_reads_only_regular_files(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    _write(root, "a.txt", "x")
    _write(tmp_path, "outside/secret.txt", "x")
    (root / "up").symlink_to(tmp_path)  # a link to the folder around the corpus
    (root / "inside").symlink_to(root / "sub")  # a link within the corpus is followed
    _write(root, "sub/b.txt", "x")
    os.mkfifo(root / "pipe.txt")  # reading it would block forever
    files, problems = iter_source_files([root])
    assert sorted(f.name for f in files) == ["a.txt", "b.txt"]  # sub/ and its link inside/ are one folder
    assert not any("secret" in str(f) or f.name == "pipe.txt" for f in files)
    assert problems == [f"skipped 2 entries in {root}: pipe.txt (special file), up (link to a folder outside) "
                        f"(supported types: {', '.join(SUPPORTED_SUFFIXES)})"]


def test_skipped_entries_are_named_a_few_at_a_time(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    _write(root, "a.txt", "x")
    (root / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    for i in range(6):
        _write(root, f"data{i}.csv", "x")
    _, problems = iter_source_files([root])
    assert problems[0].startswith(f"skipped 7 entries in {root}: data0.csv (unsupported type), ")
    assert "data4.csv (unsupported type) and 2 more (supported types:" in problems[0]
    for i in range(6):
        (root / f"data{i}.csv").unlink()
    _, problems = iter_source_files([root])
    assert problems[0].startswith(f"skipped 1 entry in {root}: gone.txt (broken link) ")


def test_iter_source_files_reports_explicit_problems(tmp_path: Path) -> None:
    good = _write(tmp_path, "good.txt", "x")
    bad = _write(tmp_path, "sheet.xlsx", "x")
    missing = tmp_path / "nowhere"
    files, problems = iter_source_files([good, bad, missing, good])
    assert files == [good.absolute()]
    assert len(problems) == 2
    assert "sheet.xlsx" in problems[0] and "unsupported" in problems[0]
    assert "nowhere" in problems[1] and "no such file" in problems[1]
    assert all("\n" not in p for p in problems)


def test_iter_source_files_empty_folder(tmp_path: Path) -> None:
    assert iter_source_files([tmp_path]) == ([], [])


def test_a_file_name_that_is_not_utf8_is_skipped_with_its_own_message(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.txt").write_text("The keeper lit the lamp.\n", encoding="utf-8")
    with open(os.fsencode(folder) + b"/bad\xff.txt", "wb") as fh:
        fh.write(b"The miller pressed cider.\n")
    files, problems = iter_source_files([folder])
    assert [f.name for f in files] == ["ok.txt"]
    assert len(problems) == 1 and "not valid UTF-8" in problems[0] and "rename" in problems[0]
    problems[0].encode("utf-8")  # printable as it is


def test_a_file_given_twice_through_dot_dot_is_one_document(tmp_path: Path) -> None:
    folder = tmp_path / "c5"
    folder.mkdir()
    (folder / "real.txt").write_text("The ferry leaves at nine from Pier Seven.\n", encoding="utf-8")
    files, problems = iter_source_files([folder, folder / ".." / "c5" / "real.txt"])
    assert files == [(folder / "real.txt").absolute()] and problems == []


def test_one_file_reached_by_two_paths_is_taken_once(tmp_path: Path) -> None:
    """A folder given twice, once through a link to it, and a hard link beside its target: each
    file is taken once, under the first path, and the others are named."""
    root = tmp_path / "corpus"
    root.mkdir()
    _write(root, "a.txt", "x")
    _write(root, "b.txt", "y")
    os.link(root / "b.txt", root / "c.txt")  # a hard link: the same file under another name
    (tmp_path / "alias").symlink_to(root)
    files, problems = iter_source_files([root, tmp_path / "alias", root / "a.txt"])
    assert files == [root / "a.txt", root / "b.txt"]
    same = "(a link, or a folder given twice); indexed once, under the first path"
    assert problems == [f"{root / 'c.txt'}: the same file as {root / 'b.txt'} {same}",
                        f"{tmp_path / 'alias' / 'a.txt'}: the same file as {root / 'a.txt'} {same}",
                        f"{tmp_path / 'alias' / 'b.txt'}: the same file as {root / 'b.txt'} {same}",
                        f"{tmp_path / 'alias' / 'c.txt'}: the same file as {root / 'b.txt'} {same}"]


def test_a_symlink_loop_in_a_folder_is_skipped_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "m.txt").write_text("hi\n", encoding="utf-8")
    (folder / "A").symlink_to("B")
    (folder / "B").symlink_to("A")
    (folder / "sub").mkdir()
    (folder / "sub" / "l1.txt").symlink_to("l2.txt")
    (folder / "sub" / "l2.txt").symlink_to("l1.txt")
    (folder / "bad.txt").symlink_to("m.txt/x.txt")  # through a file: not a loop, a broken link
    files, problems = iter_source_files([folder])
    assert files == [folder / "m.txt"]
    assert len(problems) == 1 and problems[0].count("(link in a loop)") == 4, problems
    assert "bad.txt (broken link)" in problems[0]


@pytest.mark.parametrize("encoding, text", [
    ("cp1252", "Price list: coffee €2, tea €1.50, crêpe €4."),
    ("cp1252", "Meeting notes – Q3 budget review. The café budget was cut to €200."),
    ("cp1252", "To do… call Bob… buy milk."),
    ("latin_1", "Un café."),
    ("cp1252", "Le cœur a ses raisons que la raison ne connaît point. « Déjà vu », dit-il. L’été."),
    ("cp1251", "Привет, как дела? Это тестовый текст на русском языке, довольно длинный."),
    ("cp1250", "Zażółć gęślą jaźń, to jest polski tekst testowy do sprawdzenia."),
    ("cp1253", "Καλημέρα κόσμε, αυτό είναι ένα κείμενο."),
    ("cp1254", "Türkçe bir metin: İstanbul'da güzel bir gün."),
    ("cp1254", "Öğrenciler okulda ders çalışıyor."),
    ("cp1254", "Bugün hava çok güzel, değil mi? Şimdi dışarı çıkıyorum."),
    ("cp1254", "Öğretmen geldi."),
])
def test_short_texts_in_a_code_page_are_read_as_written(tmp_path: Path, encoding: str, text: str) -> None:
    """A short Western text's "€" or "é" was read as "Ç" or "ķ" by another code page (cp852,
    cp775), or refused; Cyrillic, Greek and Central European texts keep their own code page."""
    f = tmp_path / "note.txt"
    f.write_bytes(text.encode(encoding))
    assert load_document(f).text.strip() == text


def test_another_sirag_index_among_the_documents_is_one_skipped_entry(tmp_path: Path) -> None:
    # Each of its files (CURRENT, embeddings.sqlite, gen-*/...) was named as an unsupported type, a
    # warning of 25 entries for one folder; a folder given twice said it twice.
    from self_improving_rag.config import load_config
    from self_improving_rag.ingestion.source_files import SUPPORTED_LIST
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config
    from tests.conftest import fake_overrides, write_corpus

    docs = write_corpus(tmp_path / "docs")
    cfg = load_config(None, fake_overrides(tmp_path))
    ingest([docs], cfg, embedder_from_config(cfg), index_dir=docs / "idx", progress=False)
    (docs / "notes.csv").write_text("a,b\n", encoding="utf-8")
    files, problems = iter_source_files([docs, docs])
    assert files == [docs / "harbour.md", docs / "orchard.txt"]
    assert problems == [f"skipped 2 entries in {docs}: idx (a sirag index, not documents), notes.csv (unsupported "
                        f"type) (supported types: {SUPPORTED_LIST})"], problems
