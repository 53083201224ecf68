"""The HTTP API and the web page of ``sirag serve``: one engine per process, run by one worker
thread (:mod:`.worker`); the routes queue jobs for it and wait for, or stream, their events."""

from __future__ import annotations

import asyncio
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from .. import __version__
from ..config import StrategyConfig
from .errors import ApiError, SafeJSONResponse, as_api_error, dumps, error_response, validation_error
from .events import ask_job, search_job
from .schemas import AskRequest, SearchRequest
from .security import Guard
from .worker import ERROR, RESULT, Cancelled, Job, Worker

STATIC = Path(__file__).resolve().parent / "static"
#: How often a waiting request looks whether its client is still there (s).
POLL_S = 0.25
#: A stream says something at least this often (an SSE comment), so proxies keep it open (s).
KEEPALIVE_S = 15.0
#: What the worker is given past a request's budget to stop at its next event (s).
GRACE_S = 2.0
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")


@dataclass(frozen=True)
class ServeSettings:
    token: str | None = None  # every request needs it when set
    queue_size: int = 16  # asks waiting for the engine; one more is answered 503
    time_budget_s: float = 300.0  # each request's, from its arrival
    max_body_bytes: int = 64 * 1024
    cors_origins: tuple[str, ...] = ()  # no CORS unless given
    loopback_only: bool = True  # bound to loopback: Host must name it

    def __post_init__(self) -> None:
        if self.token is not None and not _TOKEN.match(self.token):
            raise ValueError("the token must be 16 to 256 characters of letters, digits and ._~+/=- "
                             "(e.g. from: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        if self.queue_size < 1 or self.time_budget_s <= 0 or self.max_body_bytes < 1024:
            raise ValueError("queue_size must be >= 1, time_budget_s > 0 and max_body_bytes >= 1024")


def strategy_settings(engine, given) -> dict[str, Any]:
    """The ``strategy.*`` settings a request gives, checked as the config checks them."""
    over = given.model_dump(exclude_none=True) if given is not None else {}
    try:
        StrategyConfig(**{**engine.config.strategy.model_dump(), **over})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "strategy." + ".".join(str(p) for p in first.get("loc", ()))
        raise ApiError(422, f"{field}: {first.get('msg', 'invalid value')}", field=field) from None
    return over


def first_strategy(engine, given) -> Any:
    """The strategy a request asks for, over the configured one; None when it asks for none."""
    over = strategy_settings(engine, given)
    return StrategyConfig(**{**engine.config.strategy.model_dump(), **over}).to_strategy() if over else None


def create_app(engine, settings: ServeSettings | None = None) -> FastAPI:
    """The app around ``engine`` (its models are loaded by the worker when the app starts)."""
    settings = settings or ServeSettings()
    worker = Worker(engine, settings.queue_size)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="sirag", version=__version__, lifespan=lifespan, default_response_class=SafeJSONResponse,
                  description="A self-correcting RAG engine: answers from your documents, checks each answer, "
                              "retries with another strategy or refuses, and records everything in memory.")
    app.state.engine, app.state.worker, app.state.settings = engine, worker, settings
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ApiError, lambda request, exc: error_response(exc))
    app.add_middleware(Guard, token=settings.token, max_body_bytes=settings.max_body_bytes,
                       loopback_only=settings.loopback_only)
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    def submit(run: Callable[[Job], Any], stream: bool = False) -> Job:
        job = Job(run, asyncio.get_running_loop(), settings.time_budget_s, stream=stream)
        try:
            worker.submit(job)
        except Exception as exc:  # noqa: BLE001 - a full queue, an engine that could not start
            raise as_api_error(exc) from exc
        return job

    app.state.submit = submit

    @app.get("/healthz", tags=["service"], summary="The process is up")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz", tags=["service"], summary="The models are loaded and asks are taken")
    def readyz():
        data = {"ready": worker.ready.is_set() and worker.error is None, "error": worker.error,
                "queue": {"waiting": worker.waiting, "size": settings.queue_size, "busy": worker.busy},
                "counts": dict(worker.counts), "corpus": engine.corpus}
        return SafeJSONResponse(data, status_code=200 if data["ready"] else 503)

    @app.post("/v1/ask", tags=["engine"], summary="Answer a question (the JSON of `sirag ask --json`), or "
                                                   "stream the loop as server-sent events")
    async def ask(req: AskRequest, request: Request):
        job = submit(ask_job(engine, req.question, req.loop, first_strategy(engine, req.strategy)), stream=req.stream)
        if req.stream:
            return event_stream(job, request)
        return await wait(job, request)

    @app.post("/v1/search", tags=["engine"], summary="The passages a strategy retrieves (`sirag search --json`)")
    async def search(req: SearchRequest, request: Request):
        over = strategy_settings(engine, req.strategy)
        return await wait(submit(search_job(engine, req.question, over)), request)

    from .memory_routes import add_memory_routes
    from .openai_compat import add_openai_routes

    add_memory_routes(app, engine)
    add_openai_routes(app, engine)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/memory", include_in_schema=False)
    def memory_page() -> FileResponse:
        return FileResponse(STATIC / "memory.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def next_event(job: Job, request: Request) -> tuple[str, Any] | None:
    """The job's next event; None while there is none yet (after ``POLL_S``). Raises
    :class:`Cancelled` when the client went away or the budget ran out (the job is told to stop)."""
    try:
        return await asyncio.wait_for(job.events.get(), timeout=POLL_S)
    except asyncio.TimeoutError:
        pass
    if await request.is_disconnected():
        job.cancel()
        raise Cancelled("the client went away")
    if time.monotonic() > job.deadline + GRACE_S:
        job.cancel()
        raise Cancelled(f"the request's time budget of {job.budget_s:g} s ran out", timed_out=True)
    return None


#: What :func:`job_events` yields after ``KEEPALIVE_S`` without an event, and when the request's
#: time budget ran out.
KEEPALIVE, TIMED_OUT = "keepalive", "timed_out"


async def job_events(job: Job, request: Request) -> AsyncIterator[tuple[str, Any]]:
    """The job's events as ``(name, data)`` until its ``RESULT`` or ``ERROR``; ``(KEEPALIVE, None)``
    after ``KEEPALIVE_S`` without one; ``(TIMED_OUT, ApiError)`` when the time budget ran out. A
    client that went away ends it silently (the job is told to stop)."""
    quiet = time.monotonic()
    while True:
        try:
            event = await next_event(job, request)
        except Cancelled as exc:
            if exc.timed_out:
                yield TIMED_OUT, as_api_error(exc)
            return
        if event is None:
            if time.monotonic() - quiet > KEEPALIVE_S:
                quiet = time.monotonic()
                yield KEEPALIVE, None
            continue
        quiet = time.monotonic()
        yield event
        if event[0] in (RESULT, ERROR):
            return


async def result_of(job: Job, request: Request) -> Any:
    """The job's result; raises its error, or :class:`Cancelled` (the job is told to stop)."""
    try:
        while True:
            event = await next_event(job, request)
            if event is None:
                continue
            name, data = event
            if name == RESULT:
                return data
            if name == ERROR:
                raise data
    finally:
        if not job.finished.is_set():
            job.cancel()


async def wait(job: Job, request: Request) -> Any:
    """The job's result as the reply, or its error as a JSON error."""
    try:
        return SafeJSONResponse(await result_of(job, request))
    except Exception as exc:  # noqa: BLE001 - each is answered as error_response says
        return error_response(exc)


def sse(name: str, data: Any, n: int) -> str:
    return f"id: {n}\nevent: {name}\ndata: {dumps(data)}\n\n"


def event_stream(job: Job, request: Request) -> StreamingResponse:
    """The ask's events as server-sent events; the last is ``answer``, ``refusal`` or ``error``."""

    async def events() -> AsyncIterator[str]:
        n = 0
        try:
            async for name, data in job_events(job, request):
                if name == KEEPALIVE:
                    yield ": waiting\n\n"
                    continue
                n += 1
                if name == TIMED_OUT:
                    yield sse("error", {"status": data.status, "type": data.kind, "message": data.message}, n)
                elif name == RESULT:
                    yield sse(*data, n)
                elif name == ERROR:
                    e = as_api_error(data)
                    yield sse("error", {"status": e.status, "type": e.kind, "message": e.message, "field": e.field}, n)
                else:
                    yield sse(name, data, n)
        finally:
            if not job.finished.is_set():
                job.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
