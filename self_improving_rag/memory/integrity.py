"""The memory store's health: checked whenever it is opened, and copied whole by ``sirag memory backup``.

A damaged page can sit unread for a long time: the commands that do not read it succeed, and the
first write that meets it fails, after the work of an answer. ``check`` runs SQLite's
``quick_check`` (every page read once, without the slower cross-checks of indexes against their
tables) when a store is opened, so a damaged store is refused before any work is spent on it.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import tempfile
from pathlib import Path

from ..errors import InputError, MemoryStoreError


def damaged(path: str | Path, detail: str) -> MemoryStoreError:
    """The one-line error for a damaged store, with the ways out."""
    detail = " ".join(detail.split())
    return MemoryStoreError(
        f"memory database {path} is damaged ({detail}). Restore it from a backup (`sirag memory backup FILE` "
        f"makes one), or recover what it holds: `sqlite3 {shlex.quote(str(path))} .recover | sqlite3 fixed.db`, "
        "then pass --memory fixed.db"
    )


def check(conn: sqlite3.Connection, path: str | Path) -> None:
    """Raise ``damaged`` when SQLite's quick check finds the database damaged. Other failures (a
    file that is not a database, a lock) are the caller's to translate."""
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        if "malformed" not in str(exc).lower():
            raise
        rows = [(str(exc),)]
    problem = str(rows[0][0]) if rows else "the check returned nothing"
    if problem != "ok":
        raise damaged(path, problem.replace("*** in database main ***", "").strip())


def backup(conn: sqlite3.Connection, target: Path, force: bool = False) -> Path:
    """Copy the open store whole into ``target`` with SQLite's online backup API (a consistent copy,
    also while other processes write). Written beside ``target`` and renamed, so a failed copy leaves
    no partial file; an existing ``target`` is replaced only with ``force``."""
    if target.exists() and not force:
        raise InputError(f"{target} exists; pass --force to replace it, or name another file")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        copy = sqlite3.connect(tmp)
        try:
            conn.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
        finally:
            copy.close()
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, sqlite3.Error):  # a full disk, an I/O error: the copy's, not the store's
            raise MemoryStoreError(f"cannot write the backup {target}: {exc}; free some space there or name a "
                                   "file on another disk") from exc
        raise
    return target
