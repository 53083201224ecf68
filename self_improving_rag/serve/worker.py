"""The one thread that runs the engine, which is not thread-safe: jobs wait in a bounded queue
and run in order. A full queue is refused at once (the caller answers 503 with Retry-After); a
job whose client went away, or whose time budget ran out, is stopped at the engine's next
callback (a token, an attempt's passages, an attempt's end) and records nothing."""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections import deque
from typing import Any, Callable

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """Every place in the queue is taken: try again in ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the engine is busy: {retry_after} s until a place in the queue is likely free")
        self.retry_after = retry_after


class NotReady(Exception):
    """The engine could not be started (its models did not load): nothing can be answered."""


class Cancelled(Exception):
    """A job stopped before its end: its client went away, or its time budget ran out."""

    def __init__(self, why: str, timed_out: bool = False) -> None:
        super().__init__(why)
        self.timed_out = timed_out


#: Events that end a job: its result, or the exception that stopped it.
RESULT, ERROR = "result", "error"


class Job:
    """One unit of work for the engine. ``run(job)`` runs in the worker thread and returns the
    result; it calls :meth:`emit` to send events (and to be stopped: emit raises
    :class:`Cancelled` once the job is cancelled or out of time). Events reach ``events``, an
    asyncio queue of the request's event loop, as (name, data) pairs; without ``stream`` only
    the final one is sent."""

    def __init__(self, run: Callable[[Job], Any], loop: asyncio.AbstractEventLoop, budget_s: float,
                 stream: bool = False) -> None:
        self.run = run
        self.loop = loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.stream = stream
        self.started = time.monotonic()
        self.deadline = self.started + budget_s
        self.budget_s = budget_s
        self._cancel = threading.Event()
        self.finished = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop the job: before it starts it is dropped, while it runs it stops at its next event."""
        self._cancel.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` when the job should stop (called by the worker thread)."""
        if self._cancel.is_set():
            raise Cancelled("the client went away")
        if time.monotonic() > self.deadline:
            raise Cancelled(f"the request's time budget of {self.budget_s:g} s ran out", timed_out=True)

    def emit(self, name: str, data: Any) -> None:
        self.check()
        if self.stream:
            self._send(name, data)

    def _send(self, name: str, data: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (name, data))
        except RuntimeError:  # the event loop is closed: the server is shutting down
            pass

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        if error is not None:
            self._send(ERROR, error)
        else:
            self._send(RESULT, result)
        self.finished.set()


class Worker:
    """Owns the engine: warms it up (loads the models) first, then runs queued jobs one by one;
    closes it when stopped (its memory store, shared with the routes, is its owner's to close)."""

    def __init__(self, engine, queue_size: int = 16) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.engine = engine
        self.queue_size = queue_size
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=queue_size)
        self.ready = threading.Event()
        self.error: str | None = None  # why the engine could not start
        self.busy = False
        self.current: Job | None = None  # the job running now
        self._durations: deque[float] = deque(maxlen=20)
        self.counts = {"accepted": 0, "refused_full": 0, "done": 0, "failed": 0, "cancelled": 0}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sirag-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what waits and what runs (it stops at its next event), and end the thread."""
        running = self.current
        if running is not None:
            running.cancel()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.finish(error=Cancelled("the server is shutting down"))
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # pragma: no cover - emptied just above
            pass
        self._thread.join(timeout)

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        """Queue ``job``; :class:`QueueFull` when every place is taken, :class:`NotReady` when the
        engine could not start."""
        if self.error is not None:
            raise NotReady(self.error)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            with self._lock:
                self.counts["refused_full"] += 1
            raise QueueFull(self.retry_after()) from None
        with self._lock:
            self.counts["accepted"] += 1

    def retry_after(self) -> int:
        """Seconds until a place is likely free: when the running job ends, which takes about the
        mean time of the last jobs."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean))

    def _run(self) -> None:
        try:
            try:
                self.engine.warm_up()
            except Exception as exc:  # noqa: BLE001 - said by /readyz and by every request
                self.error = f"the engine could not start: {type(exc).__name__}: {exc}"
                log.error("%s", self.error, exc_info=exc)
            else:
                self.ready.set()
                log.info("engine ready: models loaded")
            while True:
                job = self._queue.get()
                if job is None:
                    return
                self._one(job)
        finally:
            # The index's files were opened by this thread, and SQLite lets only it close them.
            self.engine.close()

    def _one(self, job: Job) -> None:
        if self.error is not None:
            job.finish(error=NotReady(self.error))
            return
        t = time.perf_counter()
        self.busy, self.current = True, job
        try:
            job.check()  # dropped unrun when its client went away, or its budget ran out, while it waited
            result = job.run(job)
        except Cancelled as exc:
            with self._lock:
                self.counts["cancelled"] += 1
            log.info("request stopped: %s", exc)
            job.finish(error=exc)
        except Exception as exc:  # noqa: BLE001 - the request is told; the worker goes on
            with self._lock:
                self.counts["failed"] += 1
            if not isinstance(exc, _EXPECTED):
                log.error("request failed", exc_info=exc)
            job.finish(error=exc)
        else:
            with self._lock:
                self.counts["done"] += 1
            job.finish(result)
        finally:
            self.busy, self.current = False, None
            self._durations.append(time.perf_counter() - t)


def _expected() -> tuple[type[BaseException], ...]:
    from ..errors import SiragError

    return (SiragError,)


_EXPECTED = _expected()
