"""OpenAI-compatible HTTP backend (vLLM, llama.cpp server, Ollama): serving beyond one machine."""

from __future__ import annotations

import json
import math
import os
import time

from ..errors import GenerationError, GeneratorUnavailableError
from ..types import Generation
from .base import TokenCallback


class OpenAIHTTPGenerator:
    """Chat completions over HTTP with timeouts and retries on connection errors.

    The judge asks for one token with ``logprobs``/``top_logprobs``; a server that does not
    return log-probs makes ``yes_probability`` return None (the lexical checks still run).
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 300.0,
                 retries: int = 2, temperature: float = 0.0, max_tokens: int = 160, seed: int = 0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.retries = retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.name = f"openai:{model}"
        self._client = None

    def warm_up(self) -> None:
        if self._client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.Client(base_url=self.base_url, timeout=self.timeout_s, headers=headers)

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    def _post_once(self, payload: dict) -> tuple[int, bytes]:
        """One POST whose whole reply must arrive within timeout_s (httpx's own timeout applies to
        each read, so a server sending a byte at a time could hold the engine indefinitely)."""
        import httpx

        deadline = time.monotonic() + self.timeout_s
        body = bytearray()
        with self._client.stream("POST", "/chat/completions", json=payload) as r:
            for chunk in r.iter_bytes():
                body += chunk
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the reply took longer than {self.timeout_s:g} s")
        return r.status_code, bytes(body)

    def _post(self, payload: dict) -> dict:
        import httpx

        self.warm_up()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                r = self._post_once(payload)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                last = exc
                if attempt < self.retries:
                    time.sleep(min(4.0, 0.5 * 2 ** attempt))
                continue
            except httpx.TimeoutException as exc:
                raise GeneratorUnavailableError(f"generator.backend=openai: {self.base_url} did not answer within "
                                      f"{self.timeout_s:g} s; raise generator.timeout_s or check the server") from exc
            status, body = r
            if status >= 400:
                # 5xx: the server is failing (every question would); 4xx: this request was refused.
                error = GeneratorUnavailableError if status >= 500 else GenerationError
                raise error(f"generator.backend=openai: {self.base_url} answered HTTP {status}: "
                                      f"{body[:200].decode('utf-8', 'replace')!r}; check generator.model and the server")
            try:
                return json.loads(body)
            except ValueError as exc:
                raise GenerationError(f"generator.backend=openai: {self.base_url} returned a non-JSON reply") from exc
        raise GeneratorUnavailableError(f"generator.backend=openai: cannot reach the server at {self.base_url} ({last}); "
                              "start it or set generator.base_url") from last

    def generate(self, messages, max_tokens=None, on_token: TokenCallback | None = None,
                 read=None) -> Generation:
        # ``read`` is ignored: the server gives no log-probabilities for the prompt.
        t0 = time.perf_counter()
        data = self._post({"model": self.model, "messages": messages, "temperature": self.temperature,
                           "max_tokens": self.max_tokens if max_tokens is None else max_tokens, "seed": self.seed,
                           "logprobs": True, "top_logprobs": 1})
        try:
            choice = data["choices"][0]
            text = (choice["message"]["content"] or "").strip()
        except (KeyError, IndexError, TypeError) as exc:
            raise GenerationError(f"generator.backend=openai: unexpected reply shape from {self.base_url}") from exc
        finish = choice.get("finish_reason") or "stop"
        # An empty reply that ended by itself is an answer of nothing (the engine reads it as a
        # decline, as with llama.cpp); one cut at max_tokens is a failure.
        if not text and finish == "length":
            raise GenerationError("generator.backend=openai: the model produced no text within max_tokens")
        lps = tuple(float(t["logprob"]) for t in ((choice.get("logprobs") or {}).get("content") or [])
                    if isinstance(t, dict) and isinstance(t.get("logprob"), (int, float)))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}

        def used(key: str, estimate) -> int:  # a server may leave usage out, or send null
            value = usage.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else estimate()

        if on_token is not None and text:
            on_token(text)
        return Generation(text=text, token_logprobs=lps,
                          prompt_tokens=used("prompt_tokens", lambda: sum(self.count_tokens(m["content"]) for m in messages)),
                          completion_tokens=used("completion_tokens", lambda: len(lps) or self.count_tokens(text)),
                          timings_ms={"generate": (time.perf_counter() - t0) * 1000}, finish_reason=finish)

    def yes_probability(self, messages) -> float | None:
        data = self._post({"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": 1,
                           "logprobs": True, "top_logprobs": 10})
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            return None
        yes = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "yes")
        no = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "no")
        return yes / (yes + no) if yes + no > 0 else None
