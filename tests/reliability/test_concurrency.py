"""Processes sharing one index and one memory store: nobody sees "database is locked",
nothing is lost or duplicated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.reliability_kit import ingest_test_corpus, memory_count, replies, run_cli, start_cli

QUESTIONS = (
    "Who built the lighthouse of Marrow Point?",
    "How many sailors did Tobias Lune save?",
    "When does the fish market open?",
    "Who planted the Grandmother tree?",
)
REPLY = replies("The passages answer it [1].")


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """tmp_path with the test corpus ingested into tmp_path/index."""
    return ingest_test_corpus(tmp_path)


def test_four_asks_at_once_share_memory_and_index(indexed: Path) -> None:
    db = indexed / "memory" / "memory.db"
    assert not db.exists(), "the store must start blank so that the four processes also race to create it"
    procs = [start_cli(indexed, ["ask", q, "--json"], cwd=indexed, extra=[REPLY]) for q in QUESTIONS]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120))
        finally:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert "database is locked" not in err.lower()
        assert p.returncode == 0, err
        assert json.loads(out)["outcome_id"]
    stats = run_cli(indexed, ["memory", "stats", "--json"], cwd=indexed)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["outcomes"] == 4
    assert data["questions"] == 4
    assert memory_count(db, "SELECT COUNT(*) FROM _sqlite_migrations") == memory_count(
        db, "SELECT COUNT(DISTINCT name) FROM _sqlite_migrations"), "a migration was applied twice"


def test_second_ingest_is_refused_while_one_holds_the_lock(indexed: Path) -> None:
    """One ingest at a time: a second one fails with one line instead of interleaving writes."""
    import fcntl

    before = (indexed / "index" / "CURRENT").read_text(encoding="utf-8")
    with (indexed / "index" / "ingest.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running ingest holds
        proc = run_cli(indexed, ["ingest", "docs", "--rebuild"], cwd=indexed)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: another ingest") and proc.stderr.count("\n") == 1, proc.stderr
    assert (indexed / "index" / "CURRENT").read_text(encoding="utf-8") == before
