"""OpenAI-compatible HTTP backend (vLLM, llama.cpp server, Ollama): serving beyond one machine."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time

from ..errors import GenerationError, GeneratorUnavailableError
from ..types import Generation
from .base import Generator, TokenCallback

log = logging.getLogger(__name__)


class OpenAIHTTPGenerator(Generator):
    """Chat completions over HTTP with timeouts and retries on connection errors and rate limits.

    The judge asks for one token with ``logprobs``/``top_logprobs``; a server that does not
    return log-probs makes ``yes_probability`` return None (the lexical checks still run). A
    server that refuses requests asking for log-probs (HTTP 400 naming them) is asked without
    them from then on: the answer's ``mean_logprob`` is then undefined and the judge is skipped.
    With ``on_token`` (``sirag ask --stream``) the answer is asked for as a stream (server-sent
    events) and each piece is passed on as it arrives; a server that answers otherwise (an error
    status, or a whole JSON reply) is handled as without streaming.

    ``base_url`` may list several servers of the same model: each request goes to the next one in
    turn (round-robin, starting at a place drawn from the process id, so that the engines of a
    batch's workers or Ray actors start on different servers), and a server that cannot be reached
    is passed over for the next one (every server is tried before the request fails).
    """

    #: Longest wait a rate-limited request honours from the server's Retry-After header.
    MAX_RETRY_AFTER_S = 30.0

    def __init__(self, base_url: str | list[str] | tuple[str, ...], model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 300.0,
                 retries: int = 2, temperature: float = 0.0, max_tokens: int = 160, seed: int = 0) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("base_url names no server; give one URL or a list of them")
        for url in urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
        self.base_urls = [url.rstrip("/") for url in urls]
        self._turn = os.getpid() % len(self.base_urls)
        #: The server of the latest request (the one its messages name).
        self.base_url = self.base_urls[self._turn]
        self._clients: dict = {}
        self.model = model
        self.api_key_env = api_key_env
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.retries = retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.name = f"openai:{model}"
        self._logprobs = True  # False once the server refused a request for log-probs
        self._judge_ok = True  # False once it refused the judge's request for ten alternatives

    def warm_up(self) -> None:
        if not self._clients:
            import httpx

            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._clients = {url: httpx.Client(base_url=url, timeout=self.timeout_s, headers=headers)
                             for url in self.base_urls}

    @property
    def _client(self):
        """The HTTP client of the current server (:attr:`base_url`)."""
        self.warm_up()
        return self._clients[self.base_url]

    def _next_server(self) -> None:
        """Send the next request to the next server of ``base_url`` (round-robin)."""
        if len(self.base_urls) > 1:
            self._turn = (self._turn + 1) % len(self.base_urls)
            self.base_url = self.base_urls[self._turn]

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    def _post_once(self, payload: dict) -> tuple[int, bytes, dict[str, str]]:
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
        return r.status_code, bytes(body), {k.lower(): v for k, v in r.headers.items()}

    def _shown(self, body: bytes) -> str:
        """The start of a reply body for an error message, with the API key blanked out (a proxy
        may echo the request's Authorization header)."""
        return repr(self._redacted(body.decode("utf-8", "replace"))[:200])

    def _redacted(self, text: str) -> str:
        """``text`` with the API key blanked out, wherever it stands."""
        return text.replace(self.api_key, "***") if self.api_key else text

    def _too_slow(self, what: str = "answer") -> GeneratorUnavailableError:
        return GeneratorUnavailableError(f"generator.backend=openai: {self.base_url} did not {what} within "
                                         f"{self.timeout_s:g} s; raise generator.timeout_s or check the server")

    def _retry_after(self, headers: dict[str, str], attempt: int) -> float:
        try:
            wait = float(headers.get("retry-after", ""))
        except ValueError:
            wait = 0.5 * 2 ** attempt
        return min(max(wait, 0.0), self.MAX_RETRY_AFTER_S)

    def _post(self, payload: dict) -> dict:
        import httpx

        self.warm_up()
        last: Exception | None = None
        where = f"generator.backend=openai: {self.base_url}"
        # Every server of several is tried once at least before the request fails.
        tries = max(self.retries + 1, len(self.base_urls))
        for attempt in range(tries):
            try:
                r = self._post_once(payload)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                last = exc
                if attempt < tries - 1:
                    if len(self.base_urls) > 1:  # passed over for the next server
                        log.warning("%s could not be reached (%s); trying %s", self.base_url, exc,
                                    self.base_urls[(self._turn + 1) % len(self.base_urls)])
                        self._next_server()
                        where = f"generator.backend=openai: {self.base_url}"
                    else:
                        time.sleep(min(4.0, 0.5 * 2 ** attempt))
                continue
            except httpx.TimeoutException as exc:
                raise self._too_slow() from exc
            status, body, headers = r
            if status == 429:
                last = GeneratorUnavailableError(f"{where} answered HTTP 429 (rate limited) {self.retries + 1} time(s): "
                                                 f"{self._shown(body)}; wait and run again, ask fewer at once "
                                                 "(--workers)")
                if attempt < self.retries:
                    time.sleep(self._retry_after(headers, attempt))
                continue
            if status == 400 and "logprob" in body.decode("utf-8", "replace").lower() and "logprobs" in payload:
                if payload.get("top_logprobs", 1) > 1:
                    # The judge's request (ten alternatives): refused, the judge is off from now on (its
                    # claims are checked without it); the answers keep their log-probs.
                    log.warning("%s refused a request for %d alternatives' log-probabilities (%s); the judge is "
                                "off from now on", self.base_url, payload["top_logprobs"], self._shown(body))
                    self._judge_ok = False
                    return {}
                # A server that cannot give log-probs at all: ask without them, now and from now on.
                log.warning("%s refused a request for log-probabilities (%s); asking without them from now on: "
                            "answers have no mean_logprob and the judge is off", self.base_url, self._shown(body))
                self._logprobs = False
                return self._post({k: v for k, v in payload.items() if k not in ("logprobs", "top_logprobs")})
            if status in (401, 403):
                key = (f"the key in ${self.api_key_env} was refused" if self.api_key else
                       f"no key was sent: ${self.api_key_env} is not set or empty")
                raise GeneratorUnavailableError(f"{where} answered HTTP {status} ({key}): {self._shown(body)}; set the "
                                                f"server's API key in ${self.api_key_env}")
            if 300 <= status < 400:
                target = headers.get("location", "(no Location given)")
                raise GeneratorUnavailableError(f"{where} answered with a redirect (HTTP {status}) to {target}; set "
                                                "generator.base_url to the address the server now has")
            if status >= 400:
                # 5xx: the server is failing (every question would); 4xx: this request was refused.
                error = GeneratorUnavailableError if status >= 500 else GenerationError
                raise error(f"{where} answered HTTP {status}: {self._shown(body)}; check generator.model and the server")
            try:
                data = json.loads(body)
            except ValueError as exc:
                kind = headers.get("content-type", "unknown")
                raise GenerationError(f"{where} returned a reply that is not JSON (content type {kind}: "
                                      f"{self._shown(body)}); check generator.base_url: it should end in /v1 of an "
                                      "OpenAI-compatible server") from exc
            if not isinstance(data, dict):
                raise GenerationError(f"{where}: unexpected reply shape (a JSON {type(data).__name__}, not an object)")
            return data
        if isinstance(last, GeneratorUnavailableError):
            raise last
        at = (f"the server at {self.base_url}" if len(self.base_urls) == 1
              else f"any of the servers {', '.join(self.base_urls)}")
        raise GeneratorUnavailableError(f"generator.backend=openai: cannot reach {at} ({last}); "
                                        "start it or set generator.base_url") from last

    @staticmethod
    def _content(message) -> str | None:
        """The reply's text: a string, or the text parts of a list of content parts; None if neither."""
        if not isinstance(message, dict):
            return None  # no message at all: not a chat completion
        content = message.get("content")
        if content is None or isinstance(content, str):
            return content or ""
        if isinstance(content, list):
            parts = [p.get("text") for p in content if isinstance(p, dict)]
            if all(isinstance(t, str) for t in parts):
                return "".join(parts)
        return None

    def _stream(self, payload: dict, on_token: TokenCallback) -> tuple[dict, bool] | None:
        """Ask for ``payload`` as a stream and pass each piece of text to ``on_token`` as it comes;
        returns the reply in the shape of a whole one and whether it came as a stream (its text
        then already shown), or None when the server did not answer usably (an
        error status, a reply that is not JSON, no connection): the caller then asks as usual, with
        its retries and messages. The whole reply must arrive within ``timeout_s``. An error event
        in the stream, or a stream that breaks off after text was shown, is an error."""
        import httpx

        self.warm_up()
        deadline = time.monotonic() + self.timeout_s
        where = f"generator.backend=openai: {self.base_url}"
        text: list[str] = []
        logprobs: list = []
        usage: dict = {}
        finish = None
        done = False

        def event(data: str) -> None:
            nonlocal usage, finish, done
            if data == "[DONE]":
                done = True
                return
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise GenerationError(f"{where} sent a stream event that is not JSON: "
                                      f"{self._redacted(data)[:80]!r}") from exc
            if not isinstance(chunk, dict):
                return
            if chunk.get("error") is not None:
                err = chunk["error"]
                message = err.get("message") if isinstance(err, dict) else err
                raise GenerationError(f"{where} reported an error in its stream: {self._redacted(str(message))[:200]!r}")
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            choices = chunk.get("choices")
            if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
                return
            choice = choices[0]
            piece = self._content(choice.get("delta"))
            if piece:
                text.append(piece)
                on_token(piece)
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                logprobs.extend(lp["content"])
            finish = choice.get("finish_reason") or finish

        try:
            with self._client.stream("POST", "/chat/completions",
                                     json={**payload, "stream": True, "stream_options": {"include_usage": True}}) as r:
                if r.status_code != 200:
                    return None
                streaming = "text/event-stream" in r.headers.get("content-type", "")
                buffer = bytearray()
                lines: list[str] = []  # the data lines of the event being read
                for chunk in r.iter_bytes():
                    if time.monotonic() > deadline:
                        raise self._too_slow("finish its reply")
                    buffer += chunk
                    if not streaming:
                        continue  # a whole reply: read to its end, then parsed below
                    for line in _sse_lines(buffer, final=False):
                        lines = _sse_line(line, lines, event)
                        if done:
                            break
                    if done:
                        break
                if not streaming:
                    # A server that ignores "stream": its whole reply, read as without streaming.
                    try:
                        whole = json.loads(bytes(buffer))
                    except ValueError:
                        return None
                    return (whole, False) if isinstance(whole, dict) else None
                if not done:
                    for line in _sse_lines(buffer, final=True):  # a last line without its line end
                        lines = _sse_line(line, lines, event)
                if lines and not done:
                    event("\n".join(lines))  # the last event, without its blank line
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if finish is not None:
                pass  # the reply was complete; only the closing of the stream failed
            elif text:
                raise GenerationError(f"generator.backend=openai: the stream from {self.base_url} broke off "
                                      f"({exc})") from exc
            else:
                return None
        except httpx.TimeoutException as exc:
            raise self._too_slow() from exc
        if not done and finish is None:
            if text:
                raise GenerationError(f"generator.backend=openai: the stream from {self.base_url} ended before the "
                                      "reply was complete")
            return None
        return {"choices": [{"message": {"content": "".join(text)}, "finish_reason": finish or "stop",
                             "logprobs": {"content": logprobs}}], "usage": usage}, True

    def generate(self, messages, max_tokens=None, on_token: TokenCallback | None = None,
                 read=None) -> Generation:
        # ``read`` is ignored: the server gives no log-probabilities for the prompt.
        t0 = time.perf_counter()
        self._next_server()
        payload = {"model": self.model, "messages": messages, "temperature": self.temperature,
                   "max_tokens": self.max_tokens if max_tokens is None else max_tokens, "seed": self.seed}
        if self._logprobs:
            payload.update(logprobs=True, top_logprobs=1)
        got = self._stream(payload, on_token) if on_token is not None else None
        data, streamed = got if got is not None else (self._post(payload), False)
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        text = self._content(choice.get("message")) if choice is not None else None
        if text is None:
            raise GenerationError(f"generator.backend=openai: unexpected reply shape from {self.base_url} (no "
                                  "choices[0].message.content text)")
        text = text.strip()
        finish = choice.get("finish_reason") or "stop"
        # An empty reply that ended by itself is an answer of nothing (the engine reads it as a
        # decline, as with llama.cpp); one cut at max_tokens is a failure.
        if not text and finish == "length":
            raise GenerationError("generator.backend=openai: the model produced no text within max_tokens")
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        lps = tuple(float(t["logprob"]) for t in (content if isinstance(content, list) else [])
                    if isinstance(t, dict) and _finite(t.get("logprob")))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}

        def used(key: str, estimate) -> int:  # a server may leave usage out, or send null
            value = usage.get(key)
            return int(value) if _finite(value) else estimate()

        if on_token is not None and text and not streamed:
            on_token(text)  # a server that did not stream: the whole text at once
        return Generation(text=text, token_logprobs=lps,
                          prompt_tokens=used("prompt_tokens", lambda: sum(self.count_tokens(m["content"]) for m in messages)),
                          completion_tokens=used("completion_tokens", lambda: len(lps) or self.count_tokens(text)),
                          timings_ms={"generate": (time.perf_counter() - t0) * 1000}, finish_reason=finish)

    def yes_probability(self, messages) -> float | None:
        """P(yes) / (P(yes) + P(no)) from the first token's top log-probs; None when the server gives
        none (or a shape this cannot read): the claim is then checked without the judge."""
        if not (self._logprobs and self._judge_ok):
            return None
        self._next_server()
        data = self._post({"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": 1,
                           "logprobs": True, "top_logprobs": 10})
        if not (self._logprobs and self._judge_ok):  # the server refused log-probs just now: no judgement
            return None
        shape = _alternatives(data)
        if shape is None:  # no token to judge (EOS first, which some servers leave out): this claim only
            return None
        if not shape:
            # A server that answers but leaves the log-probs (or their alternatives) out, as some
            # do without a word: it would do so for every claim, each a request for nothing.
            log.warning("%s gave no log-probabilities of alternatives for the judge's yes/no question; the judge is "
                        "off from now on (claims are checked by their words; set scoring.judge=none to skip this "
                        "request)", self.base_url)
            self._judge_ok = False
            return None
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            yes = no = 0.0
            for t in top:
                token, lp = t["token"], t["logprob"]
                word = token.strip().lower() if isinstance(token, str) else None
                if word not in ("yes", "no"):
                    continue
                if not _finite(lp):
                    return None  # a yes or no without a usable number: no judgement, rather than a wrong one
                if word == "yes":
                    yes += math.exp(lp)
                else:
                    no += math.exp(lp)
        except (KeyError, IndexError, TypeError, AttributeError, OverflowError):
            return None
        return yes / (yes + no) if yes + no > 0 else None


def _alternatives(data: dict) -> bool | None:
    """Whether a reply holds a list of top log-probs for its first token (whatever they say):
    False when the log-probs, or their alternatives, are left out; None when the reply has no
    token at all (an empty ``content`` list), which says nothing of what the server gives."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list) and not content:
        return None
    first = content[0] if isinstance(content, list) and isinstance(content[0], dict) else {}
    return isinstance(first.get("top_logprobs"), list)


def _sse_lines(buffer: bytearray, final: bool):
    """Take the complete lines out of ``buffer`` (ended by CRLF, LF or CR, as server-sent events
    allow) and yield them decoded; with ``final``, what is left is a line too."""
    while buffer:
        end = _LINE_END.search(buffer)
        if end is None:  # no line end yet
            if final:
                line = bytes(buffer)
                del buffer[:]
                yield line.decode("utf-8", "replace")
            return
        if end.group() == b"\r" and end.end() == len(buffer) and not final:
            return  # a CR at the end: its LF may come with the next chunk
        line = bytes(buffer[:end.start()])
        del buffer[:end.end()]
        yield line.decode("utf-8", "replace")


def _sse_line(line: str, lines: list[str], event) -> list[str]:
    """Read one line of a stream: a blank line dispatches the event its data lines make; a data
    line that is a whole event by itself ([DONE], or JSON) is dispatched at once, for servers that
    leave out the blank lines; returns the data lines still waiting."""
    if not line:
        if lines:
            event("\n".join(lines))
        return []
    if not line.startswith("data:"):
        return lines  # comments (": keep-alive"), event names, ids
    data = line[5:][1:] if line[5:].startswith(" ") else line[5:]
    if not lines:
        if data.strip() == "[DONE]":
            event("[DONE]")
            return []
        try:
            json.loads(data)
        except ValueError:
            return [data]  # the first line of an event of several
        event(data)
        return []
    return [*lines, data]


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _finite(value) -> bool:
    """Whether a JSON value is a usable number (not a bool, NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
