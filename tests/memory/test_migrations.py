"""Schema migrations: a blank database, an upgrade from the oldest schema, and bad files."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
from sqlite_utils import Database

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import STRATEGY_A, make_answer  # noqa: E402

from self_improving_rag.errors import MemoryStoreError  # noqa: E402
from self_improving_rag.memory import MemoryStore  # noqa: E402
from self_improving_rag.memory.migrations import MIGRATION_SET, MIGRATIONS, migration_names  # noqa: E402
from self_improving_rag.memory.store import question_id  # noqa: E402

OLDEST_STOP = "m002_add_outcome_run_columns"


def columns(db: Database | sqlite3.Connection, table: str) -> set[str]:
    conn = db.conn if isinstance(db, Database) else db
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def applied(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY rowid", (MIGRATION_SET,)
        ).fetchall()
    return [r[0] for r in rows]


def test_migrations_are_named_in_order() -> None:
    names = migration_names()
    assert names[0] == "m001_create_tables"
    assert OLDEST_STOP in names
    assert len(names) == len(set(names)) >= 2
    for i, name in enumerate(names, start=1):
        assert re.fullmatch(rf"m{i:03d}_[a-z0-9_]+", name), name


def test_blank_database_gets_every_migration_and_table(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    with MemoryStore(path) as s:
        tables = set(s.db.table_names())
        assert {"questions", "outcomes", "attempts", "feedback", "calibration_fits", "outcomes_fts"} <= tables
        assert {"run_id", "item_id", "features_json", "question", "answer", "success"} <= columns(s.db, "outcomes")
        assert {"strategy_key", "strategy_json", "repair", "failure", "signals_json", "mean_logprob",
                "timings_json", "total_ms", "created_at"} <= columns(s.db, "attempts")
        assert {"metrics_json", "corpus_fits_json"} <= columns(s.db, "calibration_fits")
        assert "corpus" in columns(s.db, "outcomes")
        assert {"n", "last_label_id", "fit_id", "reason"} <= columns(s.db, "calibration_kept_out")
        triggers = {t.name for t in s.db["outcomes"].triggers}
        assert {"outcomes_ai", "outcomes_ad", "outcomes_au"} <= triggers
        indexes = {i.name: i for i in s.db["outcomes"].indexes}
        assert indexes["idx_outcomes_run_item"].unique
    assert applied(path) == migration_names()


def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    with MemoryStore(path) as s:
        s.record(make_answer())
    with MemoryStore(path) as s:
        assert s.stats()["outcomes"] == 1
    assert applied(path) == migration_names()


def test_upgrade_from_the_oldest_schema_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    # Build the first release's schema with the real migration runner, then write to it
    # the way that release did.
    with Database(path) as old:
        MIGRATIONS.apply(old, stop_before=OLDEST_STOP)
        assert "run_id" not in columns(old, "outcomes")
        qid = question_id("Who wrote the letter?")
        with old.conn:
            old.execute("INSERT INTO questions VALUES (?, ?, 'who', '2025-01-01T00:00:00+00:00')",
                        [qid, "Who wrote the letter?"])
            old.execute(
                "INSERT INTO outcomes (id, question_id, question, answer, refused, confidence, query_class, "
                "chosen_attempt, n_attempts, first_strategy_key, final_strategy_key, success, total_ms, created_at) "
                "VALUES ('0ld0ut0ome000000000000000000000a', ?, 'Who wrote the letter?', 'Laura Lyons [2]', 0, 0.8, "
                "'who', 1, 1, ?, ?, 1, 120.0, '2025-01-01T00:00:00+00:00')",
                [qid, STRATEGY_A.key, STRATEGY_A.key],
            )
            old.execute(
                "INSERT INTO attempts (outcome_id, number, strategy_key, strategy_json, failure, signals_json, "
                "confidence, refusal, created_at) VALUES ('0ld0ut0ome000000000000000000000a', 1, ?, '{}', 'NONE', "
                "'{}', 0.8, 0, '2025-01-01T00:00:00+00:00')",
                [STRATEGY_A.key],
            )
    assert applied(path) == ["m001_create_tables"]

    with MemoryStore(path) as s:
        assert applied(path) == migration_names()
        assert {"run_id", "item_id", "features_json"} <= columns(s.db, "outcomes")
        assert "metrics_json" in columns(s.db, "calibration_fits")
        old_row = s.show("0ld0ut0ome")
        assert old_row["answer"] == "Laura Lyons [2]" and old_row["run_id"] is None and old_row["features"] is None
        assert s.search("letter")[0]["id"] == old_row["id"]
        assert s.strategy_counts("who") == {STRATEGY_A.key: (1, 0)}
        # The new columns work: idempotent batch items.
        new = s.record(make_answer("Who wrote the letter?"), run_id="r", item_id="1")
        assert s.record(make_answer("Who wrote the letter?"), run_id="r", item_id="1") == new
        assert s.stats()["outcomes"] == 2 and s.stats()["questions"] == 1
        s.save_calibration({"coverage": 1.0}, 1, {"brier": 0.1})
        assert s.latest_calibration()["metrics"]["brier"] == 0.1
        # An outcome from before the corpus was recorded has none; the fit has no corpus fits.
        assert old_row["corpus"] is None and s.latest_calibration()["corpus_fits"] == {}
        assert s.stats()["corpora"] == {"(not recorded)": 2}


def test_upgrade_to_the_record_of_fits_kept_out_keeps_the_fits(tmp_path: Path) -> None:
    """m005 adds the record of automatic fits kept out to a store of the schema before it."""
    path = tmp_path / "m004.db"
    with Database(path) as old:
        MIGRATIONS.apply(old, stop_before="m005_add_kept_out_fits")
        assert "calibration_kept_out" not in old.table_names()
        with old.conn:
            old.execute("INSERT INTO calibration_fits (created_at, weights_json, n, metrics_json) "
                        "VALUES ('2026-01-01T00:00:00.000+00:00', '{\"coverage\": 1.0}', 3, '{}')")
    with MemoryStore(path) as s:
        assert applied(path) == migration_names()
        fit = s.latest_calibration()
        assert fit["weights"] == {"coverage": 1.0} and fit["n"] == 3
        assert s.latest_kept_out() is None
        reason = "held-out Brier 0.300 > the default weights' 0.250"
        kept = s.save_kept_out(4, 0, fit["id"], reason)
        assert {k: v for k, v in s.latest_kept_out().items() if k != "created_at"} == {
            "id": kept, "n": 4, "last_label_id": 0, "fit_id": fit["id"], "reason": reason}


def test_older_schema_opened_read_only_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Database(path) as old:
        MIGRATIONS.apply(old, stop_before=OLDEST_STOP)
    with pytest.raises(MemoryStoreError, match="older schema"):
        MemoryStore(path, read_only=True)
    assert applied(path) == ["m001_create_tables"]


def test_commands_that_only_read_upgrade_an_older_store_first(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "old.db"
    with Database(path) as old:
        MIGRATIONS.apply(old, stop_before=OLDEST_STOP)
    r = subprocess.run([sys.executable, "-m", "self_improving_rag.cli", "calibrate", "--dry-run", "--min-labels", "2",
                        "--memory", str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    # The dry run reaches the labels (there are none) instead of stopping at the schema.
    assert r.returncode == 2 and "only 0 labelled answered outcome(s)" in r.stderr and "older schema" not in r.stderr
    assert applied(path) == migration_names()


def test_an_older_store_that_cannot_be_written_says_to_upgrade_a_copy(tmp_path: Path, monkeypatch) -> None:
    from self_improving_rag.cli import common
    from self_improving_rag.config import Config

    path = tmp_path / "old.db"
    with Database(path) as old:
        MIGRATIONS.apply(old, stop_before=OLDEST_STOP)
    opened = common.open_memory

    def busy_file(config, read_only=False):  # another process holds the write lock
        if not read_only:
            raise MemoryStoreError(f"memory database {path} is locked by another process")
        return opened(config, read_only=True)

    monkeypatch.setattr(common, "open_memory", busy_file)
    config = Config.model_validate({"paths": {"memory_db": str(path)}})
    # A file that can be written but was not (busy): the cause is given, not advice to copy it.
    with pytest.raises(MemoryStoreError, match=r"has an older schema and could not be upgraded: memory database "
                                               r".* is locked by another process$"):
        common.readable_memory(config, "memory")
    # A file that cannot be written (as on a read-only mount; root ignores permissions, so the
    # check is what is replaced): upgrade a copy.
    monkeypatch.setattr(common.os, "access", lambda p, mode: False)
    with pytest.raises(MemoryStoreError, match=r"has an older schema and cannot be upgraded where it is.*copy it "
                                               r"\(with its -wal file, if any\) to a writable folder"):
        common.readable_memory(config, "memory")
    assert applied(path) == ["m001_create_tables"]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    MemoryStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
            (MIGRATION_SET, "m999_from_the_future", "2099-01-01 00:00:00+00:00"),
        )
    for read_only in (False, True):
        with pytest.raises(MemoryStoreError) as info:
            MemoryStore(path, read_only=read_only)
        message = str(info.value)
        assert "newer version of sirag" in message and "--memory" in message and str(path) in message
        assert "\n" not in message


def test_other_migration_sets_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    MemoryStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES ('plugin', 'p1', 'x')")
    with MemoryStore(path) as s:
        assert s.stats()["outcomes"] == 0


@pytest.mark.parametrize("content", [b"this is not a database at all " * 200, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_corrupt_file_is_a_clear_error_and_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "sirag.db"
    path.write_bytes(content)
    for read_only in (False, True):
        with pytest.raises(MemoryStoreError) as info:
            MemoryStore(path, read_only=read_only)
        message = str(info.value)
        assert str(path) in message and "not a SQLite database" in message and "--memory" in message
    assert path.read_bytes() == content


def test_foreign_database_with_clashing_tables(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE outcomes (x)")
    with pytest.raises(MemoryStoreError, match=r"not a sirag memory store \(it holds other tables: outcomes\)"):
        MemoryStore(path)
    # Refused before any migration ran: no half-made schema behind.
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "questions" not in names


def test_a_foreign_database_is_not_adopted_even_when_opened_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE foo (x)")
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(MemoryStoreError, match=r"not a sirag memory store \(it holds other tables: foo\)"):
            MemoryStore(path, read_only=read_only)
    # Not a byte written: its journal mode, too, stays the owner's (WAL would persist in the file).
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["foo"]


def test_a_store_migrated_by_another_process_between_two_looks_opens(tmp_path: Path, monkeypatch) -> None:
    # Batch workers open a new store at the same moment: another may migrate the file right after
    # this one saw no migration applied. Its tables are then sirag's own, not somebody else's.
    path = tmp_path / "new.db"
    real_applied, real_tables, real_immediate = type(MIGRATIONS).applied, Database.table_names, MemoryStore._immediate
    looked: list[int] = []
    raced: list[int] = []

    def on_file(db) -> bool:
        return any(Path(row[2]) == path for row in db.conn.execute("PRAGMA database_list") if row[2])

    def race() -> None:
        if looked and not raced:
            raced.append(1)
            other = MemoryStore(path)  # the other process migrates the file now
            assert other.stats()["outcomes"] == 0
            other.close()

    def applied(self, db):
        seen = real_applied(self, db)
        if not seen and on_file(db):
            looked.append(1)  # this store's first look: nothing applied yet
        return seen

    def table_names(self, *args, **kwargs):
        if not self.conn.in_transaction and on_file(self):
            race()  # the other process may finish before the next look at the tables ...
        return real_tables(self, *args, **kwargs)

    def immediate(self, db=None):
        if self.path == path:
            race()  # ... or before this store takes the write lock to migrate
        return real_immediate(self, db)

    monkeypatch.setattr(type(MIGRATIONS), "applied", applied)
    monkeypatch.setattr(Database, "table_names", table_names)
    monkeypatch.setattr(MemoryStore, "_immediate", immediate)
    store = MemoryStore(path)
    assert raced, "the race did not happen"
    store.record(make_answer("Who built the lighthouse?"), run_id="r")
    assert store.stats()["outcomes"] == 1
    store.close()
