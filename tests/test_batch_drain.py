"""Batch results: a failing worker stops the queue and finished rows are kept; damaged result files."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from self_improving_rag.batch import drain


def test_a_failure_cancels_the_queue_and_keeps_every_finished_row():
    started: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> dict:
        with lock:
            started.append(i)
        if i == 1:
            raise RuntimeError("boom")
        time.sleep(0.2)
        return {"id": i}

    kept: list[dict] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = [pool.submit(task, i) for i in range(8)]
        with pytest.raises(RuntimeError, match="boom"):
            drain(futs, kept.append)
    # Question 1 fails at once while 0 runs; at most one more starts before the queue is cancelled.
    assert len(started) <= 3, started
    # Every question that was answered is kept, once (it is in memory: a resume must skip it).
    assert sorted(r["id"] for r in kept) == sorted(i for i in started if i != 1)


def test_all_rows_are_kept_when_nothing_fails():
    kept: list[dict] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        drain([pool.submit(dict, id=i) for i in range(5)], kept.append)
    assert sorted(r["id"] for r in kept) == list(range(5))


def test_results_file_a_torn_last_line_is_cut_a_damaged_middle_line_is_named(tmp_path):
    from self_improving_rag.batch import read_done
    from self_improving_rag.errors import BatchError

    path = tmp_path / "results.jsonl"
    rows = [json.dumps({"id": i, "question": "?", "answer": None, "refused": True, "attempts": []}) + "\n"
            for i in ("a", "b", "c")]
    path.write_text("".join(rows) + '{"id": "d", "answ')
    assert list(read_done(path)) == ["a", "b", "c"]
    assert path.read_text() == "".join(rows)
    damaged = rows[0] + "X" + rows[1] + rows[2]
    path.write_text(damaged)
    with pytest.raises(BatchError, match="line 2 is damaged"):
        read_done(path)
    assert path.read_text() == damaged, "nothing is cut when rows follow the damage"


def test_a_whole_line_that_is_not_a_result_row_is_named_and_kept(tmp_path):
    # Valid JSON with an id but not the fields a summary reads (an edited or foreign line): a
    # resume used to end in an internal KeyError. It is named, and nothing is cut, also at the end.
    from self_improving_rag.batch import read_done
    from self_improving_rag.errors import BatchError

    path = tmp_path / "results.jsonl"
    text = json.dumps({"id": "a", "question": "?", "answer": "x", "refused": False, "attempts": []}) + "\n" + \
        json.dumps({"id": "b", "answer": "y"}) + "\n"
    path.write_text(text)
    with pytest.raises(BatchError, match="line 2 \\(id 'b'\\) is not a whole result row \\(no 'question', 'refused', "
                                         "'attempts'\\); delete or repair that line"):
        read_done(path)
    assert path.read_text() == text
