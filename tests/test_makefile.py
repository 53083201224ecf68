"""The Makefile's own targets that need no installation, run for real on a copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_removes_demo_indexes_and_test_caches_but_never_runs_or_memory(tmp_path):
    # README: `make clean` removes the demo indexes and test caches (never runs/ or memory/).
    # The test suite writes Hypothesis' example database (.hypothesis/) beside .pytest_cache.
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    removed = ["index/demo", "index/user", ".pytest_cache", ".hypothesis"]
    kept = ["runs/sherlock-dev", "memory", "index/sherlock"]
    for d in removed + kept:
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "f").write_text("x")
    r = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [d for d in removed if (tmp_path / d).exists()] == []
    assert all((tmp_path / d / "f").exists() for d in kept)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_on_your_files_without_a_question_says_so_before_any_work(tmp_path):
    # README: `make demo CORPUS=dir QUESTION="..."`. Without QUESTION it installed, ingested, and then
    # failed in `sirag ask ""` with "the question is empty", which does not name QUESTION=.
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    r = subprocess.run(["make", "-n", "demo", "CORPUS=mydocs"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and 'make demo CORPUS=mydocs QUESTION="' in r.stderr, r.stderr
    assert "pip install" not in r.stdout  # nothing would have run
    r = subprocess.run(["make", "-n", "demo", "CORPUS=mydocs", "QUESTION=Who wrote it?"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "sirag ask \"Who wrote it?\" --index index/user" in r.stdout, r.stderr
    r = subprocess.run(["make", "-n", "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "sirag ingest docs README.md" in r.stdout, r.stderr
