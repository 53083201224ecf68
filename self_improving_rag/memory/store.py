"""SQLite memory of every answer: the policy's priors, calibration data and analysis.

One ``MemoryStore`` wraps one SQLite file (WAL, 30 s busy timeout). Opening it applies
the schema migrations of ``migrations.py``; ``record`` writes one outcome with all its
attempts in one transaction; the count methods feed the policy's bandit; the analysis
methods feed the CLI reports, exports and ``report.write_html_report``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import random
import re
import signal
import sqlite3
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from hashlib import sha256
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from sqlite_utils import Database

from ..errors import InputError, MemoryStoreError, OlderSchemaError
from ..evaluation.calibrate import ANY_LATEST, NOT_RECORDED
from ..evaluation.calibration import answer_words, sigmoid
from ..evaluation.metrics import bin_index
from ..types import Answer, AttemptRecord
from . import integrity
from .migrations import MIGRATIONS, migration_names
from .verdicts import (COLUMN_FEATURES, FEATURES_SQL, QUESTION_TOKENS_SQL, VERDICT_ARGUMENTS, VERDICT_SQL, Judge,
                       Verdicts, stored_features)

log = logging.getLogger(__name__)

__all__ = ["MemoryStore", "Verdicts", "question_id"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
# Beyond the busy timeout, a write that still meets "database is locked" is retried
# with backoff until this deadline, so concurrent batch workers never see it.
RETRY_DEADLINE_S = 120.0
MIN_PREFIX = 6
FEEDBACK_SOURCES = ("user", "gold")
SIGNAL_NAMES = ("coverage", "redundancy", "grounding", "faithfulness", "confidence")
# Attempt columns holding JSON, and the keys they are parsed into by show() and export().
_JSON_COLUMNS = (("strategy_json", "strategy"), ("signals_json", "signals"), ("timings_json", "timings_ms"))
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
#: A possessive or contraction ending ("Holmes's", "don't" stays): its lone letter would have to
#: occur as a word of its own, so "lighthouse's" would miss a question that says "lighthouse".
_POSSESSIVE_RE = re.compile(r"(?<=\w)['’]s\b", re.UNICODE)
# FTS5 query strings grow with every token; a pasted page must not become a huge query (more
# different words than this are refused: every word must occur, so none may be left out).
_MAX_SEARCH_TOKENS = 64
_SQLITE_MAX_INT = 2**63 - 1


def question_id(text: str) -> str:
    """Stable id of a question: sha256 of its normalised text, first 16 hex digits.

    Normalisation (NFKC, case folding, collapsed whitespace, trailing ``?.!`` dropped)
    makes "Who is Holmes?" and "who  is holmes" the same question.
    """
    norm = " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip("?.! ")
    return sha256(norm.encode("utf-8")).hexdigest()[:16]


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


def _total_ms(timings: dict[str, float]) -> float:
    # A stage may report its own total; otherwise the stages add up.
    for key in ("total", "total_ms"):
        if key in timings:
            return float(timings[key])
    return float(sum(float(v) for v in timings.values()))


def _mean_logprob(attempt: AttemptRecord) -> float | None:
    # AttemptRecord carries no token logprobs; the confidence scorer puts their mean
    # in its detail when the backend returned them.
    for sig in (attempt.signals.confidence, attempt.signals.faithfulness):
        value = sig.detail.get("mean_logprob") if isinstance(sig.detail, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "database is locked" in msg or "database is busy" in msg or "database table is locked" in msg


def search_words(text: str) -> list[str]:
    """The words :meth:`MemoryStore.search` looks for in ``text``: runs of letters and digits, a
    possessive "'s" dropped, a word repeated (in any case) once; [] when it holds none (only
    punctuation, quotes or FTS operators such as ``*``)."""
    words = _TOKEN_RE.findall(_POSSESSIVE_RE.sub("", text))
    return list({w.casefold(): w for w in words}.values())


def _remove_quietly(path: Path) -> None:
    """Remove a temporary file if it is there. Never raises: on a read-only file system even removing
    a file that was never made fails (EROFS, not ENOENT), and that error would replace the one that
    says why the file could not be written, naming the temporary file instead of the user's."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _rate(successes: int, total: int) -> float | None:
    return successes / total if total else None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (through symlinks or hard links too)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def open_merge_source(path: str | Path) -> MemoryStore:
    """Another store, opened read-only to be merged. A missing, damaged, foreign or newer file
    fails with a message about that file (the --memory advice of the store's own messages would
    point at the wrong one); an older schema says how to upgrade it first."""
    if not Path(path).is_file():
        what = "a folder" if Path(path).is_dir() else "no such file"
        raise MemoryStoreError(f"cannot merge {path}: {what}; name the memory store file (.db) to merge")
    try:
        return MemoryStore(path, read_only=True)
    except MemoryStoreError as exc:
        msg = str(exc)
        if isinstance(exc, OlderSchemaError):
            fix = (f"upgrade it first with `sirag memory stats --memory {path}` (copy it somewhere writable first if "
                   "it is read-only), then merge")
            why = "it has an older schema"
        elif "newer version" in msg:
            why, fix = "it was written by a newer version of sirag", "upgrade sirag, then merge"
        elif "is empty" in msg:
            why, fix = "it is empty", "nothing to merge from it"
        elif "not a sirag memory store" in msg:
            why, fix = "it is not a sirag memory store", "only a store sirag wrote can be merged"
        elif "not a SQLite database" in msg:
            why, fix = "it is not a SQLite database or is corrupt", "only a store sirag wrote can be merged"
        elif "is damaged" in msg:
            why = "it is damaged (SQLite's integrity check fails)"
            fix = f"recover what it holds first (`sqlite3 {path} .recover | sqlite3 fixed.db`), then merge fixed.db"
        else:
            why, fix = msg.split(";")[0], "check the file"
        raise MemoryStoreError(f"cannot merge {path}: {why}; {fix}") from exc


#: Set when Ctrl-C lands inside one of the store's SQL functions. SQLite turns whatever a Python
#: function raises into ``OperationalError("user-defined function raised exception")``, which
#: would reach the user as an internal error; the store raises KeyboardInterrupt in its place.
_INTERRUPTED_IN_SQL = threading.Event()


