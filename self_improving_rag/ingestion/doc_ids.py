"""Document ids: a file keeps the id its index gave it (also when moved), and a new file gets one
from its name that no other file has."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .fingerprints import file_sha256


def doc_slug(path: Path) -> str:
    """A document's id from its file name: the stem in lower case, each space and ASCII
    whitespace control (tab, newline, ...) an underscore. Other characters, no-break spaces
    included, stay as they are, so ids made by earlier versions do not change."""
    return re.sub(r"[ \t\n\r\f\v]", "_", path.stem.lower())


def assign_doc_ids(files: list[Path], held: dict[str, dict] | None = None, max_bytes: int | None = None,
                   sha_of=None) -> dict[Path, str]:
    """Each file's document id.

    A file the index already holds (``held``: the manifest's ``files``, id -> metadata) keeps its
    id, so adding, removing or moving another file never renames it (the memory store and
    earlier results cite documents by id). A file is known by its absolute path as given
    (``file``; a symlink beside its target is not ingested: see
    :func:`~.source_files.iter_source_files`), or, in an index written before that was
    recorded, by its resolved ``path`` when one held document has it; a file at a new path with the
    name and the content of a held document whose path is not among ``files`` is that document
    moved (its folder renamed, reached through a link), and keeps its id (files over ``max_bytes``
    are not read for this; ``sha_of`` hashes a file, default :func:`~.fingerprints.file_sha256`). A
    new file gets its :func:`doc_slug`, with a path hash appended when that id is taken or another
    new file would get it too ("My Book.txt" and "my_book.txt" included).
    """
    held = {k: v for k, v in (held or {}).items() if isinstance(v, dict)}
    by_file = {str(meta["file"]): doc_id for doc_id, meta in held.items() if meta.get("file")}
    legacy: dict[str, list[str]] = {}
    for doc_id, meta in held.items():
        if not meta.get("file"):
            legacy.setdefault(str(meta.get("path")), []).append(doc_id)
    out: dict[Path, str] = {}
    assigned: set[str] = set()
    for f in files:
        old = by_file.get(str(f.absolute()))
        if old is None and len(legacy.get(str(f.resolve()), [])) == 1:
            old = legacy[str(f.resolve())][0]
        if old is not None and old not in assigned:
            out[f] = old
            assigned.add(old)
    # A file at a path the index does not know, with the name and content of a document whose own
    # path is not among these files, is that document moved (its folder renamed, reached through a
    # link): it keeps its id, which a hash of the new path would change. A renamed file (another
    # name) is a new document, as before.
    given = {str(f.absolute()) for f in files}
    gone: dict[str, list[str]] = {}
    for doc_id, meta in held.items():
        if doc_id not in assigned and meta.get("sha256") and str(meta.get("file")) not in given:
            gone.setdefault(str(meta["sha256"]), []).append(doc_id)
    if gone:
        for f in files:
            if f in out:
                continue
            slug = doc_slug(f)
            named = re.compile(re.escape(slug) + r"(-[0-9a-f]{6,64})?")  # its id, or its id with a path hash
            if not any(named.fullmatch(d) for ds in gone.values() for d in ds):
                continue  # no gone document of this name: a renamed file is a new document
            try:
                if max_bytes is not None and f.stat().st_size > max_bytes:
                    continue  # too large to be read: the ingest reports it
                candidates = [d for d in gone.get((sha_of or file_sha256)(f), []) if d not in assigned]
            except OSError:
                continue  # unreadable now: the ingest reports it
            same_name = [d for d in candidates if named.fullmatch(d)]
            if same_name:
                out[f] = same_name[0]
                assigned.add(same_name[0])
    new = [f for f in files if f not in out]
    slugs = {f: doc_slug(f) for f in new}
    counts: dict[str, int] = {}
    for slug in slugs.values():
        counts[slug] = counts.get(slug, 0) + 1
    # Plain slugs are reserved first, so a hashed id never takes the id another file has by its
    # own name ("notes.txt" hashed to "notes-2b40d5" beside a file named "notes-2b40d5.txt");
    # a hashed id that is still taken grows its hash until it is unique.
    plain = {slug for slug in slugs.values() if counts[slug] == 1 and slug not in assigned}
    taken = assigned | plain
    for f, slug in slugs.items():
        if slug in plain:
            out[f] = slug
            continue
        digest = hashlib.sha256(str(f).encode()).hexdigest()
        width = 6
        while f"{slug}-{digest[:width]}" in taken and width < len(digest):
            width += 2
        out[f] = f"{slug}-{digest[:width]}"
        taken.add(out[f])
    return {f: out[f] for f in files}
