"""Load text, markdown, HTML and PDF files into cleaned ``Document`` values.

Every problem with a file raises ``IngestionError`` with one line naming the file, the
problem and the fix. Cleaning gives LF line ends, no byte-order mark, no trailing spaces,
at most two blank lines in a row, no invisible format characters that split words (soft
hyphen, zero-width space, word joiner, a byte-order mark inside the text), and for Project
Gutenberg books no licence header or footer. An HTML page is read as a reader sees it
(``html_text``): headings become markdown ``#`` lines so that section detection sees them, and
hidden elements and site furniture are not text. A markdown file's YAML
front matter is not text either: its ``title:`` and ``author:`` name the document.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import logging
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

from self_improving_rag.errors import IngestionError, NoTextError
from self_improving_rag.ingestion.html_text import html_to_markdown
from self_improving_rag.ingestion.sections import detect_sections, markdown_title
from self_improving_rag.types import Document

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")
DEFAULT_MAX_BYTES = 64 * 2**20

_FORMATS = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
# Checked before UTF-8 because these encodings legitimately contain NUL bytes.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# charset-normalizer often ranks a Baltic or Central European code page first for plain
# Western text (it cannot tell "é" in cp1257 from "é" in cp1252); corpora here are mostly
# English and French, so a Western code page wins when it reads the bytes almost as cleanly.
_WESTERN = ("cp1252", "latin_1", "iso8859_15")
_WESTERN_TOLERANCE = 0.1
_BINARY_SAMPLE = 65536
_MAX_CONTROL_RATIO = 0.05
_SUPPORTED_LIST = ", ".join(SUPPORTED_SUFFIXES)

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
        decoded, encoding = _decode(path, raw, meta)
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


def iter_source_files(paths: list[Path], exclude: tuple[Path, ...] = ()) -> tuple[list[Path], list[str]]:
    """Expand files and folders into supported files, plus one-line problem messages.

    Folders are walked recursively in sorted order, skipping hidden entries and the files and
    folders in ``exclude`` (resolved paths: sirag's own, such as the index being written, when they
    lie among the documents); unsupported
    files inside a folder are counted in one message, an unsupported file given by name
    gets its own message, and so does a missing path.
    """
    files: list[Path] = []
    problems: list[str] = []
    seen: set[Path] = set()
    # One file reached by two paths (a folder given twice, once through a symlink; a link or a
    # hard link beside its target) would be indexed twice, and its passages would crowd out
    # the others in every search: it is taken once, under the first path found.
    taken: dict[tuple[int, int], Path] = {}
    walked: set[Path] = set()  # a folder given twice by the same path is walked (and its skips said) once
    for given in paths:
        path = Path(given)
        if path.is_dir():
            if (same := Path(os.path.normpath(path.absolute()))) in walked:
                continue
            walked.add(same)
            found, skipped, errors = _walk_folder(path, exclude)
            problems.extend(errors)
            if skipped:
                problems.append(_skipped_message(path, skipped))
        elif path.is_file():
            if path.suffix.lower() not in _FORMATS:
                problems.append(_unsupported_message(path))
                continue
            found = [path]
        elif path.exists():
            problems.append(f"{path}: not a regular file or folder (a pipe, device or socket); give a document file")
            continue
        else:
            problems.append(f"{path}: no such file or folder; check the path")
            continue
        for file in found:
            # ".." collapsed, so "docs/../docs/a.txt" and "docs/a.txt" are one path; symlinks are
            # kept as given (the document is named by the path the user gave).
            absolute = Path(os.path.normpath(file.absolute()))
            try:
                str(absolute).encode("utf-8")
            except UnicodeEncodeError:  # the index, the memory and JSON output all need UTF-8 names
                shown = os.fsencode(absolute).decode("utf-8", "replace")
                problems.append(f"{shown}: the file name is not valid UTF-8; rename it (e.g. with convmv) "
                                "to ingest it")
                continue
            if absolute in seen:
                continue
            seen.add(absolute)
            try:
                st = absolute.stat()
                # Some network and FUSE file systems give every file inode 0: no identity then.
                identity = (st.st_dev, st.st_ino) if st.st_ino else None
            except OSError:  # unreadable: the loader says so when it opens the file
                identity = None
            if identity is not None and identity in taken:
                problems.append(f"{absolute}: the same file as {taken[identity]} (a link, or a folder given "
                                "twice); indexed once, under the first path")
                continue
            if identity is not None:
                taken[identity] = absolute
            files.append(absolute)
    return files, problems


# ---------------------------------------------------------------- files and bytes


def _fail(path: Path, problem: str, fix: str, error: type[IngestionError] = IngestionError) -> IngestionError:
    return error(f"{path}: {problem}; {fix}")


def _unsupported_message(path: Path) -> str:
    suffix = path.suffix or "(no suffix)"
    return (
        f"{path}: unsupported file type {suffix}; convert it to one of {_SUPPORTED_LIST}"
        " or leave it out"
    )


def _check_file(path: Path, max_bytes: int) -> str:
    """Validate the file from its metadata alone and return its format."""
    try:
        info = path.stat()
    except FileNotFoundError as exc:
        raise _fail(path, "file not found", "check the path") from exc
    except PermissionError as exc:
        raise _fail(path, "permission denied", "make the file readable (chmod +r)") from exc
    except OSError as exc:
        raise _fail(path, f"cannot access the file ({exc.strerror})", "check the path") from exc
    if path.is_dir():
        raise _fail(
            path, "is a folder, not a file", "pass the files inside it or use iter_source_files"
        )
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise IngestionError(_unsupported_message(path))
    if info.st_size > max_bytes:
        raise _fail(
            path,
            f"file is {info.st_size} bytes, larger than the limit of {max_bytes}",
            "split the file or raise the size limit (ingestion.max_file_mb, e.g. --set ingestion.max_file_mb="
            f"{info.st_size // 2**20 + 1})",
        )
    if info.st_size == 0:
        raise _fail(path, "file is empty", "add text to it or leave it out", NoTextError)
    return fmt


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    # Read at most one byte over the limit: a file that grew after stat() cannot exhaust memory.
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except PermissionError as exc:
        raise _fail(path, "permission denied", "make the file readable (chmod +r)") from exc
    except OSError as exc:
        raise _fail(path, f"cannot read the file ({exc.strerror})", "check the file") from exc
    if len(raw) > max_bytes:
        raise _fail(path, f"file is larger than the limit of {max_bytes} bytes",
                    "split the file or raise the size limit")
    if not raw:
        raise _fail(path, "file is empty", "add text to it or leave it out", NoTextError)
    return raw


def _skipped_message(folder: Path, skipped: list[tuple[Path, str]], show: int = 5) -> str:
    """One line naming the entries of ``folder`` that were not read, and why, the first few by name."""
    names = ", ".join(f"{p.relative_to(folder)} ({why})" for p, why in sorted(skipped)[:show])
    more = f" and {len(skipped) - show} more" if len(skipped) > show else ""
    return (f"skipped {len(skipped)} entr{'ies' if len(skipped) != 1 else 'y'} in {folder}: {names}{more} "
            f"(supported types: {_SUPPORTED_LIST})")


def _walk_folder(folder: Path, exclude: tuple[Path, ...] = ()) -> tuple[list[Path], list[tuple[Path, str]], list[str]]:
    """Supported files under folder (sorted, hidden entries skipped), skipped entries with why, errors.

    A symlinked folder is followed only when it points inside ``folder`` (a link to ``..``
    must not pull in everything around the corpus); only regular files are read (a FIFO or
    device named ``*.txt`` would block or stream forever), the rest count as skipped."""
    found: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    errors: list[str] = []
    root = folder.resolve()
    excluded_names = {p.name for p in exclude}
    visited: set[Path] = set()
    pending = [folder]
    while pending:
        current = pending.pop()
        resolved = current.resolve()
        if resolved in visited:  # a symlink loop would otherwise never end
            continue
        visited.add(resolved)
        try:
            entries = sorted(current.iterdir())
        except OSError as exc:
            errors.append(f"{current}: cannot list folder ({exc.strerror}); check its permissions")
            continue
        subfolders = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            # sirag's own files and folders (resolved only when the name matches, or for a link, since
            # resolving costs a look-up per path part and a walk visits every file)
            try:
                if (entry.name in excluded_names or entry.is_symlink()) and entry.resolve() in exclude:
                    continue
                if entry.is_symlink():
                    entry.resolve(strict=True)  # a link in a loop: Python raises RuntimeError or ELOOP
            except (RuntimeError, OSError) as exc:
                loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
                skipped.append((entry, "link in a loop" if loop else "broken link"))
                continue
            if entry.is_dir():
                if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                    skipped.append((entry, "link to a folder outside"))
                    continue
                if (entry / "CURRENT").is_file() and (entry / "embeddings.sqlite").is_file():
                    # Another sirag index among the documents: one entry, not each of its files.
                    skipped.append((entry, "a sirag index, not documents"))
                    continue
                subfolders.append(entry)
            elif entry.suffix.lower() in _FORMATS and entry.is_file():
                found.append(entry)
            elif entry.is_symlink() and not entry.exists():
                skipped.append((entry, "broken link"))
            elif entry.exists() and not entry.is_file():
                skipped.append((entry, "special file"))
            else:
                skipped.append((entry, "unsupported type"))
        pending.extend(subfolders)
    return sorted(found), skipped, errors


# ---------------------------------------------------------------- decoding


def _decode(path: Path, raw: bytes, meta: dict[str, Any]) -> tuple[str, str]:
    """Decode raw bytes and return (text, encoding name); record how in meta."""
    meta["encoding_detected"] = False
    if raw.startswith(codecs.BOM_UTF8):
        meta["bom"] = True
        try:
            return raw[len(codecs.BOM_UTF8) :].decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass  # a stray BOM on a file in another encoding: detect it below
    for bom, name in _WIDE_BOMS:
        if raw.startswith(bom):
            try:
                text = raw.decode(name)
            except UnicodeDecodeError:
                break
            meta["bom"] = True
            meta["encoding_detected"] = True
            return _checked_text(path, text), name
    _reject_binary(path, raw)
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    # UTF-8 with a few stray bytes (a character pasted from another encoding) is UTF-8: guessing
    # another encoding for the whole file would garble every other non-ASCII character.
    text = raw.decode("utf-8-sig", errors="replace")  # a BOM, if any, is not text
    bad = text.count("\ufffd") - raw.count("\ufffd".encode("utf-8"))
    good = sum(1 for ch in text if ord(ch) > 127 and ch != "\ufffd")
    if good >= 2 * bad:
        meta["invalid_utf8"] = {"count": bad, "first_byte": first_bad}
        return text, "utf-8"
    text, encoding = _detect(path, raw)
    meta["encoding_detected"] = True
    return _checked_text(path, text), encoding


def _reject_binary(path: Path, raw: bytes) -> None:
    if b"\x00" in raw:
        raise _fail(path, "looks like a binary file (contains NUL bytes)",
                    "convert it to plain text or leave it out")
    sample = raw[:_BINARY_SAMPLE]
    controls = sum(1 for byte in sample if byte < 32 and byte not in (9, 10, 12, 13, 27))
    if controls > _MAX_CONTROL_RATIO * len(sample):
        raise _fail(path, "looks like a binary file (mostly control bytes)",
                    "convert it to plain text or leave it out")


# What cp1252 gives for Western European text: letters of Latin-1 and Latin Extended-A it has,
# and its typographic marks; a byte that reads otherwise (a box, a control, "»" inside a word)
# says the file is in another code page.
# Turkish letters cp1254 has where cp1252 has these Icelandic ones ("İ" read as "Ý"): a Western
# reading with them is read in cp1254 (Turkish is far more often written so than Icelandic).
_TURKISH_IN_CP1252 = frozenset("ÐÝÞðýþ")
_WESTERN_MARKS = set("€‚„…†‡‰‘’“”•–—™£©®°±²³µ·¹º½¼¾¿¡«»§¶¢¥×÷\u00a0")


def _reads_as_western(raw: bytes) -> tuple[str, str] | None:
    """(text, encoding) when ``raw`` reads as plausible Western European cp1252 (mostly ASCII
    words with an accented letter here and there, and typographic marks), else None; when that
    reading holds a letter cp1254 has in Turkish's place ("Ý" for "İ", "ð" for "ğ"), the text in
    cp1254. charset-normalizer
    often ranks another code page first for a short Western text (a "€" or "é" read as "Ç" or
    "ķ"); Cyrillic or Greek bytes read in cp1252 as runs of accented letters, and Central European
    ones as signs inside words ("Za¿ó³æ"): those are left to it."""
    try:
        text = raw.decode("cp1252")
    except UnicodeDecodeError:
        return None
    letters = accented = run = 0
    for i, ch in enumerate(text):
        if (ord(ch) > 127 and not ch.isalpha() and ch not in "’‘–—…" and 0 < i < len(text) - 1
                and text[i - 1].isalpha() and text[i + 1].isalpha()):
            return None  # a sign inside a word ("Za¿ó³æ"): a letter of another code page
        if ch.isalpha():
            letters += 1
            if ord(ch) > 127:
                if not ("\u00c0" <= ch <= "\u017f" and ch not in "×÷"):
                    return None
                accented += 1
                run += 1
                if run >= 4:
                    return None  # four accented letters in a row: not a Western (or Turkish) word
                continue
        elif ord(ch) > 127 and ch not in _WESTERN_MARKS:
            return None
        run = 0
    if not (letters and accented <= 0.4 * letters):
        return None
    if any(ch in _TURKISH_IN_CP1252 for ch in text):
        return raw.decode("cp1254"), "cp1254"  # every byte cp1252 maps, cp1254 maps too
    return text, "cp1252"


def _detect(path: Path, raw: bytes) -> tuple[str, str]:
    import charset_normalizer  # only needed for files that are not UTF-8

    matches = list(charset_normalizer.from_bytes(raw))
    best = matches[0] if matches else None
    for match in matches:
        if match.encoding in _WESTERN and match.chaos <= best.chaos + _WESTERN_TOLERANCE:
            best = match
            break
    if best is None or best.encoding not in _WESTERN or any(ch in _TURKISH_IN_CP1252 for ch in str(best)):
        western = _reads_as_western(raw)
        if western is not None:
            return western
    if best is None:
        raise _fail(path, "bytes are not UTF-8 and no text encoding fits them",
                    "re-save the file as UTF-8")
    return str(best), best.encoding


def _checked_text(path: Path, text: str) -> str:
    """Reject decodings that are mostly control or unassigned characters."""
    sample = text[:_BINARY_SAMPLE]
    odd = sum(
        1
        for ch in sample
        if ch not in "\t\n\r\f\x1b" and unicodedata.category(ch) in ("Cc", "Cn", "Co", "Cs")
    )
    if not sample or odd > _MAX_CONTROL_RATIO * len(sample) or "\ufffd" * 4 in sample:
        raise _fail(path, "bytes do not decode to sensible text in any encoding",
                    "re-save the file as UTF-8")
    return text


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
        raise _fail(path, problem, "add text to it or leave it out", NoTextError)
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
            raise _fail(path, f"cannot parse the HTML ({type(exc).__name__}: {detail.strip()})",
                        "check that the file is valid HTML, or leave it out") from exc
        text = _require_text(path, _clean(text), "HTML page has no visible text (its navigation, "
                             "footer, page header, hidden elements, scripts and styles are left out)")
        return text, title, None
    text = _normalise_newlines(decoded).lstrip("\ufeff")
    title = author = None
    if fmt == "markdown":
        text, fields = _split_front_matter(text)
        if fields is not None:
            meta["front_matter"] = True
            title, author = _field_text(fields.get("title")), _field_text(fields.get("author"))
            text = _require_text(path, text, "file holds only YAML front matter (the --- block at its top), no text")
    body = _strip_gutenberg(text)
    if body is not None:
        meta["gutenberg"] = True
        pg_title, pg_author = _gutenberg_fields(text)
        title, author = title or pg_title, author or pg_author
        text = _require_text(path, body, "no text left after removing the Project Gutenberg header")
    text = _require_text(path, _clean(text))
    if fmt == "markdown" and title is None:
        title = markdown_title(text)
    return text, title, author


# ---------------------------------------------------------------- Project Gutenberg


def _strip_gutenberg(text: str) -> str | None:
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


def _gutenberg_fields(text: str) -> tuple[str | None, str | None]:
    """Title and Author from the header above the START marker (first line of each)."""
    start = _GUTENBERG_START.search(text)
    header = text[: start.start()] if start else text[:5000]
    fields: dict[str, str] = {}
    for line in header.split("\n"):
        match = _HEADER_FIELD.match(line.strip())
        if match and match.group(2).strip():
            fields.setdefault(match.group(1).lower(), " ".join(match.group(2).split()))
    return fields.get("title"), fields.get("author")


# ---------------------------------------------------------------- markdown


def _split_front_matter(text: str) -> tuple[str, dict | None]:
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


def _field_text(value: Any) -> str | None:
    """A front matter field as one line of text: a string or number, or a list of them joined
    by commas (several authors); None for anything else or nothing."""
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return None
    return " ".join(str(value).split()) or None


# ---------------------------------------------------------------- PDF


def doc_slug(path: Path) -> str:
    """A document's id from its file name: the stem in lower case, each space and ASCII
    whitespace control (tab, newline, ...) an underscore. Other characters, no-break spaces
    included, stay as they are, so ids made by earlier versions do not change."""
    return re.sub(r"[ \t\n\r\f\v]", "_", path.stem.lower())


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
            raise _fail(path, "PDF is encrypted", "decrypt it first (e.g. qpdf --decrypt)")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = " ".join(info.title.split()) if info and info.title else None
    # pypdf reports damaged files through its own errors and, for some structures, through
    # plain ValueError/KeyError/TypeError raised while walking the object tree.
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        problem = f"cannot read the PDF ({' '.join(str(exc).split())})"
        raise _fail(path, problem, "check that the file is a valid PDF") from exc
    meta["pages"] = len(pages)
    meta["encoding_detected"] = False
    text = _clean(_join_line_end_hyphens(_normalise_newlines("\n\n".join(page.strip("\n") for page in pages))))
    if not text.strip():
        raise _fail(path, "PDF has no extractable text (scanned images?)",
                    "run OCR on it first (e.g. ocrmypdf) or leave it out")
    # Text comes from PDF string objects, not from a byte encoding of the file.
    return text, title, "pdf"
