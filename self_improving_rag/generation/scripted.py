"""A scripted generator for tests: replies from a queue, with a history of prompts."""

from __future__ import annotations

import re

from ..errors import GenerationError
from ..types import Generation
from .base import Generator, TokenCallback


class ScriptedGenerator(Generator):
    """Returns the scripted replies in order (the last one repeats when the queue runs out).

    A reply may be a callable ``f(messages) -> str``. ``judge`` scripts ``yes_probability``
    (None: the judge is unavailable). Token log-probs are a fixed ``logprob`` per word.
    ``reader`` scripts the reading of a span of the prompt a ``generate(..., read=(span, need))``
    request asks for: a callable ``f(messages, span)`` giving (piece, log p) pairs, or None (the
    backend reads nothing: the default); the spans asked for are in ``prompt_reads``.
    """

    name = "scripted"
    reads_prompt = True  # generate(read=...) fills Generation.prompt_read (question_prior)

    def __init__(self, replies: list | None = None, judge=None, logprob: float = -0.2, reader=None) -> None:
        self.replies = list(replies or [])
        self.judge = judge
        self.reader = reader
        self.prompt_reads: list[str] = []
        self.logprob = logprob
        self.history: list[list[dict[str, str]]] = []
        self.judge_history: list[list[dict[str, str]]] = []
        self._i = 0

    def warm_up(self) -> None:
        return None

    def count_tokens(self, text: str) -> int:
        return len(re.findall(r"\w+|[^\w\s]", text))

    def generate(self, messages, max_tokens=None, on_token: TokenCallback | None = None,
                 read=None) -> Generation:
        self.history.append(messages)
        if not self.replies:
            raise GenerationError("the scripted generator has no replies")
        reply = self.replies[min(self._i, len(self.replies) - 1)]
        self._i += 1
        text = reply(messages) if callable(reply) else str(reply)
        if on_token is not None:
            on_token(text)
        n = max(1, self.count_tokens(text))
        prompt = sum(self.count_tokens(m["content"]) for m in messages)
        prompt_read = None
        if read is not None and self.reader is not None:
            self.prompt_reads.append(read[0])
            prompt_read = tuple(self._read(messages, *read))
        return Generation(text=text, token_logprobs=tuple([self.logprob] * n), prompt_tokens=prompt,
                          completion_tokens=n, timings_ms={"prompt": 0.0, "generate": 0.0}, prompt_read=prompt_read)

    def yes_probability(self, messages) -> float | None:
        self.judge_history.append(messages)
        if self.judge is None:
            return None
        return float(self.judge(messages)) if callable(self.judge) else float(self.judge)

    def _read(self, messages, span: str, need) -> list[tuple[str, float | None]]:
        """The scripted reading of ``span``, None where ``need`` does not want a token."""
        read = list(self.reader(messages, span))
        wanted = [True] * len(read) if need is None else need([p for p, _ in read])
        return [(p, lp if w else None) for (p, lp), w in zip(read, wanted)]
