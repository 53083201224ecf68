"""Ctrl-C of `sirag batch --workers 2` (two actors on a local Ray) as a terminal sends it (SIGINT
to the whole process group): the batch ends within seconds with one line and exit code 130, keeps
its written rows whole, and the same command then asks only the rest."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.reliability.reliability_kit import (cli_argv, env, ingest_test_corpus, memory_count, replies,
                                               result_lines, run_cli, wait_for, write_batch)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups")

RUN = "ctrlc"
N = 40
#: Seconds a Ctrl-C'd batch may take to end (Ray's own processes end with it).
PROMPT_S = 15
#: A line Ray's own logging writes (its start-up notes), not sirag's.
RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+[A-Z]+ \S+:\d+ -- ")


@pytest.fixture(autouse=True)
def _needs_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail("needs Ray: pip install -e '.[ray]'")


def _start(world: Path, batch: Path) -> subprocess.Popen:
    """The batch in a process group of its own, as a shell starts a job: Ctrl-C reaches every process in it."""
    return subprocess.Popen(cli_argv(world, ["batch", batch.name, "--workers", "2"], [replies("Clara Venn [1].")]),
                            cwd=world, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _ctrl_c_ends_promptly(proc: subprocess.Popen, sent_at: float) -> str:
    try:
        _, err = proc.communicate(timeout=PROMPT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"the batch was still running {PROMPT_S} s after Ctrl-C; stderr:\n{err}")
    took = time.monotonic() - sent_at
    assert proc.returncode == 130, f"exit code {proc.returncode} after {took:.1f} s; stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.strip("\n").split("\n") if not RAY_LOG_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), f"not one 'interrupted' line:\n{err}"
    return err


def _resume_asks_the_rest(world: Path, batch: Path) -> None:
    results = world / "runs" / RUN / "results.jsonl"
    kept = [json.loads(line)["id"] for line in result_lines(results)]  # every line whole
    assert len(kept) == len(set(kept)) < N
    done = run_cli(world, ["batch", batch.name, "--workers", "2"], cwd=world, extra=[replies("Clara Venn [1].")],
                   timeout=180)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in result_lines(results)]
    assert [r["id"] for r in rows[:len(kept)]] == kept  # the rows kept were not asked again
    assert sorted(r["id"] for r in rows) == [f"q{i:04d}" for i in range(N)]
    db = world / "memory" / "memory.db"
    assert memory_count(db, "SELECT COUNT(DISTINCT item_id) FROM outcomes WHERE run_id = ?", (RUN,)) == N


def test_ctrl_c_while_the_batch_waits_for_memory_s_lock_ends_the_batch(tmp_path: Path) -> None:
    """The batch waits to record an answer (another process holds memory's write lock) when
    Ctrl-C comes; the lock is freed just after. The batch ends at once, and no answer it did not
    write as a row stays unasked: the resume asks every question left."""
    world = ingest_test_corpus(tmp_path)
    batch = write_batch(world, N, RUN)
    results = world / "runs" / RUN / "results.jsonl"
    proc = _start(world, batch)
    holder = None
    try:
        wait_for(lambda: len(result_lines(results)) >= 3 or proc.poll() is not None, 120, "3 result rows")
        holder = sqlite3.connect(world / "memory" / "memory.db", isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")  # another process writes: the batch's next record waits
        time.sleep(0.5)
        assert proc.poll() is None, "the batch finished before the Ctrl-C; make it longer"
        os.killpg(proc.pid, signal.SIGINT)
        sent_at = time.monotonic()
        time.sleep(0.3)
        holder.execute("ROLLBACK")
        _ctrl_c_ends_promptly(proc, sent_at)
    finally:
        if holder is not None:
            holder.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    _resume_asks_the_rest(world, batch)


def test_ctrl_c_while_ray_and_the_actors_start_ends_the_batch_with_one_line(tmp_path: Path) -> None:
    """Ctrl-C as soon as the run starts (its config.yaml written), while Ray and the actors start:
    Ray's processes get it too, and the batch still ends with one line."""
    world = ingest_test_corpus(tmp_path)
    batch = write_batch(world, N, RUN)
    proc = _start(world, batch)
    try:
        wait_for(lambda: (world / "runs" / RUN / "config.yaml").exists() or proc.poll() is not None, 60,
                 "the run to start")
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        sent_at = time.monotonic()
        _ctrl_c_ends_promptly(proc, sent_at)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    _resume_asks_the_rest(world, batch)
