"""`sirag serve` itself: its safety checks, and a real process answering on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import fake_overrides, main_in_process
from tests.serve.conftest import GOOD, QUESTION, REFUSE

REPO = Path(__file__).resolve().parents[2]


def _sets(tmp_path: Path, replies: list[str]) -> list[str]:
    out = []
    for o in [*fake_overrides(tmp_path), f"generator.replies={json.dumps(replies)}"]:
        out += ["--set", o]
    return out


def test_another_host_than_loopback_needs_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SIRAG_SERVE_TOKEN", raising=False)
    assert main_in_process(["serve", "--host", "0.0.0.0", *_sets(tmp_path, [GOOD])]) == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0" in err and "--token" in err and "SIRAG_SERVE_TOKEN" in err
    assert main_in_process(["serve", "--host", "0.0.0.0", "--token", "short", *_sets(tmp_path, [GOOD])]) == 2
    assert "16 to 256 characters" in capsys.readouterr().err


def test_a_port_in_use_is_said_before_any_model_loads(tmp_path, capsys, built_index):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main_in_process(["serve", "--port", str(port), *_sets(tmp_path, [GOOD])]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_the_listening_socket_is_tcp_by_protocol_so_replies_are_not_held_by_nagle():
    from self_improving_rag.serve.listen import listen

    # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP: a socket made as
    # socket.socket() (proto 0) answered each keep-alive request ~40 ms late.
    with listen("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[1] > 0


def test_sirag_serve_answers_records_and_stops_on_ctrl_c(tmp_path, built_index):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SIRAG_SERVE_TOKEN": ""}
    proc = subprocess.Popen([sys.executable, "-m", "self_improving_rag.cli", "serve", "--port", "0",
                             *_sets(tmp_path, [REFUSE, GOOD])], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/ ", line)
        assert found, line + proc.stderr.read() if proc.poll() is not None else line
        with httpx.Client(base_url=found.group(1), timeout=60) as client:
            deadline = time.monotonic() + 60
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            answer = client.post("/v1/ask", json={"question": QUESTION}).json()
            assert answer["answer"] == GOOD and len(answer["attempts"]) == 2
            assert client.get("/").status_code == 200
        proc.send_signal(signal.SIGINT)
        # Stopped as every command stops on Ctrl-C: code 130, after uvicorn's graceful shutdown.
        assert proc.wait(30) == 130
        assert "interrupted: stopped cleanly" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    from self_improving_rag.memory import MemoryStore

    with MemoryStore(tmp_path / "memory" / "memory.db", read_only=True) as store:
        assert store.show(answer["outcome_id"])["answer"] == GOOD  # recorded as `sirag ask` records it
