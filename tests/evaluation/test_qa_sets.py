"""The project's labelled book sets hold what data/qa/README.md says: verbatim evidence, enough
unanswerable near-misses and two-passage questions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED, skip_or_fail

SETS = ["time_machine", "dorian_gray", "styles", "alice", "frankenstein"]


@pytest.mark.parametrize("name", SETS)
def test_a_book_set_passes_its_checks(name):
    if not (SHARED / "data" / "corpora").is_dir():
        skip_or_fail(f"the books are not at {SHARED / 'data' / 'corpora'}")
    path = REPO / "data" / "qa" / f"{name}.jsonl"
    r = subprocess.run([sys.executable, str(REPO / "data" / "qa" / "check_qa.py"), str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    counts = r.stdout.split(":")[1]
    total, answerable = int(counts.split()[0]), int(counts.split(",")[1].split()[0])
    multi = int(counts.split("(")[1].split()[0])
    assert total >= 40 and (total - answerable) >= total / 4 and multi >= 0.15 * total
