"""Killed and interrupted runs: ``sirag batch`` resumes without losing or duplicating a
question, a torn last line is repaired, Ctrl-C stops cleanly, and an interrupted ingest
leaves the previous index usable."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

from tests.reliability.reliability_kit import (ingest_test_corpus, write_batch, index_fingerprint, memory_count, replies, result_lines, run_cli,
                                               start_cli, wait_for)

REPLY = replies("Clara Venn built the lighthouse [1].")
RUN = "crash"


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """tmp_path with the test corpus ingested into tmp_path/index."""
    return ingest_test_corpus(tmp_path)


def start_batch_with_rows(root: Path, n: int, rows: int = 5):
    """Start ``sirag batch`` on n questions and wait until ``rows`` results are written."""
    batch = write_batch(root, n, RUN)
    results = root / "runs" / RUN / "results.jsonl"
    proc = start_cli(root, ["batch", batch.name], cwd=root, extra=[REPLY])
    try:
        wait_for(lambda: len(result_lines(results)) >= rows or proc.poll() is not None, 60, f"{rows} result lines")
    except BaseException:
        proc.kill()
        proc.communicate(timeout=30)
        raise
    return batch, results, proc


def check_complete(root: Path, n: int, run: str = RUN) -> None:
    """One valid result line per question id and one memory outcome per (run, item)."""
    lines = result_lines(root / "runs" / run / "results.jsonl")
    rows = [json.loads(line) for line in lines]  # every line is complete JSON
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"duplicate result rows: {sorted(i for i in set(ids) if ids.count(i) > 1)[:5]}"
    assert set(ids) == {f"q{i:04d}" for i in range(n)}, "questions missing from results.jsonl"
    db = root / "memory" / "memory.db"
    assert memory_count(db, "SELECT COUNT(*) FROM outcomes WHERE run_id = ?", (run,)) == n
    assert memory_count(db, "SELECT COUNT(DISTINCT item_id) FROM outcomes WHERE run_id = ?", (run,)) == n
    # The rows' outcome ids are the memory's ids: a resumed question did not get a second outcome.
    oids = {r["outcome_id"] for r in rows}
    assert len(oids) == n
    assert memory_count(db, f"SELECT COUNT(*) FROM outcomes WHERE id IN ({','.join('?' * n)})", tuple(oids)) == n


def test_kill_9_then_resume_gives_each_question_once(indexed: Path) -> None:
    n = 60
    batch, results, proc = start_batch_with_rows(indexed, n)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the batch finished before it could be killed; make it longer"
    killed_at = len(result_lines(results))
    assert 5 <= killed_at < n

    done = run_cli(indexed, ["batch", batch.name], cwd=indexed, extra=[REPLY], timeout=120)
    assert done.returncode == 0, done.stderr
    check_complete(indexed, n)


def test_torn_last_line_is_repaired_on_resume(indexed: Path) -> None:
    n = 12
    batch = write_batch(indexed, n, RUN)
    first = run_cli(indexed, ["batch", batch.name, "--limit", "6"], cwd=indexed, extra=[REPLY])
    assert first.returncode == 0, first.stderr
    results = indexed / "runs" / RUN / "results.jsonl"
    lines = result_lines(results)
    assert len(lines) == 6
    # A process killed in the middle of writing the sixth row: half of it, no newline.
    torn = lines[-1][: len(lines[-1]) // 2]
    results.write_text("\n".join(lines[:-1]) + "\n" + torn, encoding="utf-8")

    done = run_cli(indexed, ["batch", batch.name], cwd=indexed, extra=[REPLY])
    assert done.returncode == 0, done.stderr
    assert results.read_text(encoding="utf-8").endswith("\n")
    check_complete(indexed, n)


def test_ctrl_c_during_batch_exits_130_and_keeps_results(indexed: Path) -> None:
    n = 60
    batch, results, proc = start_batch_with_rows(indexed, n)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, f"exit code {proc.returncode}; stderr:\n{err}"
    assert "Traceback" not in err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("interrupted"), f"not one 'interrupted' line:\n{err}"
    kept = [json.loads(line) for line in result_lines(results)]  # all complete rows
    assert 5 <= len(kept) < n
    # What was kept counts: the resumed run only asks the rest.
    done = run_cli(indexed, ["batch", batch.name], cwd=indexed, extra=[REPLY], timeout=120)
    assert done.returncode == 0, done.stderr
    check_complete(indexed, n)


def _big_corpus(root: Path, n_docs: int = 100) -> Path:
    rng = random.Random(0)
    words = ("harbour lighthouse keeper storm schooner market orchard apple pear miller harvest cider "
             "barrel council medal sailor rock quay herring bell").split()
    root.mkdir(parents=True)
    for i in range(n_docs):
        parts = [f"# Logbook {i}"]
        for s in range(6):
            sentences = " ".join(" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(8))
            parts.append(f"## Entry {s}\n\n{sentences}")
        (root / f"log{i:03d}.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_interrupted_ingest_leaves_previous_index_usable(indexed: Path, sig: signal.Signals) -> None:
    index = indexed / "index"
    before = index_fingerprint(index)
    big = _big_corpus(indexed / "big")
    proc = start_cli(indexed, ["ingest", str(big), "docs"], cwd=indexed)
    try:
        # A .building- folder exists while the new generation is being written: the riskiest moment.
        wait_for(lambda: any(p.name.startswith(".building-") for p in index.iterdir()) or proc.poll() is not None,
                 60, "the new generation folder")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    expected = 130 if sig == signal.SIGINT else -signal.SIGKILL
    assert proc.returncode == expected, f"exit code {proc.returncode} (finished before the signal?); stderr:\n{err}"
    assert "Traceback" not in err
    if sig == signal.SIGINT:
        # Not the batch message ("finished results were kept"): nothing of this ingest is kept.
        assert "index is as it was before" in err and "were kept" not in err, err

    assert index_fingerprint(index) == before, "the live generation or CURRENT changed"
    found = run_cli(indexed, ["search", "Who built the lighthouse of Marrow Point?", "--json"], cwd=indexed)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits and "Clara Venn" in " ".join(h["text"] for h in hits)
    assert {h["doc"] for h in hits} <= {"harbour", "orchard"}, "hits from the interrupted ingest"
    # The ingest lock was released: the next ingest runs.
    again = run_cli(indexed, ["ingest", "docs"], cwd=indexed)
    assert again.returncode == 0, again.stderr


def test_a_second_process_on_the_same_run_is_refused(tmp_path):
    """Two processes resuming one run would answer the same questions twice: the second is refused."""
    from self_improving_rag.batch.rundir import lock_run
    from self_improving_rag.errors import BatchError

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    held = lock_run(run_dir)
    try:
        with pytest.raises(BatchError, match="another sirag process"):
            lock_run(run_dir)
    finally:
        held.close()
    lock_run(run_dir).close()  # free again once the first holder is gone
