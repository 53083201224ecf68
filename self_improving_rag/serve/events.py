"""The jobs the worker runs for the API (an ask, a search) and the events an ask streams.

An ask streams, in order: ``retrieval`` (an attempt's passages; a retry's is preceded by
``repair``, the repair chosen after the attempt before it), ``token`` (the attempt's text as the
model writes it), ``attempt`` (its signals, each with its threshold, and its diagnosis), and,
last, ``answer`` or ``refusal`` with the JSON of ``sirag ask --json`` (a refusal's sources are the
closest passages) and the sentence of each source that supports the answer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..types import Answer, AttemptRecord, Passage, RetrievalResult, Strategy
from .errors import FieldError
from .worker import Job

#: The order of an ask's events (``repair`` only before a retry's ``retrieval``).
EVENTS = ("retrieval", "repair", "token", "attempt", "answer", "refusal", "error")


def passage_json(p: Passage) -> dict[str, Any]:
    """A passage as the ask JSON gives its sources."""
    return {"number": p.number, "doc": p.doc_id, "section": p.section, "start": p.start, "end": p.end,
            "text": p.text, "score": round(p.score, 4)}


def thresholds(engine, number: int) -> dict[str, dict[str, Any]]:
    """Each signal's threshold for attempt ``number`` and which side of it passes: confidence
    must reach the attempt's answer bar, redundancy must not exceed its threshold."""
    t = engine.config.thresholds
    bar = max(t.confidence, engine.answer_bar(number))
    return {"coverage": {"threshold": t.coverage, "pass": "at_least"},
            "grounding": {"threshold": t.grounding, "pass": "at_least"},
            "faithfulness": {"threshold": t.faithfulness, "pass": "at_least"},
            "redundancy": {"threshold": t.redundancy, "pass": "at_most"},
            "confidence": {"threshold": bar, "pass": "at_least"}}


def supporting_sentences(answer: Answer) -> list[dict[str, Any]]:
    """For each source, the sentence that holds most of the answer's words (of the claims that
    cite it or were found in it), or for a refusal most of the question's: what the page
    highlights. Sources where no sentence shares a word are left out."""
    from ..ingestion.sentences import split_sentences
    from ..text import claim_terms, strip_citations

    asked = set(claim_terms(answer.question))
    chosen = next((a for a in answer.attempts if a.number == answer.chosen_attempt), None)
    claims = ((chosen.signals.faithfulness.detail or {}).get("claims") or []) if chosen is not None else []
    out = []
    for p in answer.sources:
        if answer.refused or chosen is None:
            focus = asked
        else:
            mine = [c["claim"] for c in claims if c.get("found_in") == p.number or p.number in (c.get("cited") or ())]
            said = set(claim_terms(" ".join(mine) or strip_citations(answer.answer or "")))
            focus = (said - asked) or said
        best, where = 0, None
        for s, e in split_sentences(p.text):
            hits = len(focus & set(claim_terms(p.text[s:e])))
            if hits > best:
                best, where = hits, (s, e)
        if where is not None:
            out.append({"number": p.number, "sentence": p.text[where[0]:where[1]]})
    return out


def check_chunker(engine, strategy: Strategy | None) -> None:
    """A strategy asked for must use a chunker the index holds (the request says which it has)."""
    if strategy is None:
        return
    engine.warm_up()
    available = engine.searcher.available_chunkers()
    if strategy.chunker not in available:
        raise FieldError(f"the index has no '{strategy.chunker}' chunks; it holds {', '.join(available)}",
                         "strategy.chunker")


def final_event(answer: Answer) -> tuple[str, dict[str, Any]]:
    """The last event of an ask: ``answer`` or ``refusal``, with the ask JSON as ``result``."""
    return ("refusal" if answer.refused else "answer"), {"result": answer.to_json(),
                                                         "highlights": supporting_sentences(answer)}


def ask_job(engine, question: str, loop: bool | None, first_strategy: Strategy | None):
    """The worker's job for one ask: ``engine.ask`` with callbacks that stream its events. It
    returns the ask JSON, or for a stream the final event (:func:`final_event`)."""

    def run(job: Job) -> dict[str, Any] | tuple[str, dict[str, Any]]:
        check_chunker(engine, first_strategy)
        state: dict[str, Any] = {"number": 0, "failure": None}

        def on_retrieval(number: int, strategy: Strategy, repair: str | None, retrieval: RetrievalResult) -> None:
            if repair is not None:
                job.emit("repair", {"attempt": number, "after_failure": state["failure"], "repair": repair,
                                    "strategy": strategy.to_json(), "strategy_key": strategy.key,
                                    # the repair before it, for this attempt, gave an earlier prompt again
                                    "replaces_skipped": state["number"] == number})
            state["number"] = number
            job.emit("retrieval", {"attempt": number, "strategy": strategy.to_json(), "strategy_key": strategy.key,
                                   "repair": repair, "query": retrieval.query,
                                   "ms": round(sum(retrieval.timings_ms.values()), 1),
                                   "passages": [passage_json(p) for p in retrieval.passages]})

        def on_token(piece: str) -> None:
            job.emit("token", {"attempt": state["number"], "text": piece})

        def on_attempt(a: AttemptRecord) -> None:
            state["failure"] = a.attribution.failure
            job.emit("attempt", {**a.to_json(), "thresholds": thresholds(engine, a.number),
                                 "accepted_bar": engine.answer_bar(a.number)})

        answer = engine.ask(question, loop=loop, on_token=on_token, on_attempt=on_attempt,
                            on_retrieval=on_retrieval, first_strategy=first_strategy)
        # Recorded in memory by now: from here on it is an answer given, whoever still listens.
        # Made ready to send here, in the engine's thread (the stemmer is not thread-safe).
        return final_event(answer) if job.stream else answer.to_json()

    return run


def search_job(engine, question: str, over: dict[str, Any]):
    """The worker's job for a search: the JSON of ``sirag search --json``, with the engine's
    searcher (and its generator for a keywords rewrite)."""
    from ..attempt import rewrite_query
    from ..retrieval.searcher import search_json

    def run(job: Job) -> dict[str, Any]:
        strategy = replace(engine.config.strategy.to_strategy(), **over)
        check_chunker(engine, strategy)
        query = rewrite_query(engine.generator, question)[0] if strategy.query_rewrite == "keywords" else None
        job.check()
        return search_json(question, query, strategy, engine.searcher.search(question, strategy, query))

    return run
