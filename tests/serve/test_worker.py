"""The worker thread alone, around a stand-in engine: order, a full queue, cancellation before
and during a job, the time budget, an engine that cannot start, and stopping."""

from __future__ import annotations

import asyncio
import threading

import pytest

from self_improving_rag.serve.worker import ERROR, RESULT, Cancelled, Job, NotReady, QueueFull, Worker


class StandIn:
    def __init__(self, fail: Exception | None = None, loading: threading.Event | None = None) -> None:
        self.fail = fail
        self.loading = loading
        self.closed_in: str | None = None

    def warm_up(self) -> None:
        if self.loading is not None:
            self.loading.wait(10)
        if self.fail is not None:
            raise self.fail

    def close(self) -> None:
        self.closed_in = threading.current_thread().name


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def outcome(job: Job):
    return await job.events.get()


def test_jobs_run_in_order_and_a_full_queue_is_refused_with_retry_after():
    async def main():
        loop = asyncio.get_running_loop()
        gate, order = threading.Event(), []
        worker = Worker(StandIn(), queue_size=2)
        worker.start()

        def step(i):
            def go(job):
                if i == 0:
                    gate.wait(10)
                order.append(i)
                return i
            return go

        jobs = [Job(step(0), loop, 30)]
        worker.submit(jobs[0])
        while worker.current is None:
            await asyncio.sleep(0.01)
        jobs += [Job(step(i), loop, 30) for i in (1, 2)]
        for j in jobs[1:]:
            worker.submit(j)
        with pytest.raises(QueueFull) as full:
            worker.submit(Job(step(3), loop, 30))
        assert full.value.retry_after >= 1
        gate.set()
        results = [await outcome(j) for j in jobs]
        worker.stop()
        return order, results, worker.counts

    order, results, counts = run(main())
    assert order == [0, 1, 2] and results == [(RESULT, 0), (RESULT, 1), (RESULT, 2)]
    assert counts["accepted"] == 3 and counts["refused_full"] == 1 and counts["done"] == 3


def test_a_job_cancelled_or_out_of_time_while_it_waits_is_never_run_and_one_running_stops_at_its_next_event():
    async def main():
        loop = asyncio.get_running_loop()
        gate, ran = threading.Event(), []
        worker = Worker(StandIn())
        worker.start()

        def blocking(job):
            ran.append("first")
            gate.wait(10)
            job.emit("token", "x")  # cancelled meanwhile: raises here
            ran.append("after")

        first = Job(blocking, loop, 30, stream=True)
        gone = Job(lambda job: ran.append("gone"), loop, 30)
        late = Job(lambda job: ran.append("late"), loop, 0.01)
        for j in (first, gone, late):
            worker.submit(j)
        gone.cancel()
        while worker.current is None:
            await asyncio.sleep(0.01)
        first.cancel()
        await asyncio.sleep(0.05)  # late's budget runs out while it waits
        gate.set()
        got = [await outcome(j) for j in (first, gone, late)]
        worker.stop()
        return ran, got, worker.counts

    ran, got, counts = run(main())
    assert ran == ["first"]
    assert [name for name, _ in got] == [ERROR, ERROR, ERROR] and all(isinstance(e, Cancelled) for _, e in got)
    assert [e.timed_out for _, e in got] == [False, False, True]
    assert counts["cancelled"] == 3 and counts["done"] == 0


def test_an_engine_that_cannot_start_is_said_to_every_request():
    async def main():
        loading = threading.Event()
        worker = Worker(StandIn(fail=RuntimeError("no model file"), loading=loading))
        worker.start()
        job = Job(lambda job: 1, asyncio.get_running_loop(), 30)
        worker.submit(job)  # queued while the models load: told when they fail
        loading.set()
        name, error = await outcome(job)
        assert name == ERROR and isinstance(error, NotReady) and "no model file" in str(error)
        with pytest.raises(NotReady, match="could not start"):
            worker.submit(Job(lambda job: 1, asyncio.get_running_loop(), 30))
        worker.stop()

    run(main())


def test_stop_cancels_the_running_job_and_closes_the_engine_in_its_own_thread():
    async def main():
        loop = asyncio.get_running_loop()
        engine, started = StandIn(), threading.Event()
        worker = Worker(engine)
        worker.start()

        def long(job):
            started.set()
            while True:
                job.check()
                threading.Event().wait(0.01)

        job = Job(long, loop, 600)
        worker.submit(job)
        await asyncio.to_thread(started.wait, 10)
        await asyncio.to_thread(worker.stop, 10)
        name, error = await outcome(job)
        assert name == ERROR and isinstance(error, Cancelled)
        assert engine.closed_in == "sirag-engine"

    run(main())
