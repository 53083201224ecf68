"""A real uvicorn on loopback around an engine with the fakes (hash embedder, scripted generator)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import IN_CI

if not IN_CI:  # in CI the serve extra is installed: a missing FastAPI fails these tests
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")

import httpx  # noqa: E402

REFUSE = "I cannot answer this from the documents."
GOOD = "Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."
QUESTION = "Who saved the sailors of the Greyling in the storm?"


class LiveServer:
    """``app`` served by uvicorn in a thread, on a free loopback port."""

    def __init__(self, app) -> None:
        import uvicorn

        from self_improving_rag.serve.listen import listen

        self.app = app
        self.sock = listen("127.0.0.1", 0)  # as `sirag serve` listens
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on"))
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, client: httpx.Client, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while (status := client.get("/readyz").status_code) != 200:
            if time.monotonic() > deadline or status != 503:
                raise RuntimeError(f"not ready: {client.get('/readyz').text}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@dataclass
class Served:
    server: LiveServer
    client: httpx.Client
    engine: Any
    gen: Any
    store: Any

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def serve(make_engine):
    """``serve(replies, settings=None, config=None)``: an engine with those scripted replies,
    served; returns a :class:`Served` whose client talks to it (ready: the engine warmed up)."""
    from self_improving_rag.serve.app import ServeSettings, create_app

    started: list[Served] = []

    def start(replies, settings: ServeSettings | None = None, config=None, headers=None, ready=True) -> Served:
        engine, gen, store = make_engine(replies, config=config)
        server = LiveServer(create_app(engine, settings or ServeSettings())).start()
        client = httpx.Client(base_url=server.url, timeout=60, headers=headers or {})
        served = Served(server, client, engine, gen, store)
        started.append(served)
        if ready:
            server.wait_ready(client)
        return served

    yield start
    for s in started:
        s.client.close()
        s.server.stop()


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """(event, data) pairs of a server-sent event stream (comments left out)."""
    events = []
    for block in text.split("\n\n"):
        name, data = "message", []
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            events.append((name, json.loads("\n".join(data)) if data != ["[DONE]"] else "[DONE]"))
    return events
