"""Concurrent writers: real processes (spawn) and threads never lose or duplicate an outcome."""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import concurrent_writer, make_answer  # noqa: E402

from self_improving_rag.memory import MemoryStore  # noqa: E402

WORKERS = 4
PER_WORKER = 50


def run_workers(path: Path, shared_items: bool) -> list[tuple]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=concurrent_writer, args=(str(path), w, PER_WORKER, barrier, results, shared_items))
        for w in range(WORKERS)
    ]
    for p in procs:
        p.start()
    reports = []
    try:
        for _ in procs:
            reports.append(results.get(timeout=50))
    except queue.Empty:
        pass
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()
    errors = [r[2] for r in reports if r[0] == "error"]
    assert not errors, "\n".join(errors)
    assert len(reports) == WORKERS, f"only {len(reports)} of {WORKERS} workers reported"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return reports


def test_four_processes_write_200_outcomes_on_a_fresh_file(tmp_path: Path) -> None:
    # The file does not exist yet: the four processes also race to create and migrate it.
    path = tmp_path / "shared" / "sirag.db"
    reports = run_workers(path, shared_items=False)
    ids = {oid for r in reports for oid in r[2]}
    assert len(ids) == WORKERS * PER_WORKER
    with MemoryStore(path, read_only=True) as store:
        stats = store.stats()
        assert stats["outcomes"] == WORKERS * PER_WORKER
        # Every third item (i % 3 == 0) has two attempts, the rest one.
        repaired = len(range(0, PER_WORKER, 3))
        assert stats["attempts"] == WORKERS * (PER_WORKER + repaired)
        orphans = store.db.execute(
            "SELECT COUNT(*) FROM attempts WHERE outcome_id NOT IN (SELECT id FROM outcomes)"
        ).fetchone()[0]
        assert orphans == 0
        assert sum(ok + bad for ok, bad in store.strategy_counts().values()) == WORKERS * PER_WORKER


def test_four_processes_resuming_the_same_items_never_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    MemoryStore(path).close()
    reports = run_workers(path, shared_items=True)
    # All workers got the same id for each item, whoever wrote it first.
    per_item = list(zip(*(r[2] for r in reports)))
    assert all(len(set(ids)) == 1 for ids in per_item)
    with MemoryStore(path, read_only=True) as store:
        assert store.stats()["outcomes"] == PER_WORKER


def test_threads_sharing_one_store(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with MemoryStore(tmp_path / "sirag.db") as store:

        def work(t: int) -> None:
            try:
                for i in range(10):
                    store.record(make_answer(f"thread {t} question {i}"))
                    store.stats()
            except BaseException as exc:  # collected and asserted on below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert store.stats()["outcomes"] == 80
