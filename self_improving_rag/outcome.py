"""A question's outcome: the answer chosen from its attempts, or a refusal that says why with the
closest passages; the passages shown as an answer's sources; and its record in memory."""

from __future__ import annotations

import time
from dataclasses import replace

from . import decision
from .config import LoopConfig
from .decision import VETO_FAILURES
from .evaluation.shipped import Gate
from .evaluation.answer_metrics import normalize_answer
from .query import query_features
from .generation.prompts import strip_citations
from .types import Answer, AttemptRecord


def answer_bar(loop_config: LoopConfig, number: int) -> float:
    """The bar of attempt ``number`` under ``loop_config`` (:func:`decision.answer_bar`)."""
    return decision.answer_bar(loop_config.answer_threshold, loop_config.retry_margin, number)


def finish(question: str, attempts: list[AttemptRecord], query_class: str, t_start: float,
           loop: LoopConfig, check: Gate | None = None) -> Answer:
    """The question's answer from its ``attempts``: the most confident acceptable one
    (:func:`decision.returned`) under ``loop`` (the loop settings: bars, passages shown), or, with
    ``check`` (the return check of ``loop.target_precision``), under the shipped model's confidence
    and bar; else a refusal that says why, with the closest passages."""
    # An answer flagged as unsupported by its passages, or without evidence, is never returned.
    confs = [_confidence(a, check) for a in attempts]
    threshold = check.bar if check else loop.answer_threshold
    chosen = decision.returned([(a.answer, c, a.attribution.failure, a.number) for a, c in zip(attempts, confs)],
                               threshold, loop.retry_margin)
    timings = _sum_timings(attempts)
    timings["total"] = (time.perf_counter() - t_start) * 1000
    if chosen is not None:
        best = attempts[chosen]
        cited = [p for p in best.passages if p.number in _source_numbers(best)] or list(best.passages)
        return Answer(question=question, answer=best.answer, refused=False, refusal_reason=None,
                      confidence=confs[chosen], sources=tuple(cited),
                      attempts=tuple(attempts), timings_ms=timings, query_class=query_class,
                      chosen_attempt=best.number)
    # The closest passages: from the attempt whose passages were most relevant, and never from
    # one that found none while another did (all tie at grounding 0 then).
    best = max(attempts, key=lambda a: (bool(a.passages), (a.signals.grounding.value or 0.0),
                                        (a.signals.coverage.value or 0.0)))
    last = attempts[-1]
    best_conf = max(confs)
    if not any(a.passages for a in attempts):
        why = f"retrieval found no passage for the question in {len(attempts)} attempt(s)"
    elif all(a.signals.refusal for a in attempts):
        empty = sum(1 for a in attempts if not a.passages)  # the model was not asked in those
        why = (f"the model found no answer in the passages after {len(attempts)} attempt(s)" if not empty else
               f"the model found no answer in the passages of {len(attempts) - empty} attempt(s) "
               f"({empty} other(s) retrieved nothing)")
    else:
        def bar(n: int) -> float:
            return decision.answer_bar(threshold, loop.retry_margin, n)

        bars = "/".join(dict.fromkeys(f"{bar(a.number):.2f}" for a in attempts))
        vetoed = [a for a, c in zip(attempts, confs) if a.answer is not None and a.attribution.failure in VETO_FAILURES
                  and c >= bar(a.number)]
        if vetoed:
            # Confident enough, but its own checks found unsupported claims or no evidence.
            found = "; ".join(dict.fromkeys(f"{a.attribution.failure} ({_VETO_WHY[a.attribution.failure]})"
                                            for a in vetoed))
            why = (f"{len(vetoed)} of {len(attempts)} attempt(s) reached confidence {bars}, but their own "
                   f"checks found {found}, and such an answer is never returned")
        else:
            why = f"no answer reached confidence {bars} after {len(attempts)} attempt(s) (best {best_conf:.2f})"
            if check is not None:
                why = (f"no answer reached the shipped model's confidence {bars} after {len(attempts)} attempt(s) "
                       f"(best {best_conf:.2f}), where answers were right {check.target_precision:.0%} of the time on "
                       "corpora that model never saw (loop.target_precision)")
                unsure = [(c, a) for a, c in zip(attempts, confs) if a.answer is not None]
                if unsure:  # said, not returned: the user may check it against the passages below
                    c, a = max(unsure, key=lambda t: t[0])
                    why += f"; the best answer withheld, at {c:.2f}: {strip_citations(a.answer).strip()!r}"
    reason = f"{why}; last diagnosis {last.attribution.failure}: {last.attribution.reason}"
    n_show = loop.show_passages_on_refusal
    # A refusal's confidence is that of the refusal: the chance the best answer withheld was wrong.
    return Answer(question=question, answer=None, refused=True, refusal_reason=reason,
                  confidence=decision.refusal_confidence(best_conf),
                  sources=tuple(best.passages[:n_show]), attempts=tuple(attempts), timings_ms=timings,
                  query_class=query_class, chosen_attempt=None)


