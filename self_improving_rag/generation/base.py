"""The generator interface shared by every backend."""

from __future__ import annotations

from typing import Callable

from ..types import Generation

TokenCallback = Callable[[str], None]


class Generator:
    """``generate(messages) -> Generation``; ``yes_probability(messages)`` judges a yes/no question.

    Every backend subclasses it. What a backend can do beyond that is declared by the class
    attributes below, with the defaults of a backend that cannot; a backend that can sets its own,
    and callers read them directly instead of probing."""

    name: str

    #: ``generate(..., read=(span, need))`` gives a reading of the generation's own prompt while it
    #: is evaluated: each token of the last ``span`` in the prompt, with its log-probability given
    #: the prompt before it (None for the tokens ``need(pieces)`` marks as not needed), in
    #: :attr:`Generation.prompt_read`. False: ``read`` is ignored, ``prompt_read`` is None and
    #: ``question_prior`` is undefined (transformers, the OpenAI-compatible HTTP backend).
    reads_prompt: bool = False

    def warm_up(self) -> None:
        raise NotImplementedError

    def generate(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                 on_token: TokenCallback | None = None, read=None) -> Generation:
        raise NotImplementedError

    def yes_probability(self, messages: list[dict[str, str]]) -> float | None:
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        raise NotImplementedError