def _interruptible(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except KeyboardInterrupt:
            _INTERRUPTED_IN_SQL.set()
            raise
    return call


def interrupted_in_sql(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's report of a Ctrl-C that landed in one of the store's SQL
    functions (and clears the mark, so each interrupt is told once)."""
    if isinstance(exc, sqlite3.OperationalError) and _INTERRUPTED_IN_SQL.is_set():
        _INTERRUPTED_IN_SQL.clear()
        return True
    return False


@contextmanager
def _sigint_deferred(conn: sqlite3.Connection) -> Iterator[None]:
    """Run SQL with Ctrl-C held: the signal interrupts the statement (``conn.interrupt()``) and is
    raised as KeyboardInterrupt once SQLite has returned. Python would otherwise raise it at the
    next Python step, often inside one of the SQL functions, which SQLite reports as its own
    failure. Only the main thread can install a handler; elsewhere SQL runs as it is. Used for
    reads (where the SQL functions run), not for writes, whose lock waits must stay interruptible."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        held.append(signum)
        conn.interrupt()

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        yield
        return
    try:
        yield
    except BaseException:
        if held:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def _register_functions(conn: sqlite3.Connection, judge: Judge) -> None:
    """The store's SQL functions, registered on every connection: ``sirag_verdict`` (``judge``),
    with which the policy's counts judge an attempt by today's rule, and the pure
    ``sirag_answer_words`` and ``sirag_sigmoid`` (calibration's), for SQL of one's own over the
    stored features."""
    conn.create_function("sirag_verdict", len(VERDICT_ARGUMENTS), _interruptible(judge))
    conn.create_function("sirag_answer_words", 2,
                         _interruptible(lambda text, refusal: answer_words(text, bool(refusal))), deterministic=True)
    conn.create_function("sirag_sigmoid", 1, _interruptible(sigmoid), deterministic=True)


class MemoryStore:
    """The memory database of outcomes, attempts, feedback and calibration fits.

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
        # The SQL function the policy's counts judge attempts with (see strategy_counts).
        self._judge = Judge()
        self.db = self._open()

    # ------------------------------------------------------------------ opening

    def __repr__(self) -> str:
        mode = "ro" if self.read_only else "rw"
        return f"MemoryStore({str(self.path)!r}, {mode})"

    def __enter__(self) -> MemoryStore:
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
            _register_functions(conn, self._judge)
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
    def snapshot(self) -> Iterator[MemoryStore]:
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
        with self._lock, _sigint_deferred(self.db.conn):
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
        # Table and column names are constants of this module; values are parameters.
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return db.conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))

    # ------------------------------------------------------------------ writing

    def record(
        self,
        answer: Answer,
        *,
        features: dict | None = None,
        run_id: str | None = None,
        item_id: str | None = None,
        success_threshold: float = 0.5,
        corpus: str | None = None,
    ) -> str:
        """Write the question, the outcome and every attempt in one transaction.

        ``corpus`` names the corpus the question was answered from (the engine gives its index
        folder), so that calibration can fit each corpus's confidence on its own labels.

        Returns the outcome id. When ``run_id`` and ``item_id`` are both given and that
        pair is already recorded, returns the existing id and writes nothing, so a
        resumed batch never duplicates an item. ``success`` is 1 when the answer was
        given (not refused) with confidence >= ``success_threshold``, NULL when no
        attempt was made.
        """
        if not isinstance(answer, Answer):
            raise ValueError(f"answer must be an Answer, got {type(answer).__name__}")
        if not 0.0 <= success_threshold <= 1.0:
            raise ValueError(f"success_threshold must be in [0, 1], got {success_threshold!r}")
        for name, value in (("run_id", run_id), ("item_id", item_id), ("corpus", corpus)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a str or None, got {value!r}")
        if features is not None and not isinstance(features, dict):
            raise ValueError(f"features must be a dict or None, got {type(features).__name__}")

        now = _utcnow()
        outcome_id = uuid.uuid4().hex
        qid = question_id(answer.question)
        attempts = answer.attempts
        chosen = next((a for a in attempts if a.number == answer.chosen_attempt), None)
        final = chosen if chosen is not None else (attempts[-1] if attempts else None)
        if attempts:
            success: int | None = int(
                not answer.refused and answer.answer is not None and answer.confidence >= success_threshold
            )
        else:
            success = None
        question_row = {"id": qid, "text": answer.question, "query_class": answer.query_class, "first_seen": now}
        outcome_row = {
            "id": outcome_id,
            "question_id": qid,
            "question": answer.question,
            "answer": answer.answer,
            "refused": int(answer.refused),
            "refusal_reason": answer.refusal_reason,
            "confidence": float(answer.confidence),
            "query_class": answer.query_class,
            "chosen_attempt": answer.chosen_attempt,
            "n_attempts": len(attempts),
            "first_strategy_key": attempts[0].strategy.key if attempts else None,
            "final_strategy_key": final.strategy.key if final is not None else None,
            "success": success,
            "total_ms": _total_ms(answer.timings_ms),
            "created_at": now,
            "run_id": run_id,
            "item_id": item_id,
            "features_json": None if features is None else _dumps(features),
            "corpus": corpus,
        }
        attempt_rows = [self._attempt_row(outcome_id, a, now) for a in attempts]

        def write() -> str:
            with self._immediate() as db:
                if run_id is not None and item_id is not None:
                    row = db.conn.execute(
                        "SELECT id FROM outcomes WHERE run_id = ? AND item_id = ?", (run_id, item_id)
                    ).fetchone()
                    if row is not None:
                        return row[0]
                db.conn.execute(
                    "INSERT OR IGNORE INTO questions (id, text, query_class, first_seen) VALUES (?, ?, ?, ?)",
                    tuple(question_row.values()),
                )
                self._insert(db, "outcomes", outcome_row)
                for row in attempt_rows:
                    self._insert(db, "attempts", row)
            return outcome_id

        return self._write(write)

    @staticmethod
    def _attempt_row(outcome_id: str, a: AttemptRecord, now: str) -> dict[str, Any]:
        values = a.signals.values()
        return {
            "outcome_id": outcome_id,
            "number": a.number,
            "strategy_key": a.strategy.key,
            "strategy_json": _dumps(a.strategy.to_json()),
            "repair": a.repair,
            "failure": a.attribution.failure,
            "failure_reason": a.attribution.reason,
            "signals_json": _dumps(a.signals.to_json()),
            **{name: values[name] for name in SIGNAL_NAMES},
            "refusal": int(a.signals.refusal),
            "mean_logprob": _mean_logprob(a),
            "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens,
            "timings_json": _dumps(a.timings_ms),
            "total_ms": _total_ms(a.timings_ms),
            "answer": a.answer,
            "created_at": now,
        }

    def has_outcome(self, outcome_id: str) -> bool:
        """Whether an outcome with exactly this id is recorded here."""
        with self._lock:
            return self.db.execute("SELECT 1 FROM outcomes WHERE id = ?", [outcome_id]).fetchone() is not None

    def archive_run_items(self, run_id: str, item_ids: list[str]) -> tuple[int, str | None]:
        """Move the outcomes recorded for batch run ``run_id`` and these items to the run name
        ``RUN@TIME`` (TIME: when the earliest of them was recorded), in one transaction, so that
        the run can record new answers to those items (:meth:`record` hands back the outcome it
        holds for a run and item). Nothing is deleted: the outcomes, their attempts and labels stay
        as they were. Returns how many were moved and the name they now have (None for none)."""
        if not item_ids:
            return 0, None
        marks = ",".join("?" * len(item_ids))

        def write() -> tuple[int, str | None]:
            with self._immediate() as db:
                rows = db.execute(f"SELECT id, item_id, created_at FROM outcomes WHERE run_id = ? AND item_id IN ({marks})",
                                  [run_id, *item_ids]).fetchall()
                if not rows:
                    return 0, None
                base = f"{run_id}@{min(r[2] for r in rows)}"
                name, n = base, 1
                while db.execute(f"SELECT 1 FROM outcomes WHERE run_id = ? AND item_id IN ({marks}) LIMIT 1",
                                 [name, *item_ids]).fetchone():
                    n += 1
                    name = f"{base}-{n}"
                db.conn.executemany("UPDATE outcomes SET run_id = ? WHERE id = ?", [(name, r[0]) for r in rows])
                return len(rows), name

        return self._write(write)

    def add_feedback(self, outcome_id: str, correct: bool, source: str = "user", note: str = "",
                     keep_settled: bool = False, unless_current: bool = False,
                     current: dict[str, Any] | None = None) -> bool:
        """Label an outcome correct or wrong (``source`` 'user' or 'gold').

        The current label is the newest user label, else the newest gold label (see
        ``_LATEST_LABEL``). Newest by time, not by id: :meth:`merge_from` appends the labels of
        other stores, with new ids, in whatever order they are merged, and keeps when each was
        given, the one order all stores share (an older label merged later must not win). So that
        a label given now is the label in use, it is dated no earlier than 1 ms after the newest
        label of its outcome, as :meth:`save_calibration` dates a fit: one merged from a machine
        whose clock ran ahead would otherwise outrank every label given here until that date. The
        later date goes with the label into any store it is merged into, where it then also comes
        after the label it replaced.

        ``outcome_id`` may be a unique prefix of at least 6 characters. With ``keep_settled``
        (how evaluations write gold labels) nothing is written when a user has labelled the
        outcome or its latest label already says the same (checked in the writing
        transaction): a re-run adds no duplicate and never overrides a user, while a corrected
        gold answer still updates the label. With ``unless_current`` (how ``sirag feedback`` writes)
        nothing is written when the outcome's current label is already this one (same label and
        source, and ``note`` empty or the same; checked in the writing transaction): a label given
        twice is not a new label, while a new note is kept. ``current``, a dict, is filled with the
        label that was in use when the label was written or not (``label``, ``source``, ``note``,
        ``created_at``; left empty for none), read in the same transaction, so what is said about
        it is true even when another process labels the outcome at the same moment.
        Returns whether a label was written.
        """
        if source not in FEEDBACK_SOURCES:
            raise ValueError(f"source must be one of {FEEDBACK_SOURCES}, got {source!r}")
        if not isinstance(correct, bool):
            raise ValueError(f"correct must be a bool, got {correct!r}")
        if not isinstance(note, str):
            raise ValueError(f"note must be a str, got {note!r}")
        full_id = self._resolve(outcome_id)
        row = {"outcome_id": full_id, "label": int(correct), "source": source, "note": note, "created_at": _utcnow()}

        def write() -> bool:
            with self._immediate() as db:
                if keep_settled or unless_current or current is not None:
                    label = db.execute(f"SELECT label, source, note, created_at FROM feedback WHERE outcome_id = ? "
                                       f"ORDER BY {self._LABEL_ORDER} LIMIT 1", [full_id]).fetchone()
                    if current is not None:
                        current.clear()
                        if label is not None:
                            current.update(zip(("label", "source", "note", "created_at"), label))
                    if keep_settled and label is not None and (label[1] == "user" or label[0] == int(correct)):
                        return False
                    if unless_current and label is not None and label[:2] == (int(correct), source) and (
                            note in ("", label[2])):
                        return False
                newest = db.execute("SELECT MAX(created_at) FROM feedback WHERE outcome_id = ?",
                                    [full_id]).fetchone()[0]
                self._insert(db, "feedback", {**row, "created_at": _after(newest, row["created_at"])})
                return True

        return self._write(write)

    def save_calibration(self, weights: dict, n: int, metrics: dict, corpus_fits: dict | None = None,
                         if_latest: Any = ANY_LATEST) -> int | None:
        """Store a fitted confidence calibration; returns its id.

        With ``if_latest`` (the id of the fit that was newest when the fit was decided on, None for
        no fit), the fit is stored only if that is still the newest: otherwise another process
        stored one meanwhile, nothing is written and None is returned.

        ``metrics`` keys ``auroc_before``, ``auroc_after``, ``ece_before``, ``ece_after``
        fill their columns; every metric is also kept in ``metrics_json``. ``corpus_fits`` maps a
        corpus to its own fit made with this one (``{"weights", "n", "l2", ...}``): the weights
        for questions on that corpus, ``weights`` for the others.
        """
        if not isinstance(weights, dict) or not weights:
            raise ValueError(f"weights must be a non-empty dict, got {weights!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        if not isinstance(metrics, dict):
            raise ValueError(f"metrics must be a dict, got {metrics!r}")
        for key, fit in (corpus_fits or {}).items():
            if not (isinstance(key, str) and isinstance(fit, dict) and isinstance(fit.get("weights"), dict)
                    and fit["weights"]):
                raise ValueError(f"corpus_fits must map a corpus name to a dict with weights, got {key!r}: {fit!r}")

        def metric(key: str) -> float | None:
            value = metrics.get(key)
            return None if value is None else float(value)

        row = {
            "created_at": _utcnow(),
            "weights_json": _dumps(weights),
            "n": n,
            "auroc_before": metric("auroc_before"),
            "auroc_after": metric("auroc_after"),
            "ece_before": metric("ece_before"),
            "ece_after": metric("ece_after"),
            "metrics_json": _dumps(metrics),
            "corpus_fits_json": _dumps(corpus_fits) if corpus_fits else None,
        }

        def write() -> int | None:
            with self._immediate() as db:
                if if_latest is not ANY_LATEST:
                    now_latest = db.execute("SELECT id FROM calibration_fits ORDER BY created_at DESC, id DESC "
                                            "LIMIT 1").fetchone()
                    if (now_latest[0] if now_latest else None) != if_latest:
                        return None
                # The fit in use is the newest by time. One merged from a machine whose clock runs
                # ahead would stay newer than any fit made here, which would then never be used
                # (and the engine would fit again at every start): a new fit is dated after it.
                newest = db.execute("SELECT MAX(created_at) FROM calibration_fits").fetchone()[0]
                row["created_at"] = _after(newest, row["created_at"])
                cursor = self._insert(db, "calibration_fits", row)
            return int(cursor.lastrowid)

        return self._write(write)

    def merge_from(self, other: str | Path) -> dict[str, int]:
        """Copy into this store what another store holds and this one lacks, in one transaction.

        For batch shards run on other machines (or with another ``--memory``): outcomes are
        matched by id, so merging the same store twice adds nothing. An outcome of a batch item
        this store already recorded under another id (same run and item) is skipped with its
        attempts and labels, as a resumed batch would. Labels and calibration fits are added
        unless an identical row is present; the newest label (a user's before gold) and fit win
        by time, wherever they were made. The other store is only read. Returns counts of what was added and
        skipped.
        """
        if self.memory or self.read_only:
            raise MemoryStoreError(f"memory database {self.path} cannot take a merge (in-memory or read-only)")
        if same_file(other, self.path):
            raise MemoryStoreError(f"{other} is this memory store itself; name another store to merge from")
        src = open_merge_source(other)
        try:
            with src.snapshot():  # all five tables as of one moment, even if a writer is busy
                data = {t: src._rows(f"SELECT * FROM {t} ORDER BY rowid")
                        for t in ("questions", "outcomes", "attempts", "feedback", "calibration_fits")}
        finally:
            src.close()
        counts = dict.fromkeys(("outcomes_added", "outcomes_present", "outcomes_same_run_item", "attempts_added",
                                "questions_added", "feedback_added", "fits_added"), 0)

        def without_id(row: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in row.items() if k != "id"}

        def write() -> None:
            for k in counts:
                counts[k] = 0
            with self._immediate() as db:
                conn = db.conn
                kept: set[str] = set()  # outcomes of the other store that this one now holds
                new: set[str] = set()
                for o in data["outcomes"]:
                    if conn.execute("SELECT 1 FROM outcomes WHERE id = ?", (o["id"],)).fetchone():
                        counts["outcomes_present"] += 1
                        kept.add(o["id"])
                        continue
                    if o.get("run_id") is not None and o.get("item_id") is not None and conn.execute(
                            "SELECT 1 FROM outcomes WHERE run_id = ? AND item_id = ?",
                            (o["run_id"], o["item_id"])).fetchone():
                        counts["outcomes_same_run_item"] += 1
                        continue
                    new.add(o["id"])
                    kept.add(o["id"])
                questions = {q["id"]: q for q in data["questions"]}
                for o in data["outcomes"]:
                    if o["id"] not in new:
                        continue
                    q = questions.get(o["question_id"]) or {"id": o["question_id"], "text": o["question"],
                                                            "query_class": o["query_class"],
                                                            "first_seen": o["created_at"]}
                    known = conn.execute("SELECT 1 FROM questions WHERE id = ?", (q["id"],)).fetchone()
                    conn.execute(
                        "INSERT INTO questions (id, text, query_class, first_seen) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT(id) DO UPDATE SET first_seen = min(first_seen, excluded.first_seen)",
                        (q["id"], q["text"], q["query_class"], q["first_seen"]))
                    counts["questions_added"] += known is None
                    self._insert(db, "outcomes", o)
                    counts["outcomes_added"] += 1
                for a in data["attempts"]:
                    if a["outcome_id"] in new:
                        self._insert(db, "attempts", without_id(a))
                        counts["attempts_added"] += 1
                for f in data["feedback"]:  # the current label is chosen by time, not by insertion order
                    if f["outcome_id"] not in kept or conn.execute(
                            "SELECT 1 FROM feedback WHERE outcome_id = ? AND label = ? AND source = ? AND note = ? "
                            "AND created_at = ?",
                            (f["outcome_id"], f["label"], f["source"], f["note"], f["created_at"])).fetchone():
                        continue
                    self._insert(db, "feedback", without_id(f))
                    counts["feedback_added"] += 1
                for fit in data["calibration_fits"]:
                    if conn.execute("SELECT 1 FROM calibration_fits WHERE created_at = ? AND weights_json = ?",
                                    (fit["created_at"], fit["weights_json"])).fetchone():
                        continue
                    metrics = _loads(fit.get("metrics_json")) or {}
                    if "last_label_id" in metrics:  # a label id of the other store: meaningless here
                        metrics.pop("last_label_id")
                        fit = {**fit, "metrics_json": _dumps(metrics)}
                    self._insert(db, "calibration_fits", without_id(fit))
                    counts["fits_added"] += 1

        self._write(write)
        return counts

    # ------------------------------------------------------- policy and calibration

    # The current label per outcome: the newest user label, else the newest gold label (rows only
    # grow; by time, then id, so labels merged from another store take their place by when they
    # were made).
    _LABEL_ORDER = "source = 'user' DESC, created_at DESC, id DESC"
    _LATEST_LABEL = f"""
        latest AS (
            SELECT id, outcome_id, label, source,
                   ROW_NUMBER() OVER (PARTITION BY outcome_id ORDER BY {_LABEL_ORDER}) AS rn
            FROM feedback
        )"""
    # An attempt's success: the outcome's label when this attempt is the answer that was
    # labelled (and labels are used), else, without Verdicts (:rejudge = 0), whether its
    # attribution was NONE, and with them whether today's rule diagnoses it NONE (sirag_verdict,
    # see verdicts.Judge).
    _SUCCESS = f"""CASE WHEN :use_labels AND l.label IS NOT NULL AND a.number = o.chosen_attempt
                      THEN l.label
                      WHEN NOT :rejudge THEN a.failure = 'NONE'
                      ELSE {VERDICT_SQL} END"""

    # Every repair attempt (an attempt made by a repair) with its success, its outcome's query
    # class, and the failure of the attempt before it in the same outcome (the failure the
    # repair answered).
    _REPAIRS = f"""{_LATEST_LABEL},
            seq AS (
                SELECT repair, ok, query_class, prev_failure FROM (
                    -- Only the repairs are judged: the others are there for LAG.
                    SELECT a.repair, CASE WHEN a.repair IS NOT NULL THEN {_SUCCESS} END AS ok,
                           o.query_class,
                           LAG(a.failure) OVER (PARTITION BY a.outcome_id ORDER BY a.number) AS prev_failure
                    FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
                    LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1
                    WHERE (:corpus IS NULL OR o.corpus = :corpus)  -- here, so other corpora are never judged
                ) WHERE repair IS NOT NULL
            )"""

    def _judged_rows(self, sql: str, params: dict[str, Any], use_labels: bool,
                     verdicts: Verdicts | None) -> list[dict[str, Any]]:
        """The rows of a count whose SQL reads :attr:`_SUCCESS`, its attempts judged by ``verdicts``."""
        with self._lock, self._judge.judging(verdicts):
            return self._rows(sql, {**params, "use_labels": 1 if use_labels else 0,
                                    "rejudge": 0 if verdicts is None else 1})

    def strategy_counts(self, query_class: str | None = None, first_only: bool = True,
                        use_labels: bool = False, verdicts: Verdicts | None = None,
                        corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Attempts per strategy key: (successes, failures); success is failure == 'NONE'.

        ``first_only`` counts only each outcome's first attempt; otherwise every attempt counts,
        so a strategy that only ever ran as a repair is known too. With ``use_labels`` the
        attempt an outcome answered with counts by the outcome's latest label (gold from an
        evaluation or ``sirag feedback``) instead of its attribution: an answer that passed its
        checks but was labelled wrong is a failure. With ``verdicts`` an attempt is judged by the
        confidence weights and answer bars in use now (:class:`Verdicts`) instead of by the
        diagnosis recorded when it ran. With ``corpus``, only the outcomes answered from that
        corpus (index folder) count.
        """
        # COUNT(*) - SUM(ok): the one SUM is computed once a row, so each attempt is judged once.
        rows = self._judged_rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT a.strategy_key AS key, SUM({self._SUCCESS}) AS ok, COUNT(*) - SUM({self._SUCCESS}) AS bad
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1
            WHERE (NOT :first_only
                   OR a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id))
              AND (:qc IS NULL OR o.query_class = :qc)
              AND (:corpus IS NULL OR o.corpus = :corpus)
            GROUP BY a.strategy_key
            """,
            {"qc": query_class, "first_only": 1 if first_only else 0, "corpus": corpus}, use_labels, verdicts,
        )
        return {r["key"]: (int(r["ok"]), int(r["bad"])) for r in rows}

    def repair_counts(self, failure: str, query_class: str | None = None,
                      use_labels: bool = False, verdicts: Verdicts | None = None,
                      corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Per repair: (successes, failures) of the attempts that followed a ``failure`` attempt
        (the failure recorded when the repair was chosen).

        ``use_labels``, ``verdicts`` and ``corpus`` as in :meth:`strategy_counts`.
        """
        if not isinstance(failure, str) or not failure:
            raise ValueError(f"failure must be a non-empty str, got {failure!r}")
        rows = self._judged_rows(
            f"""
            WITH {self._REPAIRS}
            SELECT repair, SUM(ok) AS ok, SUM(NOT ok) AS bad
            FROM seq WHERE prev_failure = :failure AND (:qc IS NULL OR query_class = :qc)
            GROUP BY repair
            """,
            {"qc": query_class, "failure": failure, "corpus": corpus}, use_labels, verdicts,
        )
        return {r["repair"]: (int(r["ok"]), int(r["bad"])) for r in rows}

    def repairs_by_failure(self, use_labels: bool = False, verdicts: Verdicts | None = None,
                           corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Per failure type: (successes, failures) of all repairs that followed it, over every
        query class and repair; the stop rule's evidence for a failure type with little record of
        its own. ``use_labels``, ``verdicts`` and ``corpus`` as in :meth:`strategy_counts`."""
        rows = self._judged_rows(
            f"""
            WITH {self._REPAIRS}
            SELECT prev_failure, SUM(ok) AS ok, SUM(NOT ok) AS bad
            FROM seq WHERE prev_failure IS NOT NULL
            GROUP BY prev_failure
            """,
            {"corpus": corpus}, use_labels, verdicts,
        )
        return {r["prev_failure"]: (int(r["ok"]), int(r["bad"])) for r in rows}

    def labelled_attempts(self) -> list[dict[str, Any]]:
        """The chosen attempt of every labelled answered outcome, for confidence calibration.

        Each dict: outcome_id, question_id, query_class, attempt, coverage, redundancy, grounding,
        faithfulness, confidence, refusal, mean_logprob, answer (the attempt's answer text, for
        the answer_words feature), failure, label (1 correct, 0 wrong; the latest feedback
        wins), source, then every other confidence feature but answer_words as the store holds it
        (:func:`verdicts.stored_features`; None where it was not recorded): question_fit (None
        where it was not read, or was read by its first version, which kept no question tokens),
        question_prior, dates_unstated (None for a question without a date), explanation,
        agreement (None where no replies were sampled), and corpus (the corpus it was answered
        from; None for outcomes recorded before corpora were). Signal values may be None.
        Refused outcomes are left out: confidence is the probability that a given answer is
        correct, and a label on a refusal ("rightly refused") says nothing about that.
        """
        rows = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT o.id AS outcome_id, o.question_id, o.query_class, a.number AS attempt,
                   a.coverage, a.redundancy, a.grounding, a.faithfulness, a.confidence,
                   a.refusal, a.mean_logprob, a.answer, a.failure, l.label, l.source,
                   {FEATURES_SQL} AS stored, {QUESTION_TOKENS_SQL} AS question_tokens, o.corpus
            FROM latest l
            JOIN outcomes o ON o.id = l.outcome_id
            JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
            WHERE l.rn = 1 AND o.refused = 0
            ORDER BY o.created_at, o.rowid  -- ties (one millisecond) in the order recorded, not by random id
            """
        )
        out = []
        for r in rows:
            features = stored_features(r, r.pop("stored"), r.pop("question_tokens"), r["answer"])
            corpus = r.pop("corpus")
            # answer_words is left to calibration, which reads it from the answer text.
            r.update({k: v for k, v in features.items() if k not in COLUMN_FEATURES and k != "answer_words"})
            out.append({**r, "corpus": corpus})
        return out

    def labelled_answers(self, since: str | None = None, after_label: int | None = None) -> int:
        """How many rows :meth:`labelled_attempts` returns, counted in SQL; with ``since`` (a
        ``created_at`` text), only outcomes whose label in use was given after that time; with
        ``after_label`` (a feedback row id, see :meth:`last_label_id`), only those whose label in
        use was written to this store after that row (given here, or merged in)."""
        row = self._one(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT COUNT(*) AS n
            FROM latest l
            JOIN feedback f ON f.id = l.id
            JOIN outcomes o ON o.id = l.outcome_id
            JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
            WHERE l.rn = 1 AND o.refused = 0 AND (:since IS NULL OR f.created_at > :since)
              AND (:after IS NULL OR f.id > :after)
            """,
            {"since": since, "after": after_label},
        )
        return int(row["n"]) if row else 0

    def last_label_id(self) -> int:
        """The id of the newest feedback row written to this store (0 for none). Rows are only
        appended, so a label written later, given here or merged in, has a higher id."""
        row = self._one("SELECT MAX(id) AS m FROM feedback")
        return int(row["m"]) if row and row["m"] is not None else 0

    def latest_calibration(self) -> dict[str, Any] | None:
        """The most recent calibration fit (weights and metrics parsed), or None. ``corpus_fits``
        maps a corpus to the fit made for it with this one (empty when there is none)."""
        return self._fit_of(self._one("SELECT * FROM calibration_fits ORDER BY created_at DESC, id DESC LIMIT 1"))

    def calibration_fit(self, fit_id: int) -> dict[str, Any] | None:
        """The calibration fit stored with id ``fit_id``, as :meth:`latest_calibration` gives it,
        or None when this store holds no such fit."""
        return self._fit_of(self._one("SELECT * FROM calibration_fits WHERE id = :id", {"id": int(fit_id)}))

    def save_kept_out(self, n: int, last_label_id: int, fit_id: int | None, reason: str) -> int:
        """Record an automatic calibration fit that was kept out (not stored): made on ``n``
        labelled answers when the store's newest label row was ``last_label_id``, while the fit
        ``fit_id`` (None: none) was in use, and why; returns its id. Not merged into other stores
        (its label id means nothing there)."""
        for name, value in (("n", n), ("last_label_id", last_label_id)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        row = {"created_at": _utcnow(), "n": n, "last_label_id": last_label_id,
               "fit_id": None if fit_id is None else int(fit_id), "reason": str(reason)}

        def write() -> int:
            with self._immediate() as db:
                cursor = self._insert(db, "calibration_kept_out", row)
            return int(cursor.lastrowid)

        return self._write(write)

    def latest_kept_out(self) -> dict[str, Any] | None:
        """The newest record of :meth:`save_kept_out` (``id``, ``created_at``, ``n``,
        ``last_label_id``, ``fit_id``, ``reason``), or None."""
        return self._one("SELECT * FROM calibration_kept_out ORDER BY id DESC LIMIT 1")

    @staticmethod
    def _fit_of(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        metrics = _loads(row.pop("metrics_json")) or {}
        for key in ("auroc_before", "auroc_after", "ece_before", "ece_after"):
            metrics.setdefault(key, row[key])
        return {
            "id": row["id"],
            "created_at": row["created_at"],
            "weights": _loads(row["weights_json"]),
            "n": row["n"],
            "metrics": metrics,
            "corpus_fits": _loads(row.get("corpus_fits_json")) or {},
        }

    # ----------------------------------------------------------------- analysis

    def _count(self, sql: str) -> dict[str, Any]:
        # Aggregates without GROUP BY always return exactly one row.
        return self._rows(sql)[0]

    def stats(self) -> dict[str, Any]:
        """Totals: questions, outcomes, answered, refused, attempts, rates and feedback counts, and
        the outcomes of each corpus (``corpora``; "(not recorded)" for those from before session 24)."""
        o = self._count(
            """
            SELECT COUNT(*) AS outcomes,
                   COALESCE(SUM(refused = 0 AND answer IS NOT NULL), 0) AS answered,
                   COALESCE(SUM(refused), 0) AS refused,
                   COALESCE(SUM(success), 0) AS successes,
                   AVG(confidence) AS mean_confidence
            FROM outcomes
            """
        )
        q = self._count("SELECT COUNT(*) AS n FROM questions")
        # Outcomes recorded without attempts (possible through the API) do not lower the mean.
        a = self._count("SELECT COUNT(*) AS n, COUNT(DISTINCT outcome_id) AS outcomes, AVG(total_ms) AS ms FROM attempts")
        first = self._count(
            """
            SELECT COUNT(*) AS n, COALESCE(SUM(a.failure = 'NONE'), 0) AS ok FROM attempts a
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id)
            """
        )
        # total, user and gold count label rows; correct and wrong count outcomes by their latest label.
        f = self._count(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT COUNT(*) AS total,
                   COALESCE(SUM(f.source = 'user'), 0) AS user, COALESCE(SUM(f.source = 'gold'), 0) AS gold,
                   COUNT(DISTINCT f.outcome_id) AS labelled_outcomes,
                   (SELECT COUNT(*) FROM latest WHERE rn = 1 AND label = 1) AS correct,
                   (SELECT COUNT(*) FROM latest WHERE rn = 1 AND label = 0) AS wrong
            FROM feedback f
            """
        )
        n_out = int(o["outcomes"])
        n_att = int(a["n"])
        return {
            "questions": int(q["n"]),
            "outcomes": n_out,
            "answered": int(o["answered"]),
            "refused": int(o["refused"]),
            "successes": int(o["successes"]),
            "success_rate": _rate(int(o["successes"]), n_out),
            "mean_confidence": o["mean_confidence"],
            "attempts": n_att,
            "mean_attempts": n_att / int(a["outcomes"]) if int(a["outcomes"]) else None,
            "mean_attempt_ms": a["ms"],
            "first_attempt_success_rate": _rate(int(first["ok"]), int(first["n"])),
            "feedback": {k: int(v) for k, v in f.items()},
            "corpora": {r["corpus"] if r["corpus"] is not None else NOT_RECORDED: int(r["n"]) for r in self._rows(
                "SELECT corpus, COUNT(*) AS n FROM outcomes GROUP BY corpus ORDER BY COUNT(*) DESC, corpus")},
        }

    def strategies(self) -> list[dict[str, Any]]:
        """Per strategy key over all attempts: attempts, successes (attribution NONE: the engine's own
        verdict), success_rate, mean confidence and ms; ``labelled`` answers given by that strategy
        that carry a label, and ``labelled_right_rate`` among them (the current label)."""
        rows = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT a.strategy_key, COUNT(*) AS attempts, SUM(a.failure = 'NONE') AS successes,
                   AVG(a.confidence) AS mean_confidence, AVG(a.total_ms) AS mean_total_ms,
                   COUNT(l.label) AS labelled, SUM(l.label) AS labelled_right
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1 AND a.number = o.chosen_attempt
            GROUP BY a.strategy_key ORDER BY attempts DESC, a.strategy_key
            """
        )
        for r in rows:
            r["success_rate"] = _rate(int(r["successes"]), int(r["attempts"]))
            r["labelled_right_rate"] = _rate(int(r.pop("labelled_right") or 0), int(r["labelled"]))
        return rows

    def _followups(self) -> list[dict[str, Any]]:
        return self._rows(
            """
            WITH seq AS (
                SELECT repair, failure,
                       LAG(failure) OVER (PARTITION BY outcome_id ORDER BY number) AS prev_failure
                FROM attempts
            )
            SELECT prev_failure, repair, COUNT(*) AS uses, SUM(failure = 'NONE') AS successes
            FROM seq WHERE prev_failure IS NOT NULL AND repair IS NOT NULL
            GROUP BY prev_failure, repair
            """
        )

    def failures(self) -> list[dict[str, Any]]:
        """Per failure type (not NONE): count, share of all attempts, top following repair and its success rate."""
        total = int(self._count("SELECT COUNT(*) AS n FROM attempts")["n"])
        rows = self._rows(
            "SELECT failure, COUNT(*) AS count FROM attempts WHERE failure != 'NONE' "
            "GROUP BY failure ORDER BY count DESC, failure"
        )
        best: dict[str, dict[str, Any]] = {}
        for f in self._followups():
            cur = best.get(f["prev_failure"])
            key = (f["uses"], f["successes"], f["repair"])
            if cur is None or key > (cur["uses"], cur["successes"], cur["repair"]):
                best[f["prev_failure"]] = f
        for r in rows:
            r["share"] = _rate(int(r["count"]), total)
            top = best.get(r["failure"])
            r["top_repair"] = top["repair"] if top else None
            r["top_repair_uses"] = int(top["uses"]) if top else 0
            r["top_repair_success_rate"] = _rate(int(top["successes"]), int(top["uses"])) if top else None
        return rows

    def _resolve(self, outcome_id_or_prefix: str) -> str:
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

    def show(self, outcome_id_or_prefix: str) -> dict[str, Any]:
        """One outcome with its attempts (JSON columns parsed), feedback rows and ``current_label``
        (the label in use: label, source, note, created_at; None when unlabelled); accepts a ≥ 6-char
        prefix."""
        oid = self._resolve(outcome_id_or_prefix)
        outcome = self._rows("SELECT * FROM outcomes WHERE id = ?", (oid,))[0]
        outcome["features"] = _loads(outcome.pop("features_json", None))
        attempts = self._rows("SELECT * FROM attempts WHERE outcome_id = ? ORDER BY number", (oid,))
        for a in attempts:
            for col, key in _JSON_COLUMNS:
                a[key] = _loads(a.pop(col))
        outcome["attempts"] = attempts
        outcome["feedback"] = self._rows("SELECT * FROM feedback WHERE outcome_id = ? ORDER BY created_at, id",
                                         (oid,))
        outcome["current_label"] = self._one(
            f"WITH {self._LATEST_LABEL} SELECT f.label, f.source, f.note, f.created_at FROM latest l "
            "JOIN feedback f ON f.id = l.id WHERE l.outcome_id = ? AND l.rn = 1", (oid,))
        return outcome

    def search(self, text: str, limit: int = 20) -> list[dict[str, Any]]:
        """Full-text search of questions and answers, best match first.

        Every word of ``text`` must occur (porter stemming; a possessive "'s" is dropped); FTS
        operators and quotes in the input are treated as plain words, so no input can break the query.
        A word repeated (in any case) counts once; more than ``_MAX_SEARCH_TOKENS`` different words
        are an InputError, not a query cut short (which would find outcomes without the words cut).
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {text!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        tokens = search_words(text)
        if not tokens:
            return []
        if len(tokens) > _MAX_SEARCH_TOKENS:
            raise InputError(f"the search text has {len(tokens)} different words; it reads at most "
                             f"{_MAX_SEARCH_TOKENS}, and every word must occur in a match: search with fewer words")
        # Each token is a quoted FTS5 string; \w+ tokens never contain a quote.
        match = " ".join(f'"{t}"' for t in tokens)
        return self._rows(
            """
            SELECT o.id, o.question, o.answer, o.refused, o.confidence, o.query_class, o.created_at,
                   snippet(outcomes_fts, -1, '[', ']', '...', 12) AS snippet
            FROM outcomes_fts JOIN outcomes o ON o.rowid = outcomes_fts.rowid
            WHERE outcomes_fts MATCH ?
            ORDER BY bm25(outcomes_fts), o.created_at DESC
            LIMIT ?
            """,
            (match, min(limit, _SQLITE_MAX_INT)),  # a larger int does not fit SQLite's (OverflowError)
        )

    def _export_rows(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        ocols = [r["name"] for r in self._rows("SELECT name FROM pragma_table_info('outcomes') ORDER BY cid")]
        acols = [r["name"] for r in self._rows("SELECT name FROM pragma_table_info('attempts') ORDER BY cid")]
        select = ", ".join([f"o.{c} AS outcome_{c}" for c in ocols]
                           + ["l.label AS outcome_label", "l.source AS outcome_label_source"]
                           + [f"a.{c} AS attempt_{c}" for c in acols])
        rows = self._rows(
            f"WITH {self._LATEST_LABEL} SELECT {select} FROM outcomes o "
            "LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1 LEFT JOIN attempts a ON a.outcome_id = o.id "
            "ORDER BY o.created_at, o.rowid, a.number"
        )
        return [*ocols, "label", "label_source"], acols, rows

    def export_records(self) -> list[dict]:
        """The outcomes with their attempts, as :meth:`export` writes them in JSON."""
        ocols, acols, rows = self._export_rows()
        return self._nest(ocols, acols, rows)

    def export(self, fmt: str, path: str | Path) -> int:
        """Write outcomes joined with their attempts to ``path``; returns the number of outcomes.

        'csv': one row per attempt, columns ``outcome_*`` and ``attempt_*``.
        'json': a list of outcomes, each with its ``attempts`` (JSON columns parsed).
        Each outcome carries its current label (``label`` 1/0 and ``label_source``; empty when
        unlabelled).
        """
        return self.export_files([(fmt, path)])

    def export_files(self, targets: list[tuple[str, str | Path]]) -> int:
        """Write several exports (``(fmt, path)`` pairs, formats as in :meth:`export`) from one
        reading of the store, all or nothing: each is written to a temporary file beside its target,
        and the temporaries are renamed into place only once every one was written (and removed
        when one was not), so a failed export never leaves half a file, nor one file of two.
        Returns the number of outcomes."""
        for fmt, _ in targets:
            if fmt not in ("csv", "json"):
                raise ValueError(f"fmt must be 'csv' or 'json', got {fmt!r}")
        ocols, acols, rows = self._export_rows()
        n_outcomes = len({r["outcome_id"] for r in rows})
        staged: list[tuple[Path, Path]] = []  # (temporary, target)
        try:
            for fmt, target in targets:
                path = Path(target)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
                    staged.append((tmp, path))
                    with tmp.open("w", encoding="utf-8", newline="") as fh:
                        if fmt == "csv":
                            fields = [f"outcome_{c}" for c in ocols] + [f"attempt_{c}" for c in acols]
                            writer = csv.DictWriter(fh, fieldnames=fields)
                            writer.writeheader()
                            writer.writerows(rows)
                        else:
                            json.dump(self._nest(ocols, acols, rows), fh, ensure_ascii=False, indent=1)
                except OSError as exc:  # name the file the user asked for, not the temporary one
                    raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
            done: list[Path] = []
            for tmp, path in staged:
                try:
                    os.replace(tmp, path)
                except OSError as exc:  # seldom (the folder was writable a moment ago): say what was written
                    written = f" ({', '.join(map(str, done))} was written all the same)" if done else ""
                    raise type(exc)(exc.errno, f"{exc.strerror or exc}{written}", str(path)) from exc
                done.append(path)
        finally:
            for tmp, _ in staged:
                _remove_quietly(tmp)
        return n_outcomes

    @staticmethod
    def _nest(ocols: list[str], acols: list[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            oid = r["outcome_id"]
            if oid not in out:
                outcome = {c: r[f"outcome_{c}"] for c in ocols}
                outcome["features"] = _loads(outcome.pop("features_json", None))
                outcome["attempts"] = []
                out[oid] = outcome
            if r["attempt_id"] is None:
                continue
            attempt = {c: r[f"attempt_{c}"] for c in acols}
            for col, key in _JSON_COLUMNS:
                attempt[key] = _loads(attempt.pop(col))
            out[oid]["attempts"].append(attempt)
        return list(out.values())

    def learning_curve(self, window: int = 20) -> list[dict[str, Any]]:
        """Outcomes in time order with rolling first-attempt success and outcome success.

        Each point: index (1-based), outcome_id, created_at, first_success (0/1),
        rolling_first_success and rolling_success over the last ``window`` outcomes.
        """
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        rows = self._rows(
            """
            SELECT o.id AS outcome_id, o.created_at, o.success, o.n_attempts,
                   (a.failure = 'NONE') AS first_success
            FROM outcomes o JOIN attempts a ON a.outcome_id = o.id
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = o.id)
            ORDER BY o.created_at, o.rowid
            """
        )
        points = []
        for i, r in enumerate(rows):
            recent = rows[max(0, i - window + 1) : i + 1]
            points.append(
                {
                    "index": i + 1,
                    "outcome_id": r["outcome_id"],
                    "created_at": r["created_at"],
                    "n_attempts": r["n_attempts"],
                    "first_success": int(r["first_success"]),
                    "rolling_first_success": sum(int(x["first_success"]) for x in recent) / len(recent),
                    "rolling_success": sum(int(x["success"] or 0) for x in recent) / len(recent),
                }
            )
        return points

    def strategy_by_class(self) -> list[dict[str, Any]]:
        """First attempts per (query_class, strategy_key): attempts, successes, success_rate."""
        rows = self._rows(
            """
            SELECT COALESCE(o.query_class, 'other') AS query_class, a.strategy_key,
                   COUNT(*) AS attempts, SUM(a.failure = 'NONE') AS successes
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id)
            GROUP BY 1, 2 ORDER BY 1, 3 DESC
            """
        )
        for r in rows:
            r["success_rate"] = _rate(int(r["successes"]), int(r["attempts"]))
        return rows

    def failure_timeline(self, buckets: int = 10) -> list[dict[str, Any]]:
        """Attempts in time order cut into up to ``buckets`` equal groups, with failure counts per group."""
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
            raise ValueError(f"buckets must be a positive int, got {buckets!r}")
        rows = self._rows("SELECT failure, created_at FROM attempts ORDER BY created_at, id")
        n = len(rows)
        k = min(buckets, n)
        out = []
        for b in range(k):
            part = rows[b * n // k : (b + 1) * n // k]
            counts: dict[str, int] = {}
            for r in part:
                counts[r["failure"]] = counts.get(r["failure"], 0) + 1
            out.append(
                {"bucket": b + 1, "start": part[0]["created_at"], "end": part[-1]["created_at"],
                 "n": len(part), "counts": counts}
            )
        return out

    def confidence_histogram(self, bins: int = 10) -> dict[str, Any]:
        """Outcome confidences in ``bins`` equal bins over [0, 1], split into answered and refused."""
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        answered = [0] * bins
        refused = [0] * bins
        for r in self._rows("SELECT confidence, refused FROM outcomes WHERE confidence IS NOT NULL"):
            i = bin_index(float(r["confidence"]), bins)  # clipped to the first and last bin
            (refused if r["refused"] else answered)[i] += 1
        return {"edges": [i / bins for i in range(bins + 1)], "answered": answered, "refused": refused}

    def reliability(self, bins: int = 10) -> dict[str, Any]:
        """Outcome confidence bins against observed accuracy, with the expected calibration error.

        Answered outcomes only (confidence is the probability that an answer is correct). The
        target is the latest feedback label when any answered outcome has one
        (``target='feedback'``); otherwise the chosen attempt's own verdict, failure ==
        'NONE' (``target='self-assessed'``). Outcome ``success`` is not used: it is
        derived from confidence and would make the diagram trivially a step.
        """
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        labelled = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT o.confidence, l.label AS y FROM latest l JOIN outcomes o ON o.id = l.outcome_id
            WHERE l.rn = 1 AND o.confidence IS NOT NULL AND o.refused = 0
            """
        )
        target = "feedback"
        pairs = labelled
        if not pairs:
            target = "self-assessed"
            pairs = self._rows(
                """
                SELECT o.confidence, (a.failure = 'NONE') AS y FROM outcomes o
                JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
                WHERE o.confidence IS NOT NULL AND o.refused = 0
                """
            )
        groups: list[list[tuple[float, int]]] = [[] for _ in range(bins)]
        for p in pairs:
            c = min(1.0, max(0.0, float(p["confidence"])))
            groups[bin_index(c, bins)].append((c, int(p["y"])))
        out_bins = []
        ece = 0.0
        for i, g in enumerate(groups):
            mean_c = sum(c for c, _ in g) / len(g) if g else None
            acc = sum(y for _, y in g) / len(g) if g else None
            if g:
                ece += len(g) / len(pairs) * abs(acc - mean_c)  # type: ignore[operator]
            out_bins.append(
                {"lo": i / bins, "hi": (i + 1) / bins, "n": len(g), "mean_confidence": mean_c, "accuracy": acc}
            )
        return {"target": target, "n": len(pairs), "ece": ece if pairs else None, "bins": out_bins}
