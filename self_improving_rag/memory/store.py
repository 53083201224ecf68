"""SQLite memory of every answer: the policy's priors, calibration data and analysis.

One ``MemoryStore`` wraps one SQLite file (WAL, 30 s busy timeout). Its parts: opening the file,
with its checks and the schema migrations of ``migrations.py``, transactions and reads
(``connection.py``); recording, labels and merging (here: ``record`` writes one outcome with all
its attempts in one transaction); the counts that feed the policy's bandit (``verdicts.py``);
calibration's labelled answers and fits (``fits.py``); the analyses behind the CLI reports,
exports and ``report.write_html_report`` (``analysis.py``).
"""

from __future__ import annotations

import os
import sqlite3
import unicodedata
import uuid
from hashlib import sha256
from pathlib import Path
from typing import Any

from ..errors import MemoryStoreError, OlderSchemaError
from ..confidence import answer_words, sigmoid
from ..types import Answer, AttemptRecord
from .analysis import Analysis
from .connection import _after, _dumps, _loads, _utcnow
from .fits import Fits
from .interrupts import interruptible, interrupted_in_sql
from .verdicts import Counts, Verdicts

# Verdicts and interrupted_in_sql are defined in verdicts.py and interrupts.py, and named here too.
__all__ = ["MemoryStore", "Verdicts", "interrupted_in_sql", "open_merge_source", "question_id", "same_file"]

FEEDBACK_SOURCES = ("user", "gold")
SIGNAL_NAMES = ("coverage", "redundancy", "grounding", "faithfulness", "confidence")


def question_id(text: str) -> str:
    """Stable id of a question: sha256 of its normalised text, first 16 hex digits.

    Normalisation (NFKC, case folding, collapsed whitespace, trailing ``?.!`` dropped)
    makes "Who is Holmes?" and "who  is holmes" the same question.
    """
    norm = " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip("?.! ")
    return sha256(norm.encode("utf-8")).hexdigest()[:16]


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


class MemoryStore(Fits, Counts, Analysis):
    """The memory database of outcomes, attempts, feedback and calibration fits.

    ``path`` is a SQLite file (its parent directory is created when writable) or
    ``":memory:"``. With ``read_only=True`` the file is opened through a ``mode=ro``
    URI: nothing is created, migrated or written, even by root. The methods are those of its
    parts: :class:`~.connection.StoreFile` (opening, transactions, reads), :class:`~.verdicts.Counts`
    (the policy's counts), :class:`~.fits.Fits` (calibration) and :class:`~.analysis.Analysis`
    (the reports), and those below (recording, labels, merging).
    """

    def _register_functions(self, conn: sqlite3.Connection) -> None:
        """The pure ``sirag_answer_words`` and ``sirag_sigmoid`` (calibration's), for SQL of one's
        own over the stored features, beside the functions of the store's parts."""
        super()._register_functions(conn)
        conn.create_function("sirag_answer_words", 2,
                             interruptible(lambda text, refusal: answer_words(text, bool(refusal))), deterministic=True)
        conn.create_function("sirag_sigmoid", 1, interruptible(sigmoid), deterministic=True)

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