def _confidence(a: AttemptRecord, check: Gate | None) -> float:
    """The confidence that decides whether ``a`` is returned: the shipped model's under ``check``."""
    if check is None:
        return float(a.signals.confidence.value or 0.0)
    return check.confidence((a.signals.confidence.detail or {}).get("features") or {})


_VETO_WHY = {"HALLUCINATION_RISK": "claims the passages do not support",
             "WEAK_RETRIEVAL": "the question's evidence not found in the passages"}


def _sum_timings(attempts: list[AttemptRecord]) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in attempts:
        for k, v in a.timings_ms.items():
            if k != "total":
                out[k] = out.get(k, 0.0) + v
    return out


def _source_numbers(attempt: AttemptRecord) -> set[int]:
    """The passages an answer shows as its sources: those it cites, and for each supported claim
    that cites none or whose cited passages do not hold it, the passage that does (the claim check
    looks there next, so the answer was accepted on that passage's words: the reader must see it).
    An answer that cites nothing is shown with the passages that state its claims, not with every
    passage retrieved, which would not tell the reader where it comes from; only when none of its
    claims was found in a passage does it show every passage (the caller's fallback)."""
    numbers = set(attempt.citations)
    for claim in attempt.signals.faithfulness.detail.get("claims") or []:
        if claim.get("supported") and claim.get("found_in") is not None and claim["found_in"] not in claim.get("cited", ()):
            numbers.add(int(claim["found_in"]))
    # A passage that states the answer word for word is shown too: a small model often cites the
    # passage next to the one it copied from, and the reader must see where the words are.
    said = normalize_answer(strip_citations(attempt.answer or ""))
    if said and len(said.split()) <= 12:
        numbers.update(p.number for p in attempt.passages if f" {said} " in f" {normalize_answer(p.text)} ")
    return numbers


def record_answer(memory, answer: Answer, *, threshold: float, corpus: str, run_id: str | None = None,
                  item_id: str | None = None, features=None, started: float | None = None) -> Answer:
    """Record ``answer`` in ``memory`` as :meth:`Engine.ask` does, and return it with its outcome id
    and the time the write took (``memory``, added to ``total``; ``started``: the question's
    ``perf_counter`` start in this process, else the answer's own total is extended). A batch run on
    Ray records here, in the one process that writes memory, the answers its actors gave
    (``Engine(record=False)``), so they are stored as a single-process run stores them."""
    features = features if features is not None else query_features(answer.question)
    t = time.perf_counter()
    outcome_id = memory.record(answer, features=features.__dict__, run_id=run_id, item_id=item_id,
                               success_threshold=threshold, corpus=corpus)
    now = time.perf_counter()
    timings = {**answer.timings_ms, "memory": (now - t) * 1000}
    timings["total"] = ((now - started) * 1000 if started is not None
                        else answer.timings_ms.get("total", 0.0) + timings["memory"])
    return replace(answer, outcome_id=outcome_id, timings_ms=timings)
