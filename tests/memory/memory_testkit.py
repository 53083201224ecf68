"""Builders of Answer values for the memory tests, and the worker of the concurrency test.

A plain module (not a conftest) so that processes started with ``spawn`` can import
the worker by name: the tests put this directory on ``sys.path``, which spawn passes on.
"""

from __future__ import annotations

import traceback
from typing import Any

from self_improving_rag.types import (
    Answer,
    AttemptRecord,
    Attribution,
    Passage,
    Signal,
    Signals,
    Strategy,
)

STRATEGY_A = Strategy()
STRATEGY_B = Strategy(retriever="bm25", top_k=8)
STRATEGY_C = Strategy(chunker="fixed", retriever="hybrid", top_k=10, neighbors=1)


def make_signals(confidence: float = 0.8, *, refusal: bool = False, mean_logprob: float | None = None) -> Signals:
    """Signals with arbitrary values; ``mean_logprob`` goes into the confidence detail."""
    detail: dict[str, Any] = {} if mean_logprob is None else {"mean_logprob": mean_logprob}
    return Signals(
        coverage=Signal("coverage", 0.7, "most question terms found", {"missing": ["maiwand"]}),
        redundancy=Signal("redundancy", 0.1, "few near-duplicates"),
        grounding=Signal("grounding", 0.6, "hits are relevant"),
        faithfulness=Signal("faithfulness", None, "no claims to check"),
        confidence=Signal("confidence", confidence, "weighted signals", detail),
        refusal=refusal,
    )


def make_attempt(
    number: int = 1,
    *,
    strategy: Strategy = STRATEGY_A,
    repair: str | None = None,
    failure: str = "NONE",
    answer: str | None = "Sherlock Holmes [1]",
    confidence: float = 0.8,
    mean_logprob: float | None = None,
) -> AttemptRecord:
    """One attempt; ``failure`` is its attribution ('NONE' means it succeeded)."""
    passage = Passage(1, "Mr. Sherlock Holmes ...", ("c1",), "hound", "Chapter 1", 0, 20, 0.9)
    return AttemptRecord(
        number=number,
        strategy=strategy,
        repair=repair,
        answer=answer,
        raw_answer=answer or "I cannot answer.",
        citations=(1,),
        signals=make_signals(confidence, refusal=answer is None, mean_logprob=mean_logprob),
        attribution=Attribution(failure, f"reason for {failure}", ("switch_retriever",) if failure != "NONE" else ()),
        prompt_tokens=300,
        completion_tokens=20,
        timings_ms={"retrieve": 12.5, "generate": 250.0, "score": 5.0},
        passages=(passage,),
    )


def make_answer(
    question: str = "Who is the detective in The Hound of the Baskervilles?",
    attempts: tuple[AttemptRecord, ...] | None = None,
    *,
    answer: str | None = "Sherlock Holmes [1]",
    refused: bool = False,
    confidence: float = 0.8,
    query_class: str = "who",
    chosen_attempt: int | None = None,
) -> Answer:
    """An Answer; by default one successful attempt, chosen."""
    if attempts is None and refused:
        attempts = (make_attempt(1, failure="LOW_CONFIDENCE", answer=None, confidence=confidence),)
    elif attempts is None:
        attempts = (make_attempt(1, answer=answer, confidence=confidence),)
    if chosen_attempt is None and attempts and not refused:
        chosen_attempt = attempts[-1].number
    return Answer(
        question=question,
        answer=None if refused else answer,
        refused=refused,
        refusal_reason="confidence below threshold" if refused else None,
        confidence=confidence,
        sources=attempts[-1].passages if attempts else (),
        attempts=attempts,
        timings_ms={"total": 300.0},
        query_class=query_class,
        chosen_attempt=chosen_attempt,
    )


def repaired_answer(question: str, *, query_class: str = "who", repair: str = "switch_retriever") -> Answer:
    """Two attempts: WEAK_RETRIEVAL with strategy A, then ``repair`` to B succeeds."""
    first = make_attempt(1, failure="WEAK_RETRIEVAL", answer=None, confidence=0.2)
    second = make_attempt(2, strategy=STRATEGY_B, repair=repair, confidence=0.85)
    return make_answer(question, (first, second), confidence=0.85, query_class=query_class)


SHORT_ANSWER = "Tobias Lune [1]"
LONG_ANSWER = "The keeper who rowed out in the great storm and saved the sailors was a man of the town [2]"


def add_labelled_answers(store: Any, n_short: int, n_long: int, long_correct_every: int = 6, start: int = 0) -> None:
    """Labelled answers whose length tells right from wrong: ``n_short`` short ones, all correct,
    then ``n_long`` long ones, every ``long_correct_every``-th correct (gold labels)."""
    for i in range(start, start + n_short + n_long):
        short = i < start + n_short
        text = SHORT_ANSWER if short else LONG_ANSWER
        oid = store.record(make_answer(f"Who saved the sailors {i}?", (make_attempt(1, answer=text),), answer=text))
        store.add_feedback(oid, correct=short or i % long_correct_every == 0, source="gold")


def concurrent_writer(path: str, worker: int, n: int, barrier: Any, results: Any, shared_items: bool) -> None:
    """Open the store when all workers are ready and record ``n`` outcomes; report to ``results``."""
    try:
        from self_improving_rag.memory import MemoryStore

        barrier.wait(timeout=60)
        store = MemoryStore(path)
        ids = []
        for i in range(n):
            if i % 3 == 0:
                ans = repaired_answer(f"question {worker}-{i} about the hound")
            else:
                ans = make_answer(f"question {worker}-{i} about the moor")
            run_id = "shared" if shared_items else f"run-{worker}"
            ids.append(store.record(ans, run_id=run_id, item_id=str(i)))
        store.close()
        results.put(("ok", worker, ids))
    except BaseException:  # report anything, including KeyboardInterrupt, to the parent test
        results.put(("error", worker, traceback.format_exc()))
