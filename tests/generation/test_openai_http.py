"""OpenAI-compatible HTTP backend: a stdlib fake server on 127.0.0.1 for the protocol, then a
real llama-cpp-python server with the packaged SmolLM2 model (marked slow)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from self_improving_rag.errors import GenerationError
from self_improving_rag.generation.openai_http import OpenAIHTTPGenerator

REPLY = "The lighthouse was built in 1852 by Clara Venn [1]."
REPLY_LOGPROBS = [-0.25, -0.5, -1.0, -0.125]
# The judge's one-token reply: case and leading-space variants of yes/no all count.
TOP = [(" yes", 0.3), ("Yes", 0.3), (" no", 0.2), ("maybe", 0.1), ("The", 0.1)]
MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who built it?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeOpenAI:
    """A chat-completions endpoint whose behaviour each test sets through ``mode``."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.limited = 0  # rate_limited: how many requests get HTTP 429 first
        self.raw_events: list[bytes] = []  # sse_raw: the bytes sent, one write each
        self.raw_pause = 0.0
        self.requests: list[dict] = []
        self.release = threading.Event()  # frees a handler held by the "slow" mode
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest's output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                mode = fake.mode
                if mode == "drop_first" and len(fake.requests) == 1:
                    self.close_connection = True  # no reply at all: the client sees a protocol error
                    return
                if mode == "slow":
                    fake.release.wait(10)
                    return
                if mode == "trickle":  # a byte every 50 ms: each read is quick, the reply is not
                    data = json.dumps(fake.reply(body)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for i in range(len(data)):
                        if fake.release.is_set():
                            return
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(0.05)
                    return
                if mode == "error":
                    self._send(500, b'{"error": "model exploded"}')
                    return
                if mode == "not_json":
                    self._send(200, b"<html>proxy error</html>")
                    return
                if mode in ("401", "echo_key_500"):  # a proxy that echoes the request's key
                    auth = self.headers.get("Authorization", "")
                    self._send(401 if mode == "401" else 500, json.dumps({"error": f"bad key: {auth}"}).encode())
                    return
                if mode == "rate_limited" and len(fake.requests) <= fake.limited:
                    self.send_response(429)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                if mode == "refuse_logprobs" and "logprobs" in body:
                    self._send(400, b'{"error": {"message": "logprobs is not supported with this model"}}')
                    return
                if mode == "redirect":
                    self.send_response(307)
                    self.send_header("Location", "https://example.invalid/v1/chat/completions")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if mode in ("sse", "sse_broken") and body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    pieces = ["The lighthouse", " was built in 1852", " by Clara Venn [1]."]
                    for i, piece in enumerate(pieces):
                        if mode == "sse_broken" and i == 2:
                            self.close_connection = True
                            return  # the connection ends mid-reply
                        event = {"choices": [{"delta": {"content": piece}, "finish_reason": None,
                                              "logprobs": {"content": [{"token": piece, "logprob": -0.5}]}}]}
                        self.wfile.write(b": keep-alive\n\ndata: " + json.dumps(event).encode() + b"\n\n")
                        self.wfile.flush()
                        time.sleep(0.3)
                    self.wfile.write(b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n')
                    self.wfile.write(b'data: {"choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 3}}\n\n')
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if mode == "no_message":
                    self._send(200, json.dumps({"choices": [{"text": REPLY, "finish_reason": "stop"}]}).encode())
                    return
                if mode == "judge_limit" and body.get("top_logprobs", 0) > 5:
                    self._send(400, b'{"error": {"message": "top_logprobs must be <= 5"}}')
                    return
                if mode == "long_echo":  # the key across byte 300 of a long body
                    auth = self.headers.get("Authorization", "")
                    self._send(500, json.dumps({"error": "x" * 130 + f" you sent {auth}" + "y" * 200}).encode())
                    return
                if mode.startswith("sse_raw") and body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for part in fake.raw_events:
                        self.wfile.write(part)
                        self.wfile.flush()
                        time.sleep(fake.raw_pause)
                    self.close_connection = True
                    return
                if mode in ("parts", "null_top", "null_logprob", "logprobs_list", "no_token"):
                    self._send(200, json.dumps(fake.odd_reply(body)).encode())
                    return
                self._send(200, json.dumps(fake.reply(body)).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def odd_reply(self, body: dict) -> dict:
        """Replies of shapes some servers send: content as a list of parts, null log-probs."""
        if self.mode == "parts":
            return {"choices": [{"message": {"role": "assistant", "content": [{"type": "text", "text": "Clara "},
                                                                             {"type": "text", "text": "Venn [1]."}]},
                                 "finish_reason": "stop"}]}
        if self.mode == "no_token":  # the judge's one token was EOS, which this server leaves out
            return {"choices": [{"message": {"role": "assistant", "content": ""}, "logprobs": {"content": []},
                                 "finish_reason": "stop"}]}
        if self.mode == "logprobs_list":
            return {"choices": [{"message": {"role": "assistant", "content": REPLY}, "logprobs": [-0.1],
                                 "finish_reason": "stop"}]}
        top = None if self.mode == "null_top" else [{"token": " yes", "logprob": None}, {"token": " no", "logprob": -1.0}]
        return {"choices": [{"message": {"role": "assistant", "content": "yes"},
                             "logprobs": {"content": [{"token": "yes", "logprob": -0.1, "top_logprobs": top}]},
                             "finish_reason": "length"}]}

    def reply(self, body: dict) -> dict:
        if self.mode in ("empty", "empty_cut"):
            return {"choices": [{"message": {"role": "assistant", "content": "  "},
                                 "finish_reason": "stop" if self.mode == "empty" else "length"}]}
        if self.mode == "no_usage":
            return {"choices": [{"message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": None}}
        if self.mode == "no_logprobs":
            return {"choices": [{"message": {"role": "assistant", "content": REPLY}, "logprobs": None,
                                 "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 30, "completion_tokens": 12}}
        if body.get("max_tokens") == 1 and body.get("top_logprobs"):
            top = [{"token": t, "logprob": math.log(p)} for t, p in TOP]
            content = [{"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}]
            return {"choices": [{"message": {"role": "assistant", "content": "yes"}, "logprobs": {"content": content},
                                 "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 1}}
        content = [{"token": f"t{i}", "logprob": lp, "top_logprobs": []} for i, lp in enumerate(REPLY_LOGPROBS)]
        return {"choices": [{"message": {"role": "assistant", "content": f"  {REPLY}\n"},
                             "logprobs": {"content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 21, "completion_tokens": len(REPLY_LOGPROBS), "total_tokens": 25}}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def fake_server():
    fake = FakeOpenAI()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(5)


def _gen(fake: FakeOpenAI, **kw) -> OpenAIHTTPGenerator:
    return OpenAIHTTPGenerator(base_url=fake.base_url, model="fake-model", **kw)


# ---------------------------------------------------------------- protocol, against the fake server


def test_generate_parses_text_logprobs_usage_and_sends_the_request(fake_server) -> None:
    gen = _gen(fake_server, max_tokens=33, seed=7)
    seen: list[str] = []
    out = gen.generate(MESSAGES, on_token=seen.append)
    assert out.text == REPLY  # stripped
    assert out.token_logprobs == tuple(REPLY_LOGPROBS)
    assert out.prompt_tokens == 21 and out.completion_tokens == len(REPLY_LOGPROBS)
    assert out.finish_reason == "stop" and out.timings_ms["generate"] > 0
    assert out.mean_logprob == pytest.approx(sum(REPLY_LOGPROBS) / len(REPLY_LOGPROBS))
    assert seen == [REPLY]
    (req,) = fake_server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "fake-model" and req["body"]["messages"] == MESSAGES
    assert req["body"]["max_tokens"] == 33 and req["body"]["seed"] == 7 and req["body"]["temperature"] == 0.0
    assert req["body"]["logprobs"] is True
    assert "Authorization" not in req["headers"]


def test_max_tokens_override_and_api_key_header(fake_server, monkeypatch) -> None:
    monkeypatch.setenv("SIRAG_TEST_KEY", "sk-test-123")
    gen = _gen(fake_server, api_key_env="SIRAG_TEST_KEY", max_tokens=160)
    gen.generate(MESSAGES, max_tokens=0)  # a real 0 is sent as 0, not replaced by the default
    (req,) = fake_server.requests
    assert req["body"]["max_tokens"] == 0
    assert req["headers"]["Authorization"] == "Bearer sk-test-123"


def test_reply_without_logprobs_uses_usage_counts(fake_server) -> None:
    fake_server.mode = "no_logprobs"
    out = _gen(fake_server).generate(MESSAGES)
    assert out.text == REPLY and out.token_logprobs == () and out.mean_logprob is None
    assert out.prompt_tokens == 30 and out.completion_tokens == 12 and out.finish_reason == "length"
    assert _gen(fake_server).yes_probability(MESSAGES) is None


def test_yes_probability_is_yes_over_yes_plus_no(fake_server) -> None:
    p = _gen(fake_server).yes_probability(MESSAGES)
    yes = sum(pr for t, pr in TOP if t.strip().lower() == "yes")
    no = sum(pr for t, pr in TOP if t.strip().lower() == "no")
    assert p == pytest.approx(yes / (yes + no)) and p == pytest.approx(0.75)
    (req,) = fake_server.requests
    assert req["body"]["max_tokens"] == 1 and req["body"]["top_logprobs"] == 10
    assert req["body"]["logprobs"] is True and req["body"]["temperature"] == 0.0


def test_http_500_is_a_generation_error_with_the_status(fake_server) -> None:
    fake_server.mode = "error"
    with pytest.raises(GenerationError, match=r"HTTP 500") as err:
        _gen(fake_server).generate(MESSAGES)
    assert "model exploded" in str(err.value) and fake_server.base_url in str(err.value)
    assert len(fake_server.requests) == 1  # an HTTP error is an answer: no retry


@pytest.mark.parametrize("mode, message", [("empty_cut", "produced no text"), ("not_json", "not JSON")])
def test_unusable_replies_are_generation_errors(fake_server, mode, message) -> None:
    fake_server.mode = mode
    with pytest.raises(GenerationError, match=message):
        _gen(fake_server).generate(MESSAGES)


def test_an_empty_reply_that_ended_by_itself_is_an_empty_answer(fake_server) -> None:
    """As with llama.cpp: the engine reads it as a decline; an error would stop a batch for good."""
    fake_server.mode = "empty"
    out = _gen(fake_server).generate(MESSAGES)
    assert out.text == "" and out.finish_reason == "stop"


def test_missing_or_null_usage_is_estimated_not_zero(fake_server) -> None:
    fake_server.mode = "no_usage"
    out = _gen(fake_server).generate(MESSAGES)
    assert out.text == REPLY and out.prompt_tokens > 0 and out.completion_tokens > 0


def test_a_dropped_connection_is_retried(fake_server) -> None:
    fake_server.mode = "drop_first"
    out = _gen(fake_server, retries=1).generate(MESSAGES)
    assert out.text == REPLY
    assert len(fake_server.requests) == 2


def test_unreachable_server_is_a_generation_error_after_the_backoff() -> None:
    port = _free_port()  # bound then released: nothing listens there
    gen = OpenAIHTTPGenerator(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1, timeout_s=5)
    t0 = time.perf_counter()
    with pytest.raises(GenerationError, match="cannot reach the server") as err:
        gen.generate(MESSAGES)
    elapsed = time.perf_counter() - t0
    assert f"http://127.0.0.1:{port}/v1" in str(err.value) and "Connection refused" in str(err.value)
    assert elapsed >= 0.5  # one back-off between the two tries; none after the last


def test_unreachable_server_error_is_chained() -> None:
    gen = OpenAIHTTPGenerator(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", retries=0)
    with pytest.raises(GenerationError) as err:
        gen.generate(MESSAGES)
    assert isinstance(err.value.__cause__, httpx.ConnectError)


def test_timeout_bounds_the_whole_reply_not_each_read(fake_server) -> None:
    fake_server.mode = "trickle"
    gen = _gen(fake_server, timeout_s=1.0, retries=0)
    t0 = time.perf_counter()
    try:
        with pytest.raises(GenerationError, match="did not answer within 1 s"):
            gen.generate(MESSAGES)
    finally:
        fake_server.release.set()
    assert time.perf_counter() - t0 < 2.5


def test_timeout_is_a_generation_error(fake_server) -> None:
    fake_server.mode = "slow"
    gen = _gen(fake_server, timeout_s=0.3, retries=2)
    t0 = time.perf_counter()
    with pytest.raises(GenerationError, match="did not answer within") as err:
        gen.generate(MESSAGES)
    assert time.perf_counter() - t0 < 5  # a timeout is not retried
    assert isinstance(err.value.__cause__, httpx.TimeoutException)
    assert len(fake_server.requests) == 1


def test_bad_base_url_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="127.0.0.1:8000"):
        OpenAIHTTPGenerator(base_url="127.0.0.1:8000/v1", model="m")


# ---------------------------------------------------------------- a real llama-cpp-python server

SERVER_START_S = 120


def _wait_for_models(proc: subprocess.Popen, url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"llama_cpp.server did not answer {url} within {SERVER_START_S} s:\n"
                         f"{log_path.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """``python -m llama_cpp.server`` with the packaged SmolLM2 GGUF, on a free loopback port."""
    from tests.conftest import skip_or_fail

    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        skip_or_fail("needs pip install 'llama-cpp-python[server]'")
    from self_improving_rag.errors import ModelNotFoundError
    from self_improving_rag.generation.registry import resolve_model

    root = tmp_path_factory.mktemp("llama_server")
    try:
        model = resolve_model("smollm2-135m-instruct", root / "cache")
    except ModelNotFoundError as exc:
        skip_or_fail(str(exc))
    port = _free_port()
    log_path = root / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model),
                                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for_models(proc, f"http://127.0.0.1:{port}/v1/models", log_path)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.mark.slow
def test_real_server_generates_text(llama_server) -> None:
    gen = OpenAIHTTPGenerator(base_url=llama_server, model="x", max_tokens=16, timeout_s=120)
    out = gen.generate([{"role": "user", "content": "Say hello in one short sentence."}])
    assert out.text.strip()
    assert 0 < out.completion_tokens <= 16 and out.prompt_tokens > 0
    assert out.finish_reason in {"stop", "length"}


@pytest.mark.slow
def test_real_server_yes_probability(llama_server) -> None:
    gen = OpenAIHTTPGenerator(base_url=llama_server, model="x", timeout_s=120)
    p = gen.yes_probability([{"role": "user", "content": "Is the sky blue? Answer yes or no."}])
    assert p is not None and 0.0 <= p <= 1.0


@pytest.mark.slow
def test_real_server_returns_token_logprobs(llama_server) -> None:
    gen = OpenAIHTTPGenerator(base_url=llama_server, model="x", max_tokens=8, timeout_s=120)
    out = gen.generate([{"role": "user", "content": "Say hello."}])
    assert len(out.token_logprobs) == out.completion_tokens > 0
    assert all(lp <= 0 for lp in out.token_logprobs)


@pytest.mark.slow
def test_engine_answers_through_the_real_server(llama_server, fake_config, built_index, hash_embedder) -> None:
    from self_improving_rag.engine import Engine
    from self_improving_rag.types import Answer

    gen = OpenAIHTTPGenerator(base_url=llama_server, model="x", max_tokens=48, timeout_s=120)
    engine = Engine(fake_config, embedder=hash_embedder, generator=gen, memory=None)
    try:
        answer = engine.ask("Who built the lighthouse of Marrow Point?")
    finally:
        engine.close()
    assert isinstance(answer, Answer) and answer.attempts
    first = answer.attempts[0]
    assert first.raw_answer.strip() and first.completion_tokens > 0
    assert answer.refused or answer.answer


def test_a_refused_key_names_the_variable_and_is_never_shown(fake_server, monkeypatch) -> None:
    from self_improving_rag.errors import GeneratorUnavailableError

    fake_server.mode = "401"
    monkeypatch.delenv("SIRAG_TEST_KEY", raising=False)
    with pytest.raises(GeneratorUnavailableError, match=r"HTTP 401 \(no key was sent: \$SIRAG_TEST_KEY is not set"):
        _gen(fake_server, api_key_env="SIRAG_TEST_KEY").generate(MESSAGES)
    monkeypatch.setenv("SIRAG_TEST_KEY", "sk-secret-42")
    for mode in ("401", "echo_key_500"):
        fake_server.mode = mode
        with pytest.raises(GeneratorUnavailableError) as err:
            _gen(fake_server, api_key_env="SIRAG_TEST_KEY").generate(MESSAGES)
        assert "sk-secret-42" not in str(err.value) and "Bearer ***" in str(err.value)
    assert "the key in $SIRAG_TEST_KEY was refused" in str(_401(fake_server))


def _401(fake_server):
    from self_improving_rag.errors import GeneratorUnavailableError

    fake_server.mode = "401"
    try:
        _gen(fake_server, api_key_env="SIRAG_TEST_KEY").generate(MESSAGES)
    except GeneratorUnavailableError as exc:
        return exc
    raise AssertionError("no error")


def test_a_rate_limited_request_waits_and_retries_then_stops_the_run(fake_server) -> None:
    from self_improving_rag.errors import GeneratorUnavailableError

    fake_server.mode, fake_server.limited = "rate_limited", 2
    assert _gen(fake_server, retries=2).generate(MESSAGES).text == REPLY  # two 429s, then the answer
    assert len(fake_server.requests) == 3
    fake_server.requests.clear()
    fake_server.limited = 10
    with pytest.raises(GeneratorUnavailableError, match=r"HTTP 429 \(rate limited\) 2 time\(s\)"):
        _gen(fake_server, retries=1).generate(MESSAGES)
    assert len(fake_server.requests) == 2


def test_a_server_that_refuses_logprobs_is_asked_without_them(fake_server) -> None:
    fake_server.mode = "refuse_logprobs"
    gen = _gen(fake_server)
    assert gen.generate(MESSAGES).text == REPLY
    assert [("logprobs" in r["body"]) for r in fake_server.requests] == [True, False]
    gen.generate(MESSAGES)  # from then on, asked without them at once
    assert "logprobs" not in fake_server.requests[-1]["body"] and len(fake_server.requests) == 3
    assert gen.yes_probability(MESSAGES) is None and len(fake_server.requests) == 3  # no judge without log-probs


def test_a_server_that_silently_leaves_logprobs_out_is_judged_once_then_not_asked(fake_server, caplog) -> None:
    """A server that answers the judge without log-probs would answer every claim so: one request
    finds it out, one warning says the judge is off, and no request is sent for the next claims."""
    import logging

    fake_server.mode = "no_logprobs"
    gen = _gen(fake_server)
    with caplog.at_level(logging.WARNING):
        assert [gen.yes_probability(MESSAGES) for _ in range(4)] == [None] * 4
    assert len(fake_server.requests) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "judge is off" in warnings[0]
    assert gen.generate(MESSAGES).text == REPLY  # answers are still asked for


def test_a_judge_reply_without_a_token_does_not_turn_the_judge_off(fake_server, caplog) -> None:
    """Review: one reply whose log-probs list no token (EOS came first) turned the judge off for the
    rest of the batch. It gives no judgement for that claim only."""
    import logging

    fake_server.mode = "no_token"
    gen = _gen(fake_server)
    with caplog.at_level(logging.WARNING):
        assert [gen.yes_probability(MESSAGES) for _ in range(3)] == [None] * 3
    assert len(fake_server.requests) == 3 and not [r for r in caplog.records if r.levelno == logging.WARNING]
    fake_server.mode = "ok"
    assert gen.yes_probability(MESSAGES) is not None


def test_a_redirect_names_its_target(fake_server) -> None:
    from self_improving_rag.errors import GeneratorUnavailableError

    fake_server.mode = "redirect"
    with pytest.raises(GeneratorUnavailableError, match=r"redirect \(HTTP 307\) to https://example.invalid/v1/chat"):
        _gen(fake_server).generate(MESSAGES)


def test_odd_reply_shapes_are_read_or_judged_as_unreadable(fake_server) -> None:
    fake_server.mode = "parts"
    assert _gen(fake_server).generate(MESSAGES).text == "Clara Venn [1]."
    fake_server.mode = "logprobs_list"
    out = _gen(fake_server).generate(MESSAGES)
    assert out.text == REPLY and out.token_logprobs == ()
    for mode in ("null_top", "null_logprob"):  # the judge's reply without usable numbers: no judgement
        fake_server.mode = mode
        assert _gen(fake_server).yes_probability(MESSAGES) is None  # not 0.0, "unsupported"
    fake_server.mode = "no_message"
    with pytest.raises(GenerationError, match="unexpected reply shape"):  # not an empty answer (a decline)
        _gen(fake_server).generate(MESSAGES)


def test_with_on_token_the_answer_streams_piece_by_piece(fake_server) -> None:
    fake_server.mode = "sse"
    seen: list[tuple[float, str]] = []
    out = _gen(fake_server).generate(MESSAGES, on_token=lambda piece: seen.append((time.monotonic(), piece)))
    assert [p for _, p in seen] == ["The lighthouse", " was built in 1852", " by Clara Venn [1]."]
    assert seen[-1][0] - seen[0][0] > 0.4  # shown as they came, not all at the end
    assert out.text == REPLY and out.token_logprobs == (-0.5, -0.5, -0.5) and out.finish_reason == "stop"
    assert out.prompt_tokens == 21 and out.completion_tokens == 3
    (req,) = fake_server.requests
    assert req["body"]["stream"] is True
    # Without on_token (batches, the judge) nothing is streamed.
    fake_server.requests.clear()
    fake_server.mode = "ok"
    _gen(fake_server).generate(MESSAGES)
    assert "stream" not in fake_server.requests[0]["body"]


def test_a_server_that_does_not_stream_answers_whole_and_a_broken_stream_is_an_error(fake_server) -> None:
    seen: list[str] = []
    out = _gen(fake_server).generate(MESSAGES, on_token=seen.append)  # mode ok: a whole JSON reply
    assert seen == [REPLY] and out.text == REPLY and len(fake_server.requests) == 1
    fake_server.mode = "sse_broken"
    seen.clear()
    with pytest.raises(GenerationError, match="ended before the reply was complete|broke off"):
        _gen(fake_server).generate(MESSAGES, on_token=seen.append)
    assert seen == ["The lighthouse", " was built in 1852"]


def _event(piece: str, finish=None) -> bytes:
    return ("data: " + json.dumps({"choices": [{"delta": {"content": piece}, "finish_reason": finish}]}) + "\n\n").encode()


def test_a_stream_is_read_as_server_sent_events_are_written(fake_server) -> None:
    """Data lines with or without a space, CRLF line ends, an event of several data lines, and a
    stream that ends after its finish_reason without [DONE]."""
    fake_server.mode = "sse_raw"
    multi = 'data: {"choices": [{"delta":\r\ndata: {"content": " Venn [1]."},\r\ndata: "finish_reason": "stop"}]}\r\n\r\n'
    fake_server.raw_events = [b'data:{"choices": [{"delta": {"content": "Clara"}}]}\r\n\r\n', multi.encode()]
    seen: list[str] = []
    out = _gen(fake_server).generate(MESSAGES, on_token=seen.append)
    assert seen == ["Clara", " Venn [1]."] and out.text == "Clara Venn [1]." and out.finish_reason == "stop"


def test_an_error_event_in_a_stream_is_an_error_not_an_answer(fake_server) -> None:
    fake_server.mode = "sse_raw"
    fake_server.raw_events = [_event("The light"), b'data: {"error": {"message": "model overloaded"}}\n\n',
                              b"data: [DONE]\n\n"]
    with pytest.raises(GenerationError, match="reported an error in its stream: 'model overloaded'"):
        _gen(fake_server).generate(MESSAGES, on_token=lambda piece: None)


def test_a_stream_that_trickles_stops_at_the_deadline(fake_server) -> None:
    from self_improving_rag.errors import GeneratorUnavailableError

    fake_server.mode = "sse_raw"
    fake_server.raw_events = [bytes([b]) for b in _event("The lighthouse was built by Clara Venn") * 3]
    fake_server.raw_pause = 0.05  # one byte every 50 ms, never a whole line for long
    t0 = time.monotonic()
    with pytest.raises(GeneratorUnavailableError, match="did not finish its reply within 1 s"):
        _gen(fake_server, timeout_s=1).generate(MESSAGES, on_token=lambda piece: None)
    assert time.monotonic() - t0 < 3


def test_the_key_is_blanked_wherever_it_stands_in_a_reply(fake_server, monkeypatch) -> None:
    from self_improving_rag.errors import GeneratorUnavailableError

    key = "sk-proj-" + "A" * 156
    monkeypatch.setenv("SIRAG_TEST_KEY", key)
    fake_server.mode = "long_echo"
    with pytest.raises(GeneratorUnavailableError) as err:
        _gen(fake_server, api_key_env="SIRAG_TEST_KEY").generate(MESSAGES)
    assert "sk-proj-" not in str(err.value)


def test_a_judge_request_refused_for_its_alternatives_keeps_log_probs_for_answers(fake_server) -> None:
    fake_server.mode = "judge_limit"
    gen = _gen(fake_server)
    assert gen.yes_probability(MESSAGES) is None  # no judgement, no error (retrieval's judge asks too)
    n = len(fake_server.requests)
    assert gen.yes_probability(MESSAGES) is None and len(fake_server.requests) == n  # not asked again
    gen.generate(MESSAGES)
    assert fake_server.requests[-1]["body"]["logprobs"] is True


@pytest.mark.parametrize("events", [
    # a last line without its line end
    [_event("Hello"), b'data: {"choices": [{"delta": {"content": " world"}, "finish_reason": "stop"}]}'],
    # no blank lines between events
    [b'data: {"choices": [{"delta": {"content": "Hello"}}]}\n',
     b'data: {"choices": [{"delta": {"content": " world"}, "finish_reason": "stop"}]}\ndata: [DONE]\n'],
    # bare CR line ends, one split between chunks
    [b'data: {"choices": [{"delta": {"content": "Hello"}}]}\r', b'\r',
     b'data: {"choices": [{"delta": {"content": " world"}, "finish_reason": "stop"}]}\r\rdata: [DONE]\r\r'],
])
def test_streams_that_bend_the_format_are_read(fake_server, events) -> None:
    fake_server.mode = "sse_raw"
    fake_server.raw_events = events
    seen: list[str] = []
    out = _gen(fake_server).generate(MESSAGES, on_token=seen.append)
    assert seen == ["Hello", " world"] and out.text == "Hello world" and len(fake_server.requests) == 1


# ---------------------------------------------------------------- several servers (round-robin)


@pytest.fixture
def two_fake_servers():
    fakes = [FakeOpenAI(), FakeOpenAI()]
    for fake in fakes:
        fake.thread.start()
    try:
        yield fakes
    finally:
        for fake in fakes:
            fake.release.set()
            fake.server.shutdown()
            fake.server.server_close()
            fake.thread.join(5)


def test_several_servers_are_asked_in_turn(two_fake_servers) -> None:
    a, b = two_fake_servers
    gen = OpenAIHTTPGenerator(base_url=[a.base_url, b.base_url], model="fake-model")
    for _ in range(6):
        assert gen.generate(MESSAGES).text == REPLY
    assert len(a.requests) == len(b.requests) == 3
    gen.yes_probability(MESSAGES)  # the judge's requests take their turn too
    assert len(a.requests) + len(b.requests) == 7


def test_a_server_that_cannot_be_reached_is_passed_over(two_fake_servers) -> None:
    a, _ = two_fake_servers
    down = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    gen = OpenAIHTTPGenerator(base_url=[down, a.base_url], model="fake-model", retries=0)
    for _ in range(4):  # retries=0: every server is still tried once before a request fails
        assert gen.generate(MESSAGES).text == REPLY
    assert len(a.requests) == 4


def test_no_server_reachable_names_them_all() -> None:
    urls = [f"http://127.0.0.1:{_free_port()}/v1", f"http://127.0.0.1:{_free_port()}/v1"]
    gen = OpenAIHTTPGenerator(base_url=urls, model="m", retries=0)
    with pytest.raises(GenerationError, match="cannot reach any of the servers") as err:
        gen.generate(MESSAGES)
    assert all(u in str(err.value) for u in urls)


def test_the_config_takes_a_list_of_servers_and_checks_each() -> None:
    from self_improving_rag.config import load_config
    from self_improving_rag.errors import ConfigError
    from self_improving_rag.generation.factory import make_generator

    config = load_config(None, ["generator.backend=openai",
                                'generator.base_url=["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1/"]'])
    gen = make_generator(config)
    assert gen.base_urls == ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    with pytest.raises(ConfigError, match="http://"):
        load_config(None, ['generator.base_url=["http://a:1/v1", "b:2/v1"]'])
    with pytest.raises(ConfigError, match="empty"):
        load_config(None, ["generator.base_url=[]"])
