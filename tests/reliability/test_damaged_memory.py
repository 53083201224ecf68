"""`sirag memory backup` makes a copy of the memory store to restore from.

Through the real CLI with the fakes (hash embedder, scripted generator).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_corpus
from tests.reliability.reliability_kit import memory_count, run_cli

QUESTIONS = ("Who built the lighthouse?", "When did the Greyling strike the rocks?", "What does Mrs. Alder sell?")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """An index of the test corpus and a memory store holding an outcome per question."""
    world = tmp_path_factory.mktemp("recorded")
    assert run_cli(world, ["ingest", str(write_corpus(world / "docs"))], cwd=world).returncode == 0
    for question in QUESTIONS:
        r = run_cli(world, ["ask", question], cwd=world)
        assert r.returncode == 0, r.stderr
    return world


def _copy_world(recorded: Path, tmp_path: Path) -> Path:
    """The recorded world's index and a copy of its store under ``tmp_path`` (each test works on its own copy)."""
    (tmp_path / "index").symlink_to(recorded / "index", target_is_directory=True)
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.db").write_bytes((recorded / "memory" / "memory.db").read_bytes())
    return tmp_path / "memory" / "memory.db"


def _one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    return errors[0]


def test_memory_backup_copies_the_store_and_never_overwrites_without_force(recorded, tmp_path) -> None:
    db = _copy_world(recorded, tmp_path)
    r = run_cli(tmp_path, ["memory", "backup", "backups/copy.db"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    copy = tmp_path / "backups" / "copy.db"
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == len(QUESTIONS)
    assert not Path(f"{copy}-wal").exists()  # one self-contained file
    r = run_cli(tmp_path, ["memory", "stats", "--json", "--memory", str(copy)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # An existing file is kept unless --force.
    r = run_cli(tmp_path, ["memory", "backup", str(copy)], cwd=tmp_path)
    assert r.returncode == 2 and "--force" in _one_error(r.stderr)
    run_cli(tmp_path, ["ask", "Who kept the light?"], cwd=tmp_path)
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == len(QUESTIONS)
    r = run_cli(tmp_path, ["memory", "backup", str(copy), "--force"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == memory_count(db, "SELECT count(*) FROM outcomes")
    # Never onto the store itself, and --help shows how it is used.
    r = run_cli(tmp_path, ["memory", "backup", str(db), "--force"], cwd=tmp_path)
    assert r.returncode == 2 and "memory database itself" in _one_error(r.stderr)
    r = run_cli(tmp_path, ["memory", "--help"], cwd=tmp_path)
    assert "sirag memory backup backups/" in r.stdout and "--force" in r.stdout
