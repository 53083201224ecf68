"""Serving as a service: a full queue is 503 with Retry-After, a client that goes away stops its
loop (nothing recorded), a request past its time budget is 504, and the server stops cleanly."""

from __future__ import annotations

import threading
import time

import httpx

from self_improving_rag.serve.app import ServeSettings
from tests.serve.conftest import GOOD, QUESTION, REFUSE


def _gated(reply: str = GOOD):
    """A scripted reply that waits for its gate (and counts its calls)."""
    gate, calls = threading.Event(), []

    def wait(messages):
        calls.append(messages)
        gate.wait(30)
        return reply

    return gate, calls, wait


def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_queue_is_answered_503_with_retry_after(serve):
    gate, calls, reply = _gated()
    s = serve([reply], ServeSettings(queue_size=1))
    worker = s.server.app.state.worker
    results = {}

    def ask(name):
        results[name] = httpx.post(f"{s.url}/v1/ask", json={"question": QUESTION}, timeout=60)

    running = threading.Thread(target=ask, args=("running",))
    running.start()
    _until(lambda: len(calls) == 1)  # the first is with the model
    waiting = threading.Thread(target=ask, args=("waiting",))
    waiting.start()
    _until(lambda: worker.waiting == 1)  # the second holds the one place in the queue
    full = s.client.post("/v1/ask", json={"question": QUESTION})
    assert full.status_code == 503 and int(full.headers["retry-after"]) >= 1
    assert full.json()["error"]["type"] == "overloaded"
    assert s.client.post("/v1/search", json={"question": QUESTION}).status_code == 503
    gate.set()
    running.join(30)
    waiting.join(30)
    assert results["running"].status_code == results["waiting"].status_code == 200
    assert s.store.stats()["outcomes"] == 2


def test_a_client_that_disconnects_from_a_stream_stops_its_loop(serve):
    gate, calls, reply = _gated(REFUSE)
    s = serve([reply])
    worker = s.server.app.state.worker
    with httpx.Client(base_url=s.url, timeout=30) as client:
        with client.stream("POST", "/v1/ask", json={"question": QUESTION, "stream": True}) as r:
            first = next(r.iter_lines())
            assert first.startswith("id: 1")  # the first attempt's retrieval
            _until(lambda: len(calls) == 1)
    # The connection is closed: the server cancels the job, which stops at its next callback.
    _until(lambda: worker.current is not None and worker.current.cancelled)
    gate.set()
    _until(lambda: worker.current is None)
    assert worker.counts["cancelled"] == 1 and worker.counts["done"] == 0
    assert len(calls) == 1  # no retry after REFUSE: the loop stopped
    assert s.store.stats()["outcomes"] == 0  # nothing recorded, as for Ctrl-C in `sirag ask`
    assert s.client.post("/v1/ask", json={"question": QUESTION}).status_code == 200  # the worker goes on


def test_a_client_that_gives_up_on_a_plain_ask_stops_its_loop(serve):
    gate, calls, reply = _gated(REFUSE)
    s = serve([reply])
    worker = s.server.app.state.worker
    try:
        httpx.post(f"{s.url}/v1/ask", json={"question": QUESTION}, timeout=0.5)
    except httpx.TimeoutException:
        pass
    _until(lambda: worker.current is not None and worker.current.cancelled)
    gate.set()
    _until(lambda: worker.current is None)
    assert worker.counts["cancelled"] == 1 and len(calls) == 1 and s.store.stats()["outcomes"] == 0


def test_a_job_whose_client_left_while_it_waited_is_never_run(serve):
    gate, calls, reply = _gated()
    s = serve([reply])
    worker = s.server.app.state.worker
    first = threading.Thread(target=lambda: httpx.post(f"{s.url}/v1/ask", json={"question": QUESTION}, timeout=60))
    first.start()
    _until(lambda: len(calls) == 1)
    try:
        httpx.post(f"{s.url}/v1/ask", json={"question": "Who built the lighthouse?"}, timeout=0.5)
    except httpx.TimeoutException:
        pass
    # The server looks for each waiting request's client every 0.25 s: the job is marked cancelled.
    _until(lambda: worker.waiting == 1 and all(j.cancelled for j in list(worker._queue.queue)))
    gate.set()
    first.join(30)
    _until(lambda: worker.counts["cancelled"] == 1)
    assert len(calls) == 1 and s.store.stats()["outcomes"] == 1


def test_a_request_past_its_time_budget_is_504_and_recorded_nowhere(serve):
    gate, calls, reply = _gated()
    s = serve([reply], ServeSettings(time_budget_s=0.5))
    threading.Timer(1.0, gate.set).start()
    r = s.client.post("/v1/ask", json={"question": QUESTION})
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
    assert "0.5 s" in r.json()["error"]["message"]
    _until(lambda: s.server.app.state.worker.current is None)
    assert s.store.stats()["outcomes"] == 0
    gate.set()
    streamed = s.client.post("/v1/ask", json={"question": QUESTION, "stream": True, "loop": False})
    assert streamed.status_code == 200  # within its budget now: the gate is open

