"""The generator interface shared by every backend."""

from __future__ import annotations

from typing import Callable, Protocol

from ..types import Generation

TokenCallback = Callable[[str], None]


class Generator(Protocol):
    """``generate(messages) -> Generation``; ``yes_probability(messages)`` judges a yes/no question.

    ``generate(..., read=(span, need))`` asks for a reading of the generation's own prompt while it
    is evaluated: each token of the last ``span`` in the prompt, with its log-probability given the
    prompt before it (None for the tokens ``need(pieces)`` marks as not needed), in
    :attr:`Generation.prompt_read` (llama.cpp; the others return None: ``question_prior`` is then
    undefined); a backend that does it says so with ``reads_prompt = True``."""

    name: str

    def warm_up(self) -> None: ...

    def generate(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                 on_token: TokenCallback | None = None, read=None) -> Generation: ...

    def yes_probability(self, messages: list[dict[str, str]]) -> float | None: ...

    def count_tokens(self, text: str) -> int: ...
