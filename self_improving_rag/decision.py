"""The one rule that decides whether an attempt is returned as the answer.

Used by the engine as it answers, by the loop-off view of a run (the first attempt finished
alone), by the cold-start protocol's replay of recorded attempts under another confidence model,
and by the policy's re-judging of recorded attempts: every caller asks these functions, so the
rule is written once.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import Failure

#: Diagnoses that veto an answer whatever its confidence: the answer is not supported by its
#: passages (HALLUCINATION_RISK), or its evidence was not found (WEAK_RETRIEVAL: coverage or
#: grounding below threshold, no claim supported and its words absent from the passages, or
#: the passages behind it leave the question's dates unstated). Of the answers returned with
#: WEAK_RETRIEVAL in the evaluations 2 of 14 were right, against 105 of 231 returned with NONE.
VETO_FAILURES = frozenset({Failure.HALLUCINATION_RISK.value, Failure.WEAK_RETRIEVAL.value})

#: The diagnoses that depend on the confidence itself: an attempt is diagnosed NONE (and the loop
#: stops) only if its confidence clears its bar, LOW_CONFIDENCE otherwise. Every other diagnosis is
#: made before the confidence is looked at (feedback.attribution), so it holds whatever the weights.
CONFIDENCE_FAILURES = frozenset({Failure.NONE.value, Failure.LOW_CONFIDENCE.value})


def answer_bar(threshold: float, retry_margin: float, number: int) -> float:
    """``threshold + retry_margin * (number - 1)``, at most 1: the confidence attempt ``number``
    (1-based) must reach. A retry is chosen because earlier attempts failed, and the most confident
    of several tries clears a fixed bar by luck more often than a single try does."""
    return min(1.0, threshold + retry_margin * max(0, number - 1))


def acceptable(answer: str | None, confidence: float | None, failure: str, bar: float) -> bool:
    """Whether an attempt may be returned: it answers, its confidence clears ``bar``, and its checks
    found neither unsupported claims nor missing evidence (:data:`VETO_FAILURES`)."""
    return answer is not None and (confidence or 0.0) >= bar and failure not in VETO_FAILURES


def returned(attempts: Sequence[tuple[str | None, float | None, str, int]], threshold: float,
             retry_margin: float) -> int | None:
    """Which attempt is returned: the index, in ``attempts`` (each ``(answer, confidence, failure,
    number)``), of the most confident :func:`acceptable` one under :func:`answer_bar`, or None for a
    refusal. The engine, the loop-off view of a run and the cold-start replay all choose here."""
    ok = [i for i, (answer, conf, failure, number) in enumerate(attempts)
          if acceptable(answer, conf, failure, answer_bar(threshold, retry_margin, number))]
    return max(ok, key=lambda i: attempts[i][1] or 0.0) if ok else None


def rediagnose(failure: str, confidence: float | None, bar: float, floor: float) -> str:
    """The diagnosis a recorded attempt would get with another ``confidence`` and ``bar``: NONE or
    LOW_CONFIDENCE as the confidence clears ``max(floor, bar)``; any other diagnosis as recorded."""
    if failure not in CONFIDENCE_FAILURES:
        return failure
    return (Failure.NONE if (confidence or 0.0) >= max(floor, bar) else Failure.LOW_CONFIDENCE).value


def refusal_confidence(best_answer_confidence: float | None) -> float:
    """How sure a refusal is: the chance that the best answer withheld would have been wrong."""
    return 1.0 - float(best_answer_confidence or 0.0)


__all__ = ["CONFIDENCE_FAILURES", "VETO_FAILURES", "acceptable", "answer_bar", "rediagnose", "refusal_confidence",
           "returned"]
