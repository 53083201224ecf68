"""The embedding cache of an index folder (``embeddings.sqlite``): vectors keyed by embedder and
text hash, so no text is embedded twice."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


class EmbeddingCache:
    """Vectors keyed by embedder and text hash, so no text is embedded twice.

    Only a cache: a damaged file (found when it opens or when it is read) is moved aside
    (``<name>.damaged-<time>``) and a new one started, and where the file cannot be written (a
    read-only index folder) it is read as it is, new vectors kept in memory for this process (at
    most ``MAX_UNSAVED``), so searching a read-only index works.
    """

    MAX_UNSAVED = 20000  # vectors kept in memory when the file cannot take them (~30 MB at 384 dims)

    def __init__(self, path: Path, embedder_name: str) -> None:
        self.path = path
        self.embedder_name = embedder_name
        self.hits = 0
        self.misses = 0
        self._extra: dict[str, bytes] = {}  # vectors that could not be written to the file
        self.writable = True
        self._db = self._open()

    def _unwritable(self) -> bool:
        folder = self.path.parent
        return not os.access(folder, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK))

    def _open(self) -> sqlite3.Connection | None:
        try:
            return self._connect()
        except sqlite3.OperationalError as exc:  # cannot create, open or write the file
            # Only a file that cannot be written is read as it is; "database is locked" and the
            # like are real errors, not a reason to stop saving vectors quietly.
            if not self._unwritable() and "readonly" not in str(exc) and "unable to open" not in str(exc):
                raise
            log.warning("embedding cache %s cannot be written (%s); reading it as it is, new vectors are "
                        "not saved", self.path, exc)
            self.writable = False
            db = None
            try:
                db = sqlite3.connect(f"{self.path.absolute().as_uri()}?immutable=1", uri=True)
                db.execute("SELECT 1 FROM vectors LIMIT 1")
                return db
            except sqlite3.Error:
                if db is not None:
                    db.close()
                return None
        except sqlite3.DatabaseError as exc:  # not a database, or damaged
            return self._restart(exc)

    def _restart(self, exc: Exception) -> sqlite3.Connection | None:
        """Move a damaged file aside and start an empty cache (or none, if that fails too)."""
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        log.warning("embedding cache %s is damaged (%s); moved it to %s and started an empty one "
                    "(it only saves re-embedding)", self.path, exc, aside.name)
        try:
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return self._connect()
        except (OSError, sqlite3.Error):
            self.writable = False
            return None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _damaged(self, exc: sqlite3.DatabaseError) -> None:
        """Damage found while reading or writing: restart the file; what it held is embedded again."""
        if self._db is not None:
            self._db.close()
        self._db = self._restart(exc) if self.writable else None

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.embedder_name}\x00{text}".encode()).hexdigest()

    def get_many(self, texts: list[str]) -> dict[str, np.ndarray]:
        keys = {self._key(t): t for t in texts}
        found: dict[str, np.ndarray] = {keys[k]: np.frombuffer(self._extra[k], dtype=np.float32)
                                        for k in keys if k in self._extra}
        items = [k for k in keys if k not in self._extra] if self._db is not None else []
        try:
            for i in range(0, len(items), 500):
                batch = items[i:i + 500]
                q = f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(batch))})"
                for key, blob in self._db.execute(q, batch):
                    found[keys[key]] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:  # "database disk image is malformed"
            self._damaged(exc)
            return {t: v for t, v in found.items() if self._key(t) in self._extra}
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        rows = [(self._key(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in items.items()]

        def write() -> bool:
            if not (self.writable and self._db is not None):
                return False
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO vectors (key, vec) VALUES (?, ?)", rows)
            return True

        try:
            if write():
                return
        except sqlite3.OperationalError as exc:
            # A full or failing disk too: a cache that cannot save must not cost the answer being made.
            full = any(s in str(exc) for s in ("disk I/O error", "disk is full"))
            if not self._unwritable() and "readonly" not in str(exc) and not full:
                raise
            log.warning("embedding cache %s cannot be written (%s); new vectors are not saved", self.path, exc)
            self.writable = False
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)  # a fresh file (or none, if that failed too)
            if write():
                return
        if len(self._extra) + len(rows) > self.MAX_UNSAVED:
            self._extra.clear()  # a cache, not a store: start over rather than grow without end
        self._extra.update(rows)

    def embed(self, texts: list[str], embed_fn, progress=None) -> np.ndarray:
        """Vectors for ``texts``, embedding only the ones not cached (each distinct text once)."""
        found = self.get_many(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in found))
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        step = 256
        for i in range(0, len(todo), step):
            batch = todo[i:i + step]
            vecs = embed_fn(batch)
            new = dict(zip(batch, vecs))
            self.put_many(new)
            found.update(new)
            if progress is not None:
                progress(len(batch))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.vstack([found[t] for t in texts]).astype(np.float32)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
