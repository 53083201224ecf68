"""The generator interface shared by every backend."""

from __future__ import annotations

from typing import Callable, Protocol

from ..types import Generation

TokenCallback = Callable[[str], None]


class Generator(Protocol):
    """``generate(messages) -> Generation``; ``yes_probability(messages)`` judges a yes/no question.

    A backend may also offer ``span_logprobs(messages, span, need=None)``: each token of the last
    ``span`` in the prompt, with its log-probability given the prompt before it (None for the
    tokens ``need(pieces)`` marks as not needed), or None; the scorer's question check
    (``scoring.question_check``) uses it where it exists (llama.cpp, transformers).

    A backend may also offer ``sample_replies(k, max_tokens, temperature, top)``: ``k`` more replies
    to the last ``generate`` call's prompt (None when it cannot), with ``can_sample(k)`` saying
    whether it can; the scorer's ``agreement`` feature (``scoring.agreement_samples``) uses it
    (llama.cpp).

    ``generate(..., read=(span, need))`` asks for the same reading of the generation's own prompt
    while it is evaluated, in :attr:`Generation.prompt_read` (llama.cpp; the others return None:
    ``question_prior`` is then undefined); a backend that does it says so with ``reads_prompt = True``."""

    name: str

    def warm_up(self) -> None: ...

    def generate(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                 on_token: TokenCallback | None = None, read=None) -> Generation: ...

    def yes_probability(self, messages: list[dict[str, str]]) -> float | None: ...

    def count_tokens(self, text: str) -> int: ...
