"""The index folder's writer lock: one ingest writes an index at a time, and a failed first
ingest leaves nothing behind."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from ..errors import IngestionError

log = logging.getLogger(__name__)


# What an ingest writes in an index folder before its first generation is live: removed when that
# first ingest fails, so a failed first ingest leaves no index folder behind (nor a lock and a cache).
_FIRST_INGEST_FILES = ("ingest.lock", "embeddings.sqlite", "embeddings.sqlite-wal", "embeddings.sqlite-shm",
                       "embeddings.sqlite-journal")


@contextmanager
def ingest_lock(root: Path, wait_s: float = 0.0) -> Iterator[None]:
    """The index folder's writer lock. ``wait_s``: how long to wait for another ingest to finish
    (a batch that only checks its index is up to date waits; ``sirag ingest`` does not).

    When the work under the lock fails and the folder holds no index (no ``CURRENT``), what the
    ingest made is removed: its lock and cache files, and the folders it created, when empty."""
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        created = [p for p in (root, *root.parents) if not p.exists()]  # made by this ingest, innermost first
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise IngestionError(f"index path {root} is not a directory; pass --index with a directory path") from exc
        except PermissionError as exc:
            raise IngestionError(f"cannot create index directory {root} (permission denied); pass a writable "
                                 "--index") from exc
        fresh = [n for n in _FIRST_INGEST_FILES if not (root / n).exists()]
        fh = (root / "ingest.lock").open("w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            if wait_s and not waiting:
                waiting = True
                log.warning("another ingest is writing %s; waiting for it to finish (up to %.0f s)", root, wait_s)
            if time.monotonic() >= deadline:
                waited = f" (waited {wait_s:.0f} s)" if wait_s else ""
                raise IngestionError(f"another ingest is writing {root}{waited}; wait for it to finish and "
                                     "retry") from exc
            time.sleep(0.2)
            continue
        try:
            held = os.fstat(fh.fileno()).st_ino == (root / "ingest.lock").stat().st_ino
        except OSError:
            held = False
        if held:
            break
        fh.close()  # a failed first ingest removed the lock file (and its folder) meanwhile: take the new one
    try:
        yield
    except BaseException:
        if not (root / "CURRENT").exists():
            for name in fresh:
                with suppress(OSError):
                    (root / name).unlink()
            for folder in created:
                with suppress(OSError):  # not empty: something else is in it now
                    folder.rmdir()
        raise
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()
