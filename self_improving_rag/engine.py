"""The engine: one question through retrieve -> generate -> score -> attribute -> repair,
within a budget, then an answer or an honest refusal, recorded in memory."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from typing import Callable

from . import decision
from .config import Config
from .decision import VETO_FAILURES, acceptable
from .errors import (AnswerNotRecordedError, GenerationError, GeneratorUnavailableError, InputError,
                     MemoryStoreError)
from .evaluation import shipped
from .evaluation.calibrate import weights_for
from .evaluation.question_signals import question_prior_needs
from .evaluation.scorer import SignalScorer
from .feedback.attribution import attribute
from .feedback.policy import StrategyPolicy
from .evaluation.answer_metrics import normalize_answer
from .generation.prompts import (REFUSAL_PHRASE, build_messages, drop_unknown_citations, is_refusal, load_template,
                                 parse_citations, question_span, strip_citations)
from .memory.verdicts import Verdicts
from .query import query_features
from .retrieval.embedder import Embedder, embedder_from_config
from .retrieval.searcher import Searcher
from .types import Answer, AttemptRecord, Generation, RetrievalResult, Strategy

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000


def check_question(question: str) -> str:
    """A usable question, whitespace-normalised; InputError otherwise."""
    if not isinstance(question, str) or not question.strip():
        raise InputError("the question is empty; write the question in words, e.g. \"Who is Holmes?\"")
    q = " ".join(question.split())
    try:
        q.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("the question holds bytes that are not valid UTF-8 (a terminal or file in another "
                         "encoding); type it again, or convert the text to UTF-8") from None
    if len(q) > MAX_QUESTION_CHARS:
        raise InputError(f"the question has {len(q)} characters, more than {MAX_QUESTION_CHARS}; shorten it to one question")
    if not any(ch.isalnum() for ch in q):
        raise InputError("the question has no letters or digits; ask a question in words")
    return q


# Words that, alone, name nothing: pronouns, auxiliaries, articles. An answer made only of them
# (or of single letters) cannot be checked against the passages.
_EMPTY_WORDS = frozenset(
    "he she it they him her them his hers its their theirs this that these those i you we me us my your our "
    "did does do done was were is are be been being has have had the a an".split())


def _says_nothing(text: str) -> bool:
    words = re.findall(r"[^\W\d_]+|\d+", text.lower())
    return all(w in _EMPTY_WORDS or (len(w) == 1 and not w.isdigit()) for w in words)


def restates_question(question: str, answer: str) -> bool:
    """An answer that only echoes the question, or has no content word at all, says nothing new:
    no answer.

    It is an echo when every content word of the answer comes from the question ("Who killed
    Drebber?" -> "Drebber"); it is empty when it is made only of pronouns, auxiliaries, articles
    or single letters ("He did", "It was him", "x": nothing in it can be checked against the
    passages; "One", "Once", "No one" are answers). Both are answers when the question offers a choice
    ("... by Venn or by Lune?" -> "Venn", "the former") or asks yes or no ("Did Holmes go to
    Paris?" -> "Holmes went to Paris", "No").
    """
    from .query import query_features
    from .generation.prompts import strip_citations
    from .text import content_terms

    text = strip_citations(answer)
    terms = set(content_terms(text))
    asked = set(content_terms(question))
    if terms and not terms <= asked:
        return False
    if not terms and not _says_nothing(text):
        return False  # "One", "Once", "No one", "Up": short answers made of common words
    offers_choice = re.search(r"\bor\b", question, re.I) is not None
    return not offers_choice and query_features(question).query_class != "yes-no"


#: ``Engine(fit_id=...)``'s default: score with memory's latest calibration fit (a string, so that
#: it reaches a batch's worker processes as it is; fit ids are integers).
LATEST_FIT = "latest"


class Engine:
    """Answers questions over one corpus index. Re-entrant: ``ask`` never swaps its stages."""

    def __init__(self, config: Config, *, embedder: Embedder | None = None, generator=None, memory=None,
                 index_dir: str | None = None, record: bool = True, fit_id: int | str | None = LATEST_FIT) -> None:
        """``fit_id``: the calibration fit in memory whose weights score the answers, None for the
        default weights; by default (:data:`LATEST_FIT`) memory's latest fit. A batch resumed
        after a fit was stored pins the fit its first answers were scored with."""
        self.config = config
        self._fit_id = fit_id
        self.embedder = embedder if embedder is not None else embedder_from_config(config)
        self._generator = generator
        self.memory = memory
        self.record = record
        self.searcher = Searcher(config, self.embedder, index_dir)
        # The corpus this engine answers from, recorded with every outcome: its index folder, absolute.
        self.corpus = str(self.searcher.index.root.resolve())
        self._policy: StrategyPolicy | None = None
        self._scorer: SignalScorer | None = None
        #: What the automatic calibration at start stored (its one-line report), else None: new
        #: confidence weights are in use from this engine on, which its user should be told.
        self.calibrated: str | None = None

    def answer_bar(self, number: int) -> float:
        """The confidence attempt ``number`` (1-based) must reach to be returned."""
        return answer_bar(self.config.loop, number)

    @property
    def generator(self):
        if self._generator is None:
            from .generation.factory import make_generator

            self._generator = make_generator(self.config)
        return self._generator

    def warm_up(self) -> None:
        if self._policy is not None:
            return
        if self.memory is not None and self.record and getattr(self.memory, "read_only", False):
            # Found before the models load and before any question: an answer the store then
            # refused to record would be lost.
            raise MemoryStoreError(f"memory store {self.memory.path} is open read-only, and this engine records "
                                   "every answer in it; open it writable, or make the engine with record=False "
                                   "(sirag ask --no-memory)")
        self.searcher.warm_up()
        self._warn_if_stale()
        self.generator.warm_up()
        available = tuple(self.searcher.available_chunkers())
        default = self.config.strategy.to_strategy()
        if default.chunker not in available:
            log.warning("the index has no '%s' chunker; the first attempt uses '%s' (set strategy.chunker, or "
                        "re-ingest with ingestion.chunkers including %s)", default.chunker, available[0],
                        default.chunker)
            default = replace(default, chunker=available[0])
        weights = fit = note = None
        if self.memory is not None:
            if self.config.calibration.auto_fit and self.record:
                self._auto_calibrate()
            fit = self._stored_fit()
            # This corpus's own fit when the stored fit made one.
            weights = weights_for(fit, self.corpus)
            if fit and weights is not fit.get("weights"):
                note = "fitted weights of this corpus"
            elif fit and (fit.get("metrics") or {}).get("reset_to_defaults"):
                note = "default weights"  # stored by `sirag calibrate --reset`
        if weights is None:
            # No fit in memory yet: the model shipped with the package, fitted on other corpora.
            weights = shipped.weights(self.config.loop.target_precision)
            note = "shipped weights" if weights is not None else note
        prior_weight = (weights or {}).get("question_prior") or 0.0
        if prior_weight and not getattr(self.generator, "reads_prompt", False):
            # Undefined, the feature takes its neutral value: the fit's say for it is lost unseen.
            log.warning("the confidence weights in use give question_prior the weight %.3g, but this generator "
                        "(backend %s) cannot read its prompt as it generates: question_prior stays undefined and "
                        "takes its neutral value (the llama_cpp backend reads it; a fit on this backend's own "
                        "answers, `sirag calibrate`, gives it no weight)", prior_weight, self.config.generator.backend)
        # Memory's attempts are judged by the confidence weights and bars in use now, not by the
        # diagnoses stored with them (made by another confidence model after a fit).
        own = {c: f["weights"] for c, f in fit.get("corpus_fits", {}).items()} if fit else {}
        verdicts = Verdicts(fit.get("weights") if fit else shipped.weights(self.config.loop.target_precision),
                            self.config.loop.answer_threshold,
                            self.config.loop.retry_margin, self.config.thresholds.confidence,
                            self.config.thresholds.dates_unstated, own or None)
        policy = StrategyPolicy(self.config.policy, default, self.memory, available, verdicts, corpus=self.corpus)
        self._scorer = SignalScorer(self.config.scoring, self.searcher.embed_cached, self.generator, weights,
                                    relevance_midpoint=self.config.retrieval.relevance_midpoint, weights_note=note)
        # Set last: it marks the engine as ready, so a failure above (a locked store, say) is
        # retried by the next call instead of leaving an engine without a scorer.
        self._policy = policy

    def _warn_if_stale(self) -> None:
        """Say when documents changed or went away since the index was built: answers come from
        the text it holds, which the files no longer say."""
        from .ingestion.pipeline import stale_documents

        changed, gone = stale_documents(self.searcher.manifest)
        if not changed and not gone:
            return

        def some(ids: list[str]) -> str:
            return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")

        what = "; ".join(x for x in (f"{len(changed)} document(s) changed since ({some(changed)})" if changed else "",
                                     f"{len(gone)} document(s) whose file is gone ({some(gone)})" if gone else "")
                         if x)
        log.warning("the index %s holds documents as they were when it was built: %s; answers come from the text "
                    "it holds. Run sirag ingest again with the same paths to bring it up to date", self.searcher.index.root,
                    what)

    def _stored_fit(self) -> dict | None:
        if self._fit_id == LATEST_FIT:
            return self.memory.latest_calibration()
        if self._fit_id is None:
            return None
        fit = self.memory.calibration_fit(self._fit_id)
        if fit is None:
            raise MemoryStoreError(f"memory {self.config.paths.memory_db} holds no calibration fit #{self._fit_id}, "
                                   "the one these answers are to be scored with; use the memory store they "
                                   "were started with")
        return fit

    def _auto_calibrate(self) -> None:
        """Fit the confidence weights on memory's labels when enough new ones arrived
        (``calibration.auto_fit``); a store that cannot be written keeps its weights."""
        from .evaluation.calibrate import auto_calibrate_with

        try:
            done, stored = auto_calibrate_with(self.memory, self.config)
        except MemoryStoreError as exc:
            log.warning("automatic calibration skipped (%s); the confidence weights in use stay", exc)
            return
        if done:
            log.info(done)
            if stored:  # the confidence weights changed
                self.calibrated = done

    @property
    def policy(self) -> StrategyPolicy:
        self.warm_up()
        assert self._policy is not None
        return self._policy

    def ask(self, question: str, *, loop: bool | None = None, on_token: Callable[[str], None] | None = None,
            on_attempt: Callable[[AttemptRecord], None] | None = None, run_id: str | None = None,
            item_id: str | None = None, first_strategy: Strategy | None = None,
            on_retrieval: Callable[[int, Strategy, str | None, RetrievalResult], None] | None = None) -> Answer:
        """Answer one question (or refuse), recording every attempt in memory.

        ``on_retrieval(number, strategy, repair, retrieval)`` is called once an attempt has its
        passages, before the model is asked (a repair whose prompt repeats an earlier one is
        then skipped: the next call has the same number). A callback that raises stops the
        question there, and nothing of it is recorded."""
        question = check_question(question)
        self.warm_up()
        # The budget starts after the models are loaded: loading is not the question's time.
        t_start = time.perf_counter()
        loop = self.config.loop.enabled if loop is None else loop
        features = query_features(question)
        strategy = first_strategy or self.policy.first(question, features)
        log.info("first attempt with %s (%s)", strategy.key,
                 "given" if first_strategy is not None else "the configured default"
                 if strategy == self.policy.default else f"memory's choice for {features.query_class} questions")
        max_attempts = self.config.loop.max_attempts if loop else 1
        attempts: list[AttemptRecord] = []
        tried = {strategy.key}
        repair: str | None = None
        stop_note = ""
        prompts: dict[str, int] = {}  # each prompt sent so far, with its attempt's number
        while True:
            try:
                attempt = self._attempt(question, strategy, repair, len(attempts) + 1, on_token, prompts,
                                        on_retrieval)
            except _SamePrompt as same:
                # A repair that changes nothing the model reads (a larger budget when every passage
                # already fits, neighbours of a passage that has none) would get the same reply at
                # temperature 0: take the next repair instead of paying for the same answer again.
                # What it spent (a keywords rewrite, the search) is counted with the last attempt.
                log.info("repair %s gives the prompt of attempt %d again: skipped", repair, same.number)
                attempts[-1] = _with_cost_of(attempts[-1], same)
                if self._out_of_time(t_start, len(attempts)):
                    stop_note = self._out_of_time_note()
                    break
                # The next repair starts from the strategy the last attempt used: the skipped one
                # changed nothing worth keeping (and stays in ``tried``, so it is not chosen again).
                nxt = self.policy.repair(question, attempts[-1].attribution.failure, attempts[-1].strategy, tried,
                                         features)
                if nxt is None:
                    stop_note = _no_repair_note(attempts[-1].attribution.failure)
                    break
                repair, strategy = nxt
                tried.add(strategy.key)
                log.info("retrying with %s instead", repair)
                continue
            except GeneratorUnavailableError:
                raise  # the generator is gone: nothing more can be answered, so the caller must know
            except GenerationError as exc:
                if not attempts:
                    raise
                # A retry that fails (a longer prompt the server refuses, no text produced) must not
                # throw away the attempts already made: answer or refuse from them.
                stop_note = f"attempt {len(attempts) + 1} ({repair}) failed: {exc}"
                log.warning("%s; answering from the %d earlier attempt(s)", stop_note, len(attempts))
                break
            attempts.append(attempt)
            if on_attempt is not None:
                on_attempt(attempt)
            failure = attempt.attribution.failure
            if failure == "NONE" or len(attempts) >= max_attempts:
                break
            if self._out_of_time(t_start, len(attempts)):
                # Said in a refusal, as the other early stops are: "after 1 attempt(s)" with
                # loop.max_attempts 3 would otherwise leave the user guessing why it stopped.
                stop_note = self._out_of_time_note()
                break
            futile = self.policy.futile(failure, question, features)
            if futile is not None:
                stop_note = futile.note
                log.info("%s", stop_note)
                break
            nxt = self.policy.repair(question, failure, strategy, tried, features)
            if nxt is None:
                stop_note = _no_repair_note(failure)
                break
            repair, strategy = nxt
            tried.add(strategy.key)
            log.info("attempt %d failed (%s): retrying with %s", len(attempts), failure, repair)
        answer = self._finish(question, attempts, features.query_class, t_start)
        if stop_note and answer.refused:
            answer = replace(answer, refusal_reason=f"{answer.refusal_reason}; {stop_note}")
        if self.record and self.memory is not None:
            try:
                answer = record_answer(self.memory, answer, threshold=self.config.loop.answer_threshold,
                                       corpus=self.corpus, run_id=run_id, item_id=item_id, features=features,
                                       started=t_start)
            except MemoryStoreError as exc:
                raise AnswerNotRecordedError(f"the answer was not recorded in memory: {exc}", answer) from exc
        return answer

    def _out_of_time(self, t_start: float, made: int) -> bool:
        """Whether another attempt, expected to take as long as the mean of the ``made`` ones so
        far (repairs skipped as repeats count in the time, not in the attempts), would end past
        ``loop.max_seconds``."""
        elapsed = time.perf_counter() - t_start
        if elapsed + elapsed / max(1, made) <= self.config.loop.max_seconds:
            return False
        log.info("time budget of %.0f s would be spent by another attempt after %d attempt(s) in %.1f s",
                 self.config.loop.max_seconds, made, elapsed)
        return True

    def _out_of_time_note(self) -> str:
        """Why the loop stopped early on time, for a refusal's reason."""
        return (f"no retry: another attempt would end past the time budget (loop.max_seconds "
                f"{self.config.loop.max_seconds:g} s)")

    def _rewrite(self, question: str) -> tuple[str, Generation | None]:
        return rewrite_query(self.generator, question)

    def _attempt(self, question: str, strategy: Strategy, repair: str | None, number: int,
                 on_token, prompts: dict[str, int] | None = None, on_retrieval=None) -> AttemptRecord:
        """One attempt with ``strategy``. ``prompts`` maps the prompts sent by earlier attempts of
        this question to their numbers: with a greedy generator (temperature 0) a prompt sent
        again raises :class:`_SamePrompt` before the model is called, since its reply would be
        the same; a new prompt is added to it."""
        timings: dict[str, float] = {}
        prompt_tokens = completion_tokens = 0
        query = None
        if strategy.query_rewrite == "keywords":
            t = time.perf_counter()
            query, rw = self._rewrite(question)
            timings["rewrite"] = (time.perf_counter() - t) * 1000
            if rw is not None:
                prompt_tokens += rw.prompt_tokens
                completion_tokens += rw.completion_tokens
        t = time.perf_counter()
        retrieval = self.searcher.search(question, strategy, query)
        timings["retrieve"] = (time.perf_counter() - t) * 1000
        if on_retrieval is not None:
            on_retrieval(number, strategy, repair, retrieval)
        generation: Generation | None = None
        if retrieval.passages:
            messages = build_messages(strategy.prompt, question, retrieval.passages)
            if prompts is not None and self.config.generator.temperature == 0:
                sent = "\x00".join(m["content"] for m in messages)
                if sent in prompts:
                    raise _SamePrompt(prompts[sent], prompt_tokens, completion_tokens, timings)
                prompts[sent] = number
            t = time.perf_counter()
            # The question's tokens are read while the prompt is evaluated (question_prior).
            read = (question_span(question), question_prior_needs)
            generation = self.generator.generate(messages, on_token=on_token, read=read)
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
        assert self._scorer is not None
        signals = self._scorer.score(question, retrieval, generation, raw, refused, citations, strategy.prompt)
        timings["score"] = (time.perf_counter() - t) * 1000
        # An attempt is diagnosed NONE (and the loop stops) only if it would also be accepted: a
        # confidence below its answer bar is LOW_CONFIDENCE even when it clears thresholds.confidence.
        thr = self.config.thresholds
        attribution = attribute(signals, thr.model_copy(update={"confidence": max(thr.confidence,
                                                                                  self.answer_bar(number))}),
                                retrieved=bool(retrieval.passages), echo=echo)
        timings["total"] = sum(timings.values())
        return AttemptRecord(
            number=number, strategy=strategy, repair=repair, answer=None if refused else shown,
            raw_answer=raw if generation is not None else "",  # no passages: the model said nothing
            citations=citations, signals=signals, attribution=attribution, prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, timings_ms=timings, passages=retrieval.passages,
        )

    def _finish(self, question: str, attempts: list[AttemptRecord], query_class: str, t_start: float) -> Answer:
        # An answer flagged as unsupported by its passages, or without evidence, is never returned.
        answered = [a for a in attempts
                    if acceptable(a.answer, a.signals.confidence.value, a.attribution.failure, self.answer_bar(a.number))]
        timings = _sum_timings(attempts)
        timings["total"] = (time.perf_counter() - t_start) * 1000
        if answered:
            best = max(answered, key=lambda a: a.signals.confidence.value or 0.0)
            cited = [p for p in best.passages if p.number in _source_numbers(best)] or list(best.passages)
            return Answer(question=question, answer=best.answer, refused=False, refusal_reason=None,
                          confidence=float(best.signals.confidence.value or 0.0), sources=tuple(cited),
                          attempts=tuple(attempts), timings_ms=timings, query_class=query_class,
                          chosen_attempt=best.number)
        # The closest passages: from the attempt whose passages were most relevant, and never from
        # one that found none while another did (all tie at grounding 0 then).
        best = max(attempts, key=lambda a: (bool(a.passages), (a.signals.grounding.value or 0.0),
                                            (a.signals.coverage.value or 0.0)))
        last = attempts[-1]
        best_conf = max(float(a.signals.confidence.value or 0.0) for a in attempts)
        if not any(a.passages for a in attempts):
            why = f"retrieval found no passage for the question in {len(attempts)} attempt(s)"
        elif all(a.signals.refusal for a in attempts):
            empty = sum(1 for a in attempts if not a.passages)  # the model was not asked in those
            why = (f"the model found no answer in the passages after {len(attempts)} attempt(s)" if not empty else
                   f"the model found no answer in the passages of {len(attempts) - empty} attempt(s) "
                   f"({empty} other(s) retrieved nothing)")
        else:
            bars = "/".join(dict.fromkeys(f"{self.answer_bar(a.number):.2f}" for a in attempts))
            vetoed = [a for a in attempts if a.answer is not None and a.attribution.failure in VETO_FAILURES
                      and (a.signals.confidence.value or 0.0) >= self.answer_bar(a.number)]
            if vetoed:
                # Confident enough, but its own checks found unsupported claims or no evidence.
                found = "; ".join(dict.fromkeys(f"{a.attribution.failure} ({_VETO_WHY[a.attribution.failure]})"
                                                for a in vetoed))
                why = (f"{len(vetoed)} of {len(attempts)} attempt(s) reached confidence {bars}, but their own "
                       f"checks found {found}, and such an answer is never returned")
            else:
                why = f"no answer reached confidence {bars} after {len(attempts)} attempt(s) (best {best_conf:.2f})"
        reason = f"{why}; last diagnosis {last.attribution.failure}: {last.attribution.reason}"
        n_show = self.config.loop.show_passages_on_refusal
        # A refusal's confidence is that of the refusal: the chance the best answer withheld was wrong.
        return Answer(question=question, answer=None, refused=True, refusal_reason=reason,
                      confidence=decision.refusal_confidence(best_conf),
                      sources=tuple(best.passages[:n_show]), attempts=tuple(attempts), timings_ms=timings,
                      query_class=query_class, chosen_attempt=None)

    def close(self) -> None:
        self.searcher.close()


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


def _no_repair_note(failure: str) -> str:
    """Why the loop stopped when no untried repair applies, for a refusal's reason."""
    return f"no retry: no repair after {failure} is left untried for this question"


class _SamePrompt(Exception):
    """A repair whose prompt an earlier attempt of the question already sent (``number``), with
    what it spent before that was found (a keywords rewrite's tokens, the stages' times)."""

    def __init__(self, number: int, prompt_tokens: int = 0, completion_tokens: int = 0,
                 timings_ms: dict[str, float] | None = None) -> None:
        super().__init__(number)
        self.number = number
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.timings_ms = dict(timings_ms or {})


def _with_cost_of(attempt: AttemptRecord, skipped: _SamePrompt) -> AttemptRecord:
    """``attempt`` with a skipped repair's tokens and times added (under ``skipped_repairs`` in
    its timings), so that a question's costs still sum every model call and search it made."""
    timings = dict(attempt.timings_ms)
    spent = sum(skipped.timings_ms.values())
    timings["skipped_repairs"] = timings.get("skipped_repairs", 0.0) + spent
    timings["total"] = timings.get("total", 0.0) + spent
    return replace(attempt, prompt_tokens=attempt.prompt_tokens + skipped.prompt_tokens,
                   completion_tokens=attempt.completion_tokens + skipped.completion_tokens, timings_ms=timings)


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


def answer_bar(loop_config, number: int) -> float:
    """The bar of attempt ``number`` under ``loop_config`` (:func:`decision.answer_bar`)."""
    return decision.answer_bar(loop_config.answer_threshold, loop_config.retry_margin, number)


_VETO_WHY = {"HALLUCINATION_RISK": "claims the passages do not support",
             "WEAK_RETRIEVAL": "the question's evidence not found in the passages"}


def _sum_timings(attempts: list[AttemptRecord]) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in attempts:
        for k, v in a.timings_ms.items():
            if k != "total":
                out[k] = out.get(k, 0.0) + v
    return out


__all__ = ["VETO_FAILURES", "Engine", "acceptable", "answer_bar", "check_question", "record_answer",
           "restates_question"]
