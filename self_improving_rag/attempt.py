"""One attempt at a question with one strategy: (rewrite the query,) retrieve, generate, score and
diagnose; and what a repair skipped as a repeat of an earlier prompt had spent."""

from __future__ import annotations

import time
from dataclasses import replace

from .config import Config
from .evaluation.question_signals import question_prior_needs
from .evaluation.scorer import SignalScorer
from .feedback.attribution import attribute
from .generation.prompts import (REFUSAL_PHRASE, build_messages, drop_unknown_citations, is_refusal, load_template,
                                 parse_citations, question_span)
from .outcome import answer_bar
from .questions import restates_question
from .retrieval.searcher import Searcher
from .types import AttemptRecord, Generation, Strategy


def run_attempt(question: str, strategy: Strategy, repair: str | None, number: int, *, config: Config,
                searcher: Searcher, generator, scorer: SignalScorer, on_token=None,
                prompts: dict[str, int] | None = None, on_retrieval=None) -> AttemptRecord:
    """One attempt with ``strategy``. ``prompts`` maps the prompts sent by earlier attempts of
    this question to their numbers: with a greedy generator (temperature 0) a prompt sent
    again raises :class:`SamePrompt` before the model is called, since its reply would be
    the same; a new prompt is added to it."""
    timings: dict[str, float] = {}
    prompt_tokens = completion_tokens = 0
    query = None
    if strategy.query_rewrite == "keywords":
        t = time.perf_counter()
        query, rw = rewrite_query(generator, question)
        timings["rewrite"] = (time.perf_counter() - t) * 1000
        if rw is not None:
            prompt_tokens += rw.prompt_tokens
            completion_tokens += rw.completion_tokens
    t = time.perf_counter()
    retrieval = searcher.search(question, strategy, query)
    timings["retrieve"] = (time.perf_counter() - t) * 1000
    if on_retrieval is not None:
        on_retrieval(number, strategy, repair, retrieval)
    generation: Generation | None = None
    if retrieval.passages:
        messages = build_messages(strategy.prompt, question, retrieval.passages)
        if prompts is not None and config.generator.temperature == 0:
            sent = "\x00".join(m["content"] for m in messages)
            if sent in prompts:
                raise SamePrompt(prompts[sent], prompt_tokens, completion_tokens, timings)
            prompts[sent] = number
        t = time.perf_counter()
        # The question's tokens are read while the prompt is evaluated (question_prior).
        read = (question_span(question), question_prior_needs)
        generation = generator.generate(messages, on_token=on_token, read=read)
        timings["generate"] = (time.perf_counter() - t) * 1000
        raw = generation.text
        prompt_tokens += generation.prompt_tokens
        completion_tokens += generation.completion_tokens
    else:
        raw = REFUSAL_PHRASE
    # An echo of the question is no answer either, but the model did not decline: the diagnosis
    # quotes it (the text output shows no withheld reply otherwise).
    echo = raw if generation is not None and not is_refusal(raw) and restates_question(question, raw) else None
    refused = echo is not None or is_refusal(raw)
    citations = parse_citations(raw, len(retrieval.passages))
    shown = drop_unknown_citations(raw, len(retrieval.passages))  # what the user reads
    t = time.perf_counter()
    signals = scorer.score(question, retrieval, generation, raw, refused, citations, strategy.prompt)
    timings["score"] = (time.perf_counter() - t) * 1000
    # An attempt is diagnosed NONE (and the loop stops) only if it would also be accepted: a
    # confidence below its answer bar is LOW_CONFIDENCE even when it clears thresholds.confidence.
    thr = config.thresholds
    attribution = attribute(signals, thr.model_copy(update={"confidence": max(thr.confidence,
                                                                              answer_bar(config.loop, number))}),
                            retrieved=bool(retrieval.passages), echo=echo)
    timings["total"] = sum(timings.values())
    return AttemptRecord(
        number=number, strategy=strategy, repair=repair, answer=None if refused else shown,
        raw_answer=raw if generation is not None else "",  # no passages: the model said nothing
        citations=citations, signals=signals, attribution=attribution, prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens, timings_ms=timings, passages=retrieval.passages,
    )


class SamePrompt(Exception):
    """A repair whose prompt an earlier attempt of the question already sent (``number``), with
    what it spent before that was found (a keywords rewrite's tokens, the stages' times)."""

    def __init__(self, number: int, prompt_tokens: int = 0, completion_tokens: int = 0,
                 timings_ms: dict[str, float] | None = None) -> None:
        super().__init__(number)
        self.number = number
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.timings_ms = dict(timings_ms or {})


def with_cost_of(attempt: AttemptRecord, skipped: SamePrompt) -> AttemptRecord:
    """``attempt`` with a skipped repair's tokens and times added (under ``skipped_repairs`` in
    its timings), so that a question's costs still sum every model call and search it made."""
    timings = dict(attempt.timings_ms)
    spent = sum(skipped.timings_ms.values())
    timings["skipped_repairs"] = timings.get("skipped_repairs", 0.0) + spent
    timings["total"] = timings.get("total", 0.0) + spent
    return replace(attempt, prompt_tokens=attempt.prompt_tokens + skipped.prompt_tokens,
                   completion_tokens=attempt.completion_tokens + skipped.completion_tokens, timings_ms=timings)


def rewrite_query(generator, question: str) -> tuple[str, Generation]:
    """The search query of ``query_rewrite: keywords``: the question followed by up to ten
    keywords the generator writes for it (the question alone if it writes none, or declines)."""
    t = load_template("keywords")
    msgs = [{"role": "system", "content": t.system}, {"role": "user", "content": t.user.format(question=question)}]
    gen = generator.generate(msgs, max_tokens=24)
    # A declining reply ("I cannot answer this ...") holds no keywords: searching for its words
    # would only pull in passages about answering. Only a reply that reads as a sentence is taken
    # for one: a list of keywords may hold "not mentioned" or "no information" as keywords.
    declined = REFUSAL_PHRASE.lower().rstrip(".") in gen.text.lower() or ("," not in gen.text and is_refusal(gen.text))
    words = "" if declined else " ".join(gen.text.replace(",", " ").split()[:10])
    return (f"{question} {words}" if words else question), gen
