"""Frozen values passed between the stages of the engine."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class Section:
    """A node of a document's section tree, as character offsets in the cleaned text."""

    title: str
    level: int
    start: int
    end: int
    path: tuple[str, ...]  # breadcrumb below the document title, e.g. ("Chapter 3", "The Problem")


@dataclass(frozen=True)
class Document:
    """A cleaned document ready for chunking."""

    doc_id: str  # stable id: file name stem
    path: str  # absolute source path
    text: str  # cleaned text (LF line ends, no Gutenberg header/footer)
    title: str
    author: str | None = None
    encoding: str = "utf-8"
    sha256: str = ""  # hash of the raw file bytes
    sections: tuple[Section, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Chunk:
    """A span of a document produced by one chunker."""

    chunk_id: str  # content-hash id: stable across runs
    doc_id: str
    strategy: str  # chunker name
    text: str  # raw text, exactly document.text[start:end]
    embed_text: str  # what the embedder sees (may carry the breadcrumb)
    start: int
    end: int
    section: str  # breadcrumb, e.g. "The Hound of the Baskervilles > Chapter 3 > The Problem"
    n_tokens: int
    position: int  # index of the chunk within its document for this chunker

    @staticmethod
    def make_id(doc_id: str, strategy: str, start: int, end: int, text: str) -> str:
        """Stable id from the chunk's identity and content."""
        h = hashlib.sha256(f"{doc_id}\x00{strategy}\x00{start}\x00{end}\x00{text}".encode())
        return h.hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Hit:
    """A retrieved chunk with the scores that ranked it."""

    chunk: Chunk
    score: float  # final score used for ranking (higher is better)
    scores: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    rank: int = 0


@dataclass(frozen=True)
class Passage:
    """A numbered piece of context given to the generator (cited as [number])."""

    number: int
    text: str
    chunk_ids: tuple[str, ...]
    doc_id: str
    section: str
    start: int
    end: int
    score: float


@dataclass(frozen=True)
class RetrievalResult:
    """Hits for a question and the passages built from them."""

    query: str
    hits: tuple[Hit, ...]
    passages: tuple[Passage, ...]
    timings_ms: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    """What a generator returned for one prompt."""

    text: str
    token_logprobs: tuple[float, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    reused_prefix_tokens: int = 0
    finish_reason: str = "stop"
    #: A span of the prompt read while the prompt was evaluated (``generate(..., read=...)``):
    #: (piece, log p or None) per token; None when none was asked for or the backend cannot.
    prompt_read: tuple[tuple[str, float | None], ...] | None = field(default=None, hash=False, compare=False)

    @property
    def mean_logprob(self) -> float | None:
        if not self.token_logprobs:
            return None
        return sum(self.token_logprobs) / len(self.token_logprobs)


@dataclass(frozen=True)
class Signal:
    """One self-evaluation score in [0, 1], or None with the reason it is undefined."""

    name: str
    value: float | None
    reason: str
    detail: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Signals:
    """All signals of one attempt."""

    coverage: Signal
    redundancy: Signal
    grounding: Signal
    faithfulness: Signal
    confidence: Signal
    refusal: bool

    def values(self) -> dict[str, float | None]:
        return {
            "coverage": self.coverage.value,
            "redundancy": self.redundancy.value,
            "grounding": self.grounding.value,
            "faithfulness": self.faithfulness.value,
            "confidence": self.confidence.value,
            "refusal": 1.0 if self.refusal else 0.0,
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in (self.coverage, self.redundancy, self.grounding, self.faithfulness, self.confidence):
            out[s.name] = {"value": s.value, "reason": s.reason, "detail": s.detail}
        out["refusal"] = self.refusal
        return out


class Failure(StrEnum):
    """The diagnoses of an attempt (feedback/attribution.py says which signals give each). A member
    equals its name as a plain string, so the names stored in memory, JSON and YAML compare equal."""

    NONE = "NONE"
    WEAK_RETRIEVAL = "WEAK_RETRIEVAL"
    HALLUCINATION_RISK = "HALLUCINATION_RISK"
    LOW_CONFIDENCE = "LOW_CONFIDENCE"
    REDUNDANT_CONTEXT = "REDUNDANT_CONTEXT"
    MISSED_ANSWER = "MISSED_ANSWER"


@dataclass(frozen=True)
class Attribution:
    """Why an attempt failed (or NONE), and which repairs may help."""

    # A Failure's value as a plain str: records written to memory (sqlite_utils infers column
    # types from Python types), JSON and YAML hold the name as they always did.
    failure: str
    reason: str
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Strategy:
    """How one attempt retrieves and prompts. Its key is stable across runs."""

    chunker: str = "section"
    retriever: str = "hybrid"
    top_k: int = 5
    rerank: bool = True
    prompt: str = "cite_then_answer"
    neighbors: int = 0
    query_rewrite: str = "none"
    context_budget: int = 440  # prompt tokens given to passages (embedder word pieces)

    @property
    def key(self) -> str:
        return (
            f"c={self.chunker}|r={self.retriever}|k={self.top_k}|rr={int(self.rerank)}"
            f"|p={self.prompt}|n={self.neighbors}|q={self.query_rewrite}|b={self.context_budget}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of the loop, as recorded in memory and in the --json output."""

    number: int
    strategy: Strategy
    repair: str | None  # the repair that produced this strategy (None for the first)
    answer: str | None
    raw_answer: str
    citations: tuple[int, ...]
    signals: Signals
    attribution: Attribution
    prompt_tokens: int
    completion_tokens: int
    timings_ms: dict[str, float]
    passages: tuple[Passage, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "strategy": self.strategy.to_json(),
            "strategy_key": self.strategy.key,
            "repair": self.repair,
            "answer": self.answer,
            # What the model said when the engine withheld it (a refusal, an echo of the question):
            # plain RAG (the -plain run of an evaluation) returns what the model said.
            **({"raw_answer": self.raw_answer} if self.answer is None and self.raw_answer else {}),
            "citations": list(self.citations),
            "signals": self.signals.to_json(),
            "failure": self.attribution.failure,
            "failure_reason": self.attribution.reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "timings_ms": {k: round(v, 1) for k, v in self.timings_ms.items()},
        }


@dataclass(frozen=True)
class Answer:
    """The engine's final result for one question."""

    question: str
    answer: str | None
    refused: bool
    refusal_reason: str | None
    confidence: float
    sources: tuple[Passage, ...]
    attempts: tuple[AttemptRecord, ...]
    timings_ms: dict[str, float]
    query_class: str = "other"
    chosen_attempt: int | None = None
    outcome_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "refused": self.refused,
            "refusal_reason": self.refusal_reason,
            # Unrounded, as in each attempt's signals: the acceptance rule compares these exact values.
            "confidence": self.confidence,
            "query_class": self.query_class,
            "chosen_attempt": self.chosen_attempt,
            "outcome_id": self.outcome_id,
            "sources": [
                {
                    "number": p.number,
                    "doc": p.doc_id,
                    "section": p.section,
                    "start": p.start,
                    "end": p.end,
                    "text": p.text,
                    "score": round(p.score, 4),
                }
                for p in self.sources
            ],
            "attempts": [a.to_json() for a in self.attempts],
            "timings_ms": {k: round(v, 1) for k, v in self.timings_ms.items()},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)
