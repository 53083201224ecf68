"""The SQLite file under the memory store: opened, checked and migrated; transactions and reads.

:class:`StoreFile` opens one file (WAL, 30 s busy timeout), refuses a damaged or foreign one,
applies the schema migrations of ``migrations.py``, and gives the parts of ``MemoryStore`` their
transactions (``BEGIN IMMEDIATE``, retried while another process holds the lock), their reads
(Ctrl-C held until SQLite returns) and SQLite's failures as one-line ``MemoryStoreError``s. The
parts: ``store.py`` (recording, labels, merging), ``verdicts.py`` (the policy's counts),
``fits.py`` (calibration's rows and fits) and ``analysis.py`` (``sirag memory``'s reports).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from sqlite_utils import Database

from ..errors import MemoryStoreError, OlderSchemaError
from . import integrity
from .interrupts import interrupted_in_sql, sigint_deferred
from .migrations import MIGRATIONS, migration_names

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound="StoreFile")

BUSY_TIMEOUT_S = 30.0
# Beyond the busy timeout, a write that still meets "database is locked" is retried
# with backoff until this deadline, so concurrent batch workers never see it.
RETRY_DEADLINE_S = 120.0
MIN_PREFIX = 6


def _utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _after(newest: str | None, now: str) -> str:
    """``now``, or 1 ms after ``newest`` when that is not earlier (a row merged from a machine whose
    clock runs ahead), so that a row written now is the newest by time; a date sirag did not write
    is left to order by as it is."""
    if newest and newest >= now:
        try:
            return (datetime.fromisoformat(newest) + timedelta(milliseconds=1)).isoformat(timespec="milliseconds")
        except ValueError:
            pass
    return now


def _json_default(obj: Any) -> Any:
    # Signal details may hold numpy scalars, tuples or sets; store them as plain JSON.
    item = getattr(obj, "item", None)
    if callable(item):
        return item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return str(obj)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "database is locked" in msg or "database is busy" in msg or "database table is locked" in msg


class StoreFile:
    """The SQLite file under the memory store, which every part of :class:`MemoryStore` builds on.

    ``path`` is a SQLite file (its parent directory is created when writable) or
    ``":memory:"``. With ``read_only=True`` the file is opened through a ``mode=ro``
    URI: nothing is created, migrated or written, even by root.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        if not isinstance(path, (str, Path)) or str(path) == "":
            raise ValueError(f"path must be a non-empty str or Path, got {path!r}")
        self.memory = str(path) == ":memory:"
        self.path = Path(path)
        self.read_only = read_only
        self._immutable = False  # read-only through immutable=1 (see _open)
        # One connection shared by threads; the lock keeps their transactions apart.
        self._lock = threading.RLock()
        self.db = self._open()

    # ------------------------------------------------------------------ opening

    def __repr__(self) -> str:
        mode = "ro" if self.read_only else "rw"
        return f"{type(self).__name__}({str(self.path)!r}, {mode})"

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self.db.conn.close()

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every write below opens its
        # own explicit one.
        kwargs: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S, "isolation_level": None, "check_same_thread": False}
        if self.memory:
            return sqlite3.connect(":memory:", **kwargs)
        if self.path.is_dir():
            raise MemoryStoreError(f"memory database {self.path} is a folder; pass --memory with a database file, "
                                   f"e.g. {self.path / 'memory.db'}")
        if self.read_only:
            if not self.path.is_file():
                raise MemoryStoreError(
                    f"no memory database at {self.path}; record an answer first or pass the right --memory path"
                )
            uri = self.path.resolve().as_uri() + ("?immutable=1" if self._immutable else "?mode=ro")
            return sqlite3.connect(uri, uri=True, **kwargs)
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MemoryStoreError(
                f"cannot create directory {parent} for memory database {self.path} ({exc.strerror}); "
                "pass --memory with a writable path"
            ) from exc
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise MemoryStoreError(
                f"memory database {self.path} is read-only; fix its permissions or pass --memory with a "
                "writable path (`sirag memory` and `sirag ask --no-memory` only read it and work as it is)"
            )
        # WAL keeps -wal and -shm files beside the database, so the directory must be writable too.
        if not os.access(parent, os.W_OK):
            raise MemoryStoreError(
                f"directory {parent} of memory database {self.path} is not writable; fix its permissions "
                "or pass --memory with a writable path"
            )
        return sqlite3.connect(str(self.path), **kwargs)

    def _register_functions(self, conn: sqlite3.Connection) -> None:
        """Register on a new connection the SQL functions the store's queries call: each part
        of the store adds its own (and calls this first)."""

    def _open(self) -> Database:
        if self.read_only and not self.memory:
            try:
                return self._open_once()
            except MemoryStoreError:
                # mode=ro still needs to create the -shm file of a WAL database: in a read-only
                # folder that fails. immutable=1 reads the file as it is (fine for analysis; a
                # writer elsewhere would not be seen).
                if not self.path.is_file() or os.access(self.path.parent, os.W_OK):
                    raise
                self._immutable = True
                wal = Path(f"{self.path}-wal")
                if wal.is_file() and wal.stat().st_size > 0:
                    log.warning("memory database %s is read in a read-only folder beside an unmerged write-ahead "
                                "log (%s): its latest records are not seen; open it once where it can be "
                                "written to merge them", self.path, wal.name)
                return self._open_once()
        return self._open_once()

    def _open_once(self) -> Database:
        try:
            conn = self._connect()
        except sqlite3.OperationalError as exc:
            raise MemoryStoreError(
                f"cannot open memory database {self.path} ({exc}); pass --memory with the path of a database file"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            self._register_functions(conn)
            if not self.memory:
                integrity.check(conn, self.path)  # a damaged store is refused before any work is spent on it
            db = Database(conn, execute_plugins=False)
            # Somebody else's database is refused before anything is written to it (the WAL
            # switch below persists in the file).
            self._refuse_foreign(db)
            if not self.memory and not self.read_only:
                # WAL lets readers and one writer work at once; the pragma must run
                # outside any transaction and persists in the file.
                self._retry(db.enable_wal)
            self._migrate(db)
        except sqlite3.DatabaseError as exc:
            conn.close()
            self._raise_translated(exc)
        except BaseException:
            conn.close()
            raise
        return db

    def _refuse_foreign(self, db: Database) -> None:
        """Raise MemoryStoreError for a database with tables of its own and no sirag migration (reads only)."""
        if MIGRATIONS.applied(db):
            return
        others = [t for t in db.table_names() if not t.startswith("sqlite_") and t != "_sqlite_migrations"]
        # Looked at again after the tables: another process may have migrated the file meanwhile
        # (its tables and its migration records are committed together).
        if others and not MIGRATIONS.applied(db):
            raise MemoryStoreError(
                f"{self.path} is not a sirag memory store (it holds other tables: {', '.join(others[:5])}); "
                "pass the --memory path of a store that sirag wrote"
            )

    def _migrate(self, db: Database) -> None:
        known = migration_names()

        def check() -> list[str]:
            applied = [m.name for m in MIGRATIONS.applied(db)]
            unknown = [name for name in applied if name not in known]
            if unknown:
                raise MemoryStoreError(
                    f"memory database {self.path} was written by a newer version of sirag (unknown "
                    f"migration {unknown[0]}); upgrade sirag or use another --memory path"
                )
            return [name for name in known if name not in applied]

        pending = check()
        if not pending:
            return
        if self.read_only:
            if len(pending) == len(known):
                # Nothing of sirag's was ever applied: an empty file (somebody else's database was
                # refused when it was opened).
                self._refuse_foreign(db)
                raise MemoryStoreError(
                    f"memory database {self.path} is empty: nothing has been recorded in it yet; "
                    "run `sirag ask` or `sirag batch` with this --memory path first"
                )
            raise OlderSchemaError(
                f"memory database {self.path} has an older schema; upgrade it once with `sirag memory stats "
                f"--memory {self.path}` (that needs write access: copy a read-only file somewhere writable first)"
            )

        def apply() -> None:
            # IMMEDIATE takes the write lock first, so processes opening a fresh file together
            # migrate it one after the other; everything is checked again under the lock (another
            # process may have migrated the file since the first look, e.g. batch workers).
            with self._immediate(db):
                todo = check()
                if not todo:
                    return
                if len(todo) == len(known):
                    # Nothing of sirag's applied: somebody else's database is never adopted
                    # (sirag's tables added beside its own), also one made since the first look.
                    self._refuse_foreign(db)
                MIGRATIONS.apply(db)

        try:
            self._retry(apply)
        except sqlite3.OperationalError as exc:
            if "already exists" in str(exc):
                raise MemoryStoreError(
                    f"{self.path} holds tables that sirag did not create ({exc}); pass --memory with "
                    "another path"
                ) from exc
            raise

    # ------------------------------------------------------------- transactions

    @contextmanager
    def _immediate(self, db: Database | None = None) -> Iterator[Database]:
        # Not db.atomic(): its deferred BEGIN upgrades to a write lock mid-transaction,
        # and in WAL mode that upgrade fails at once with "database is locked" when
        # another process committed in between; BEGIN IMMEDIATE waits for the lock.
        db = self.db if db is None else db
        outer = db.conn.in_transaction  # not ours to roll back (BEGIN then fails: no nesting)
        try:
            # One try from BEGIN to COMMIT: a Ctrl-C that came while BEGIN waited for another
            # process's lock is raised as soon as BEGIN returns with it (and one may land between
            # the body and COMMIT); either way the transaction is rolled back, or this connection
            # keeps the write lock (a batch worker living on after its Ctrl-C held it from the others).
            db.conn.execute("BEGIN IMMEDIATE")
            yield db
            db.conn.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction and not outer:
                db.conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _retry(fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + RETRY_DEADLINE_S
        delay = 0.02
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() + delay > deadline:
                    raise
            # Jitter so that workers that collided do not collide again in step.
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)

    def _raise_translated(self, exc: sqlite3.DatabaseError) -> NoReturn:
        """Re-raise a known SQLite failure as a one-line MemoryStoreError, and a Ctrl-C that SQLite
        reported as a failed SQL function as KeyboardInterrupt; others unchanged."""
        if interrupted_in_sql(exc):
            raise KeyboardInterrupt from exc
        err = self._translate(exc)
        if err is None:
            raise exc
        raise err from exc

    def _translate(self, exc: sqlite3.DatabaseError) -> MemoryStoreError | None:
        msg = str(exc).lower()
        if "malformed" in msg:
            return integrity.damaged(self.path, str(exc))
        if "file is not a database" in msg:
            return MemoryStoreError(
                f"{self.path} is not a SQLite database or is corrupt; move it aside or pass --memory "
                "with another path"
            )
        if "readonly" in msg or "read-only" in msg or "unable to open database file" in msg:
            return MemoryStoreError(
                f"cannot write memory database {self.path} (read-only file or directory); fix its "
                "permissions or pass --memory with a writable path"
            )
        if "database or disk is full" in msg:  # no space, or a file size limit
            return MemoryStoreError(
                f"cannot write memory database {self.path}: {exc}; free some space on its disk or pass "
                "--memory with a path on another disk"
            )
        if "disk i/o error" in msg:  # a file size limit, a failing disk, or the file gone from under it
            return MemoryStoreError(
                f"cannot write memory database {self.path}: {exc} (its disk may be full or failing, a file size "
                "limit reached, or the file removed or unreachable meanwhile); check that disk and the file, or "
                "pass --memory with a path on another disk"
            )
        if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
            return MemoryStoreError(
                f"memory database {self.path} stayed locked by another process for "
                f"{RETRY_DEADLINE_S:.0f} s; retry when the other sirag process has finished"
            )
        return None

    def _write(self, fn: Callable[[], T]) -> T:
        if self.read_only:
            raise MemoryStoreError(
                f"memory database {self.path} was opened read-only; open it without read-only to write"
            )
        with self._lock:
            try:
                return self._retry(fn)
            except sqlite3.DatabaseError as exc:
                self._raise_translated(exc)

    @contextmanager
    def snapshot(self: S) -> Iterator[S]:
        """Read in one consistent snapshot: every query inside sees the store as it was at the
        first read, even while another process records outcomes (a read transaction; WAL lets
        writers go on meanwhile)."""
        with self._lock:
            if self.db.conn.in_transaction:  # already inside one (a nested snapshot)
                yield self
                return
            self.db.conn.execute("BEGIN")
            try:
                yield self
            finally:
                self.db.conn.execute("COMMIT")

    def _rows(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        with self._lock, sigint_deferred(self.db.conn):
            try:
                cursor = self.db.conn.execute(sql, params)
                names = [d[0] for d in cursor.description]
                return [dict(zip(names, row)) for row in cursor.fetchall()]
            except sqlite3.DatabaseError as exc:
                self._raise_translated(exc)

    def _one(self, sql: str, params: tuple | dict = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    @staticmethod
    def _insert(db: Database, table: str, row: dict[str, Any]) -> sqlite3.Cursor:
        # Table and column names are constants of the store's code; values are parameters.
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return db.conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))

    # ------------------------------------------------------- outcomes and labels

    # The current label per outcome, which every part of the store reads: the newest user label,
    # else the newest gold label (rows only grow; by time, then id, so labels merged from another
    # store take their place by when they were made).
    _LABEL_ORDER = "source = 'user' DESC, created_at DESC, id DESC"
    _LATEST_LABEL = f"""
        latest AS (
            SELECT id, outcome_id, label, source,
                   ROW_NUMBER() OVER (PARTITION BY outcome_id ORDER BY {_LABEL_ORDER}) AS rn
            FROM feedback
        )"""

    def _resolve(self, outcome_id_or_prefix: str) -> str:
        """The id of the one outcome whose id is, or starts with, ``outcome_id_or_prefix`` (at
        least :data:`MIN_PREFIX` characters); MemoryStoreError, saying why, when there is none."""
        if not isinstance(outcome_id_or_prefix, str):
            raise ValueError(f"outcome id must be a str, got {outcome_id_or_prefix!r}")
        prefix = outcome_id_or_prefix.strip().lower()
        try:
            prefix.encode("utf-8")
        except UnicodeEncodeError:  # bytes the terminal could not decode: no id has them
            raise MemoryStoreError(
                f"outcome id {outcome_id_or_prefix!r} holds bytes that are not text; ids are letters a-f and digits "
                "(find them with `sirag memory search`)"
            ) from None
        if len(prefix) < MIN_PREFIX:
            raise MemoryStoreError(
                f"outcome id {outcome_id_or_prefix!r} is too short; give at least {MIN_PREFIX} characters of the id"
            )
        # A range on the primary key: no LIKE wildcards in user text to escape.
        rows = self._rows(
            "SELECT id FROM outcomes WHERE id >= ? AND id < ? ORDER BY id LIMIT 6", (prefix, prefix + "\uffff")
        )
        if not rows:
            raise MemoryStoreError(
                f"no outcome with id {outcome_id_or_prefix!r} in {self.path}; find ids with `sirag memory search`"
            )
        if len(rows) > 1 and rows[0]["id"] != prefix:
            raise MemoryStoreError(
                f"outcome id prefix {outcome_id_or_prefix!r} matches several outcomes in {self.path} "
                f"({', '.join(r['id'][:12] for r in rows[:5])}{', ...' if len(rows) > 5 else ''}); give more characters"
            )
        return rows[0]["id"]


__all__ = ["BUSY_TIMEOUT_S", "RETRY_DEADLINE_S", "StoreFile"]
