"""The request bodies of the API, checked by pydantic: a wrong field is answered 422 with its
name (see :mod:`.errors`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, create_model, field_validator

from ..config import StrategyConfig
from ..questions import MAX_QUESTION_CHARS, check_question
from ..errors import InputError

_FORBID = ConfigDict(extra="forbid")


def _strategy_fields() -> dict[str, Any]:
    """Every ``strategy.*`` setting, optional, with the type and bounds the config gives it."""
    out: dict[str, Any] = {}
    for name, f in StrategyConfig.model_fields.items():
        typ = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
        out[name] = (Optional[typ], Field(None, description=f"strategy.{name}"))
    return out


#: Settings of the first attempt's strategy; those left out are the configured ``strategy.*``.
StrategyIn = create_model("StrategyIn", __config__=_FORBID, **_strategy_fields())


def _question(value: str) -> str:
    try:
        return check_question(value)
    except InputError as exc:
        raise ValueError(str(exc)) from None


#: A question as the CLI takes it (whitespace collapsed, letters or digits in it).
Question = Annotated[str, Field(min_length=1, max_length=4 * MAX_QUESTION_CHARS,
                                description=f"the question (at most {MAX_QUESTION_CHARS} characters)")]


class AskRequest(BaseModel):
    model_config = _FORBID
    question: Question
    loop: Optional[StrictBool] = Field(None, description="false: one attempt, no retry (sirag ask --no-retry); "
                                                         "default: loop.enabled")
    stream: StrictBool = Field(False, description="server-sent events as the loop runs, instead of one JSON reply")
    strategy: Optional[StrategyIn] = Field(None, description="the first attempt's strategy (as --set strategy.*); "
                                                             "default: memory's choice for the kind of question")

    @field_validator("question")
    @classmethod
    def _check(cls, value: str) -> str:
        return _question(value)


class SearchRequest(BaseModel):
    model_config = _FORBID
    question: Question
    strategy: Optional[StrategyIn] = Field(None, description="the strategy to search with (default: strategy.*)")

    @field_validator("question")
    @classmethod
    def _check(cls, value: str) -> str:
        return _question(value)


class FeedbackRequest(BaseModel):
    model_config = _FORBID
    outcome_id: str = Field(min_length=6, max_length=64, pattern=r"^[0-9a-fA-F]+$",
                            description="the outcome id of an answer (or its first 6+ characters)")
    correct: StrictBool = Field(description="true: the answer is right (for a refusal: refusing was right)")
    note: str = Field("", max_length=2000, description="a note kept with the label")


class _Part(BaseModel):
    type: str
    text: Optional[str] = None


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: Optional[Union[str, list[_Part]]] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    """An OpenAI chat completion request: the last user message is the question. Sampling
    settings (temperature, max_tokens...) are accepted and ignored: the engine's config rules."""

    model_config = ConfigDict(extra="allow")
    model: Optional[str] = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False

    def question(self) -> str:
        users = [m for m in self.messages if m.role == "user"]
        if not users:
            raise InputError("messages holds no user message; the last user message is the question")
        return users[-1].text()
