"""Ctrl-C of `sirag batch --workers 2` as a terminal sends it (SIGINT to the whole process group):
the batch ends within seconds with one line and exit code 130, keeps its written rows whole, and
the same command then asks only the rest."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reliability.reliability_kit import (cli_argv, env, ingest_test_corpus, memory_count, replies,
                                               result_lines, run_cli, wait_for, write_batch)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc")

RUN = "ctrlc"
N = 40
#: Seconds a Ctrl-C'd batch may take to end: it took 120 s or for ever before.
PROMPT_S = 10


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
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("interrupted"), f"not one 'interrupted' line:\n{err}"
    return err


def _resume_asks_the_rest(world: Path, batch: Path) -> None:
    results = world / "runs" / RUN / "results.jsonl"
    kept = [json.loads(line)["id"] for line in result_lines(results)]  # every line whole
    assert len(kept) == len(set(kept)) < N
    done = run_cli(world, ["batch", batch.name, "--workers", "2"], cwd=world, extra=[replies("Clara Venn [1].")])
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in result_lines(results)]
    assert [r["id"] for r in rows[:len(kept)]] == kept  # the rows kept were not asked again
    assert sorted(r["id"] for r in rows) == [f"q{i:04d}" for i in range(N)]
    db = world / "memory" / "memory.db"
    assert memory_count(db, "SELECT COUNT(DISTINCT item_id) FROM outcomes WHERE run_id = ?", (RUN,)) == N


def _worker_importing(pid: int) -> bool:
    """Whether a worker process of ``pid`` is loading sirag's modules (pydantic's compiled core is
    mapped: Python's own Ctrl-C handling is set up, sirag's not yet)."""
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            if (d.name.isdigit() and int(stat[stat.rindex(")") + 2:].split()[1]) == pid
                    and b"spawn_main" in (d / "cmdline").read_bytes() and "pydantic_core" in (d / "maps").read_text()):
                return True
        except (OSError, ValueError):
            pass
    return False


def test_ctrl_c_while_the_workers_wait_for_memory_s_lock_ends_the_batch(tmp_path: Path) -> None:
    """Both workers wait to record an answer (another process holds memory's write lock) when
    Ctrl-C comes; the lock is freed just after. The worker that took it next was interrupted
    inside BEGIN's wait and kept the lock open; alive, it held it while the other worker's
    question waited out the 120 s retry deadline (and questions queued in the pool were asked
    after the Ctrl-C)."""
    world = ingest_test_corpus(tmp_path)
    batch = write_batch(world, N, RUN)
    results = world / "runs" / RUN / "results.jsonl"
    proc = _start(world, batch)
    holder = None
    try:
        wait_for(lambda: len(result_lines(results)) >= 3 or proc.poll() is not None, 60, "3 result rows")
        holder = sqlite3.connect(world / "memory" / "memory.db", isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")  # another process writes: the workers' next records wait
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


def test_ctrl_c_while_the_workers_start_ends_the_batch_with_one_line(tmp_path: Path) -> None:
    """Ctrl-C as the worker processes start (loading sirag's modules): a worker that had not yet
    set up its own Ctrl-C handling died of it with a traceback, which broke the pool; Python
    3.11's pool then failed on the questions the batch had cancelled, and the batch waited for ever."""
    world = ingest_test_corpus(tmp_path)
    batch = write_batch(world, N, RUN)
    proc = _start(world, batch)
    try:
        wait_for(lambda: _worker_importing(proc.pid) or proc.poll() is not None, 60, "a worker loading")
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        sent_at = time.monotonic()
        _ctrl_c_ends_promptly(proc, sent_at)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    _resume_asks_the_rest(world, batch)


def test_a_ctrl_c_another_thread_takes_is_raised_only_when_the_workers_are_started():
    """With a progress bar on a terminal, tqdm's monitor thread (which does not block SIGINT) can
    take the Ctrl-C; Python then ran the handler in the main thread inside the block, in the middle
    of starting a worker, which died with a traceback. It is now raised after the block."""
    import threading

    from self_improving_rag.batch import _sigint_blocked

    release = threading.Event()
    other = threading.Thread(target=release.wait)  # started before the block: SIGINT not blocked there
    other.start()
    reached_end = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with _sigint_blocked():
                signal.pthread_kill(other.ident, signal.SIGINT)
                for _ in range(200):  # bytecode boundaries, where Python runs a signal handler
                    time.sleep(0.001)
                reached_end = True
    finally:
        release.set()
        other.join()
    assert reached_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_after_the_answer_is_recorded_keeps_its_row(make_engine, monkeypatch):
    """A worker's Ctrl-C stops its question only until the answer is in memory: one that comes
    while the row is being made (graded, here) lost a row whose outcome memory held."""
    from self_improving_rag import batch
    from self_improving_rag.evaluation.datasets import QAItem

    engine, _, store = make_engine(["Clara Venn built it. [1]"])
    batch._idle_once_recorded(store)
    monkeypatch.setattr(batch, "_ENGINE", (engine, False))
    monkeypatch.setattr(batch, "_PARENT", None)
    monkeypatch.setattr(batch, "_STOP", None)
    monkeypatch.setattr(batch, "_INTERRUPTED", False)
    real_grade = batch.grade

    def ctrl_c_then_grade(row):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here
        return real_grade(row)

    monkeypatch.setattr(batch, "grade", ctrl_c_then_grade)
    previous = signal.signal(signal.SIGINT, batch._worker_sigint)
    try:
        row = batch._worker_ask(QAItem(id="q1", question="Who built the lighthouse?", answers=("Clara Venn",),
                                       answerable=True), "r")
    except KeyboardInterrupt:  # (not raised out of the test: pytest would stop the whole session)
        pytest.fail("a Ctrl-C after the answer was recorded lost its row")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert row["id"] == "q1" and row["outcome_id"]
    assert batch._INTERRUPTED  # the Ctrl-C was taken: the worker asks nothing more
    with pytest.raises(KeyboardInterrupt):
        batch._worker_ask(QAItem(id="q2", question="Who lit the lamp?", answers=("Clara Venn",), answerable=True),
                          "r")
