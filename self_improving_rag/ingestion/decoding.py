"""A file's bytes as text: a byte-order mark, UTF-8 (with a few stray bytes tolerated), or an
encoding detected, with Western code pages preferred; binary files refused."""

from __future__ import annotations

import codecs
import unicodedata
from pathlib import Path
from typing import Any

from ..errors import IngestionError

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


def decode(path: Path, raw: bytes, meta: dict[str, Any]) -> tuple[str, str]:
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
        raise IngestionError.for_file(path, "looks like a binary file (contains NUL bytes)",
                                      "convert it to plain text or leave it out")
    sample = raw[:_BINARY_SAMPLE]
    controls = sum(1 for byte in sample if byte < 32 and byte not in (9, 10, 12, 13, 27))
    if controls > _MAX_CONTROL_RATIO * len(sample):
        raise IngestionError.for_file(path, "looks like a binary file (mostly control bytes)",
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
        raise IngestionError.for_file(path, "bytes are not UTF-8 and no text encoding fits them",
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
        raise IngestionError.for_file(path, "bytes do not decode to sensible text in any encoding",
                                      "re-save the file as UTF-8")
    return text
