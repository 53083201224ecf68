"""A document file's fingerprint as an index's manifest records it (sha256, size and modification
time), and which indexed documents changed or went away since."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(4 * 2**20):
            h.update(block)
    return h.hexdigest()


def stamp(st: os.stat_result) -> dict[str, int]:
    """A file's size and modification time as the manifest records them, to tell later, without
    reading it, that the file is as it was when indexed (:func:`stale_documents`)."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def stale_documents(manifest: dict) -> tuple[list[str], list[str]]:
    """The documents of an index whose files changed since it was built, and those whose files
    are gone (or cannot be read): (changed, gone), by document id. A file whose size and
    modification time are as recorded is taken as unchanged without reading it; another is read
    and compared by its sha256, so a file only touched is not reported. Documents recorded before
    the manifest kept sizes and times are not checked (reading every file at every start of a
    large corpus would cost more than it tells)."""
    changed, gone = [], []
    for doc_id, meta in (manifest.get("files") or {}).items():
        if "mtime_ns" not in meta or not meta.get("path"):
            continue
        path = Path(meta["path"])
        try:
            st = path.stat()
            if (st.st_size, st.st_mtime_ns) != (meta.get("size"), meta["mtime_ns"]) and \
                    file_sha256(path) != meta.get("sha256"):
                changed.append(doc_id)
        except OSError:
            gone.append(doc_id)
    return changed, gone
