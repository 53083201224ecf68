"""Load text, markdown, HTML and PDF files into cleaned ``Document`` values.

Every problem with a file raises ``IngestionError`` with one line naming the file, the
problem and the fix. Cleaning gives LF line ends, no byte-order mark, no trailing spaces,
at most two blank lines in a row, no invisible format characters that split words (soft
hyphen, zero-width space, word joiner, a byte-order mark inside the text), and for Project
Gutenberg books no licence header or footer. An HTML page is read as a reader sees it
(``html_text``): headings become markdown ``#`` lines so that section detection sees them, and
hidden elements and site furniture are not text. A markdown file's YAML
front matter is not text either: its ``title:`` and ``author:`` name the document.

Which files paths name is ``source_files``; bytes become text in ``decoding``; front matter and
Project Gutenberg headers are read in ``headers``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import unicodedata
from pathlib import Path
from typing import Any

from self_improving_rag.errors import IngestionError, NoTextError
from self_improving_rag.ingestion.decoding import decode
from self_improving_rag.ingestion.doc_ids import doc_slug
from self_improving_rag.ingestion.headers import field_text, gutenberg_fields, split_front_matter, strip_gutenberg
from self_improving_rag.ingestion.html_text import html_to_markdown
from self_improving_rag.ingestion.markdown_headings import markdown_title
from self_improving_rag.ingestion.sections import detect_sections
from self_improving_rag.ingestion.source_files import FORMAT_OF_SUFFIX, unsupported_message
from self_improving_rag.types import Document

DEFAULT_MAX_BYTES = 64 * 2**20
# Format characters that hide inside words: the soft hyphen (HTML "&shy;"), the zero-width space,
# the word joiner and a byte-order mark inside the text (U+FEFF as a zero-width no-break space).
# Kept inside a word they split it for search ("extra\u00adordinary" is not "extraordinary").
# The zero-width non-joiner and joiner (U+200C, U+200D) stay: Persian and Indic spelling and
# emoji sequences need them.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"))
# A hyphen (or soft hyphen) at a line end between letters (see _join_line_end_hyphens).
_LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])([-\u00ad])[ \t]*\n[ \t]*(?=[^\W\d_])")


# ---------------------------------------------------------------- public API


def load_document(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """Read one supported file into a cleaned ``Document`` with its sections.

    Raises ``IngestionError`` for a missing, unreadable, unsupported, empty, binary,
    undecodable or too large file, for a PDF without extractable text and for an HTML page the
    parser rejects; ``NoTextError`` (an ``IngestionError``) for one that is empty, whitespace only,
    or without text once cleaned.
    """
    if not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    path = Path(path)
    fmt = _check_file(path, max_bytes)
    raw = _read_bytes(path, max_bytes)
    meta: dict[str, Any] = {"format": fmt, "bytes": len(raw)}
    if fmt == "pdf":
        text, title, encoding = _load_pdf(path, raw, meta)
        author = None
    else:
        decoded, encoding = decode(path, raw, meta)
        text, title, author = _parse_text(path, decoded, fmt, meta)
    title = title or path.stem
    return Document(
        doc_id=doc_slug(path),
        path=str(path.absolute()),
        text=text,
        title=title,
        author=author,
        encoding=encoding,
        sha256=hashlib.sha256(raw).hexdigest(),
        sections=detect_sections(text, fmt, title),
        meta=meta,
    )


# ---------------------------------------------------------------- files and bytes


def _check_file(path: Path, max_bytes: int) -> str:
    """Validate the file from its metadata alone and return its format."""
    try:
        info = path.stat()
    except FileNotFoundError as exc:
        raise IngestionError.for_file(path, "file not found", "check the path") from exc
    except PermissionError as exc:
        raise IngestionError.for_file(path, "permission denied", "make the file readable (chmod +r)") from exc
    except OSError as exc:
        raise IngestionError.for_file(path, f"cannot access the file ({exc.strerror})", "check the path") from exc
    if path.is_dir():
        raise IngestionError.for_file(
            path, "is a folder, not a file", "pass the files inside it or use iter_source_files"
        )
    fmt = FORMAT_OF_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        raise IngestionError(unsupported_message(path))
    if info.st_size > max_bytes:
        raise IngestionError.for_file(
            path,
            f"file is {info.st_size} bytes, larger than the limit of {max_bytes}",
            "split the file or raise the size limit (ingestion.max_file_mb, e.g. --set ingestion.max_file_mb="
            f"{info.st_size // 2**20 + 1})",
        )
    if info.st_size == 0:
        raise NoTextError.for_file(path, "file is empty", "add text to it or leave it out")
    return fmt


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    # Read at most one byte over the limit: a file that grew after stat() cannot exhaust memory.
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except PermissionError as exc:
        raise IngestionError.for_file(path, "permission denied", "make the file readable (chmod +r)") from exc
    except OSError as exc:
        raise IngestionError.for_file(path, f"cannot read the file ({exc.strerror})", "check the file") from exc
    if len(raw) > max_bytes:
        raise IngestionError.for_file(path, f"file is larger than the limit of {max_bytes} bytes",
                                      "split the file or raise the size limit")
    if not raw:
        raise NoTextError.for_file(path, "file is empty", "add text to it or leave it out")
    return raw


# ---------------------------------------------------------------- cleaning


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _clean(text: str) -> str:
    """NFC, no BOM, invisible format characters or stray controls, no trailing spaces, at most two
    blank lines in a row."""
    text = unicodedata.normalize("NFC", _normalise_newlines(text))
    text = text.translate(_INVISIBLE).replace("\f", "\n")
    text = "".join(
        ch for ch in text if ch in "\t\n" or unicodedata.category(ch) != "Cc"
    )
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n")


def _require_text(path: Path, text: str, problem: str = "file contains only whitespace") -> str:
    if not text.strip():
        raise NoTextError.for_file(path, problem, "add text to it or leave it out")
    return text


def _parse_text(
    path: Path, decoded: str, fmt: str, meta: dict[str, Any]
) -> tuple[str, str | None, str | None]:
    """Return (clean text, title, author) for text, markdown and HTML sources."""
    _require_text(path, decoded)
    if fmt == "html":
        try:
            text, title = html_to_markdown(decoded)
        except Exception as exc:  # noqa: BLE001 - one page the parser rejects must not stop the ingest
            detail = next((line for line in reversed(str(exc).splitlines()) if line.strip()), "")
            raise IngestionError.for_file(path, f"cannot parse the HTML ({type(exc).__name__}: {detail.strip()})",
                                          "check that the file is valid HTML, or leave it out") from exc
        text = _require_text(path, _clean(text), "HTML page has no visible text (its navigation, "
                             "footer, page header, hidden elements, scripts and styles are left out)")
        return text, title, None
    text = _normalise_newlines(decoded).lstrip("\ufeff")
    title = author = None
    if fmt == "markdown":
        text, fields = split_front_matter(text)
        if fields is not None:
            meta["front_matter"] = True
            title, author = field_text(fields.get("title")), field_text(fields.get("author"))
            text = _require_text(path, text, "file holds only YAML front matter (the --- block at its top), no text")
    body = strip_gutenberg(text)
    if body is not None:
        meta["gutenberg"] = True
        pg_title, pg_author = gutenberg_fields(text)
        title, author = title or pg_title, author or pg_author
        text = _require_text(path, body, "no text left after removing the Project Gutenberg header")
    text = _require_text(path, _clean(text))
    if fmt == "markdown" and title is None:
        title = markdown_title(text)
    return text, title, author


# ---------------------------------------------------------------- PDF


def _join_line_end_hyphens(text: str) -> str:
    """Join a word a PDF's typesetting hyphenated at a line end ("labora-" / "tory" reads
    "laboratory"): a hyphen between a letter and a next line that starts in lower case, or a soft
    hyphen before any letter. The trade-off: a compound that happens to break at its own hyphen
    ("well-" / "known") loses it ("wellknown"); a line-end break inside a word is far more common
    in justified text, and unjoined it splits the word for search. A next line starting with a
    capital, a digit or a sign ("Page 12-" / "13") is left as it is."""
    def join(match: re.Match[str]) -> str:
        return "" if match.group(1) == "\u00ad" or text[match.end()].islower() else match.group()

    return _LINE_END_HYPHEN.sub(join, text)


def _load_pdf(path: Path, raw: bytes, meta: dict[str, Any]) -> tuple[str, str | None, str]:
    """Return (clean text, metadata title, encoding label) of a PDF."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # pypdf logs its repairs of a damaged file as warnings; the one message the user needs is
    # ours (below), so only its errors are let through.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise IngestionError.for_file(path, "PDF is encrypted", "decrypt it first (e.g. qpdf --decrypt)")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = " ".join(info.title.split()) if info and info.title else None
    # pypdf reports damaged files through its own errors and, for some structures, through
    # plain ValueError/KeyError/TypeError raised while walking the object tree.
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        problem = f"cannot read the PDF ({' '.join(str(exc).split())})"
        raise IngestionError.for_file(path, problem, "check that the file is a valid PDF") from exc
    meta["pages"] = len(pages)
    meta["encoding_detected"] = False
    text = _clean(_join_line_end_hyphens(_normalise_newlines("\n\n".join(page.strip("\n") for page in pages))))
    if not text.strip():
        raise IngestionError.for_file(path, "PDF has no extractable text (scanned images?)",
                                      "run OCR on it first (e.g. ocrmypdf) or leave it out")
    # Text comes from PDF string objects, not from a byte encoding of the file.
    return text, title, "pdf"
