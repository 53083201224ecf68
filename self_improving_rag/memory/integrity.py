"""The memory store's health: copied whole by ``sirag memory backup``."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from ..errors import InputError, MemoryStoreError


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
