"""The engine: one question through retrieve -> generate -> score -> attribute -> repair,
within a budget, then an answer or an honest refusal, recorded in memory."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable

from .attempt import SamePrompt, run_attempt, with_cost_of
from .config import Config
from .errors import AnswerNotRecordedError, GenerationError, GeneratorUnavailableError, MemoryStoreError
from .evaluation import shipped
from .evaluation.calibrate import weights_for
from .evaluation.scorer import SignalScorer
from .feedback.policy import StrategyPolicy
from .query import query_features
from .memory.verdicts import Verdicts
from .outcome import answer_bar, finish, record_answer
from .questions import check_question
from .retrieval.embedder import Embedder, embedder_from_config
from .retrieval.searcher import Searcher
from .types import Answer, AttemptRecord, RetrievalResult, Strategy

log = logging.getLogger(__name__)


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
        #: The return check of loop.target_precision (the shipped confidence model and its bar),
        #: None without a target or a shipped model: the loop's own confidence and bar decide.
        self._check = shipped.gate(config.loop.target_precision)
        #: What the automatic calibration at start stored (its one-line report), else None: new
        #: confidence weights are in use from this engine on, which its user should be told.
        self.calibrated: str | None = None

    @property
    def returns_checked(self) -> bool:
        """Whether answers are returned by the shipped model's confidence and bar
        (loop.target_precision), so the confidence shown is that model's."""
        return self._check is not None

    def answer_bar(self, number: int) -> float:
        """The confidence attempt ``number`` (1-based) must reach for the loop to stop on it."""
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
        prior_weight = (weights or {}).get("question_prior") or 0.0
        if prior_weight and not self.generator.reads_prompt:
            # Undefined, the feature takes its neutral value: the fit's say for it is lost unseen.
            log.warning("the confidence weights in use give question_prior the weight %.3g, but this generator "
                        "(backend %s) cannot read its prompt as it generates: question_prior stays undefined and "
                        "takes its neutral value (the llama_cpp backend reads it; a fit on this backend's own "
                        "answers, `sirag calibrate`, gives it no weight)", prior_weight, self.config.generator.backend)
        # Memory's attempts are judged by the confidence weights and bars in use now, not by the
        # diagnoses stored with them (made by another confidence model after a fit).
        own = {c: f["weights"] for c, f in fit.get("corpus_fits", {}).items()} if fit else {}
        verdicts = Verdicts(fit.get("weights") if fit else None,
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
        from .ingestion.fingerprints import stale_documents

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
            except SamePrompt as same:
                # A repair that changes nothing the model reads (a larger budget when every passage
                # already fits, neighbours of a passage that has none) would get the same reply at
                # temperature 0: take the next repair instead of paying for the same answer again.
                # What it spent (a keywords rewrite, the search) is counted with the last attempt.
                log.info("repair %s gives the prompt of attempt %d again: skipped", repair, same.number)
                attempts[-1] = with_cost_of(attempts[-1], same)
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
        answer = finish(question, attempts, features.query_class, t_start, self.config.loop, self._check)
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

    def _attempt(self, question: str, strategy: Strategy, repair: str | None, number: int,
                 on_token, prompts: dict[str, int] | None = None, on_retrieval=None) -> AttemptRecord:
        """One attempt with ``strategy`` by this engine's stages (:func:`~self_improving_rag.attempt.run_attempt`)."""
        assert self._scorer is not None
        return run_attempt(question, strategy, repair, number, config=self.config, searcher=self.searcher,
                           generator=self.generator, scorer=self._scorer, on_token=on_token, prompts=prompts,
                           on_retrieval=on_retrieval)

    def close(self) -> None:
        self.searcher.close()


def _no_repair_note(failure: str) -> str:
    """Why the loop stopped when no untried repair applies, for a refusal's reason."""
    return f"no retry: no repair after {failure} is left untried for this question"


__all__ = ["LATEST_FIT", "Engine"]
