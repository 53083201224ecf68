"""50 asks at once on loopback: the engine's capacity (one running, the queue full) is answered,
every other ask is 503 with Retry-After, none is lost or recorded twice, and memory holds one
row per answer given."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from self_improving_rag.serve.app import ServeSettings
from tests.serve.conftest import GOOD, REFUSE, parse_sse

N = 50
QUEUE = 10


def test_fifty_concurrent_asks(serve):
    gate = threading.Event()
    calls = []

    def reply(messages):
        calls.append(1)
        gate.wait(60)  # the first ask holds the engine until every other ask has its reply or its place
        return GOOD if len(calls) % 3 else REFUSE

    s = serve([reply], ServeSettings(queue_size=QUEUE))
    worker = s.server.app.state.worker

    async def ask(client: httpx.AsyncClient, i: int):
        body = {"question": f"Who saved the sailors of the Greyling, ask {i}?", "stream": i % 2 == 1, "loop": False}
        r = await client.post("/v1/ask", json=body)
        if r.status_code != 200:
            return i, r.status_code, r.headers.get("retry-after"), None
        if body["stream"]:
            name, data = parse_sse(r.text)[-1]
            assert name in ("answer", "refusal"), (name, data)
            return i, 200, None, data["result"]["outcome_id"]
        return i, 200, None, r.json()["outcome_id"]

    async def main():
        limits = httpx.Limits(max_connections=N + 10, max_keepalive_connections=N + 10)
        async with httpx.AsyncClient(base_url=s.url, timeout=120, limits=limits) as client:
            # The first holds the engine (taken from the queue) before the others arrive, so that the
            # capacity is exactly one running and QUEUE waiting.
            tasks = [asyncio.create_task(ask(client, 0))]
            while worker.current is None:
                await asyncio.sleep(0.01)
            tasks += [asyncio.create_task(ask(client, i)) for i in range(1, N)]
            # Release the engine once every ask beyond its capacity was refused (or after a minute:
            # the counts below then say what happened).
            deadline = time.monotonic() + 60
            while sum(1 for t in tasks if t.done()) < N - QUEUE - 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            gate.set()
            return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    given = [r for r in results if r[1] == 200]
    refused = [r for r in results if r[1] != 200]
    assert len(given) == QUEUE + 1 and len(refused) == N - QUEUE - 1
    assert all(status == 503 and int(after) >= 1 for _, status, after, _ in refused)
    ids = [oid for *_, oid in given]
    assert len(set(ids)) == len(ids) and all(ids)  # none recorded twice, none without its record
    recorded = s.store.recent(limit=100)
    assert recorded["total"] == len(given)  # memory rows = answers given
    assert {o["id"] for o in recorded["outcomes"]} == set(ids)
    assert len(calls) == len(given)  # the refused asks never reached the model
    assert worker.counts["accepted"] == worker.counts["done"] == len(given)
    assert worker.counts["refused_full"] == len(refused)
