"""The store's verdicts on recorded attempts are the engine's decisions: one rule, not two.

The fake engine answers questions of every kind (answered, retried after a refusal, without
evidence, with a date its passages leave unstated, a why question, long and short answers), with
the question read back (question_fit, question_prior) and records
them. Then, under several confidence models and bars, what the policy's counts say of each
recorded attempt is what the engine's own rules say of it: its attribution with the confidence
recomputed by calibration.confidence, against decision.answer_bar.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections import Counter

from self_improving_rag import decision
from self_improving_rag.config import load_config
from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence
from self_improving_rag.feedback.attribution import attribute
from self_improving_rag.memory import MemoryStore
from self_improving_rag.memory.verdicts import Verdicts
from tests.conftest import fake_overrides

#: Each question's replies, one an attempt (the last repeats).
REPLIES = {
    "Who saved the sailors of the Greyling in the storm?":
        ["Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."],
    "Who built the lighthouse of Marrow Point?":
        ["I cannot answer this from the documents.", "Clara Venn built it in 1852 [1].",
         "The engineer Clara Venn [1]."],
    "What colour is the moon on Mars?": ["The moon is red on Mars [1]."],
    "When did the lamp of the lighthouse stop burning whale oil?":
        ["In 1901 [1].", "It burned whale oil until 1901 [1]."],
    "What happened at the fish market in 1923?":
        ["The market bell was cast in Bristol [1].", "Mrs. Alder sold smoked herring [1]."],
    "How many apple trees grow in the orchard behind the mill?":
        ["Sixty apple trees and a great many other remarkable trees of every kind grow there [1].", "Sixty [1]."],
    "Who was the first miller of the valley?": ["Clara Venn was the first miller [1].", "Ansel Brook [1]."],
    "Why did the council give Tobias Lune a silver medal?":
        ["Because he rowed out alone and saved eleven sailors [1].", "He saved the sailors [2]."],
}


def _question(messages) -> str:
    return next(q for q in REPLIES if q in messages[-1]["content"])


def _generator():
    from self_improving_rag.generation.scripted import ScriptedGenerator

    asked: Counter = Counter()

    def reply(messages) -> str:
        q = _question(messages)
        asked[q] += 1
        return REPLIES[q][min(asked[q], len(REPLIES[q])) - 1]

    def reader(messages, span):  # the question read back, a log-probability of its own for each word
        return [(w, -((len(w) * 7 + i) % 11) / 2) for i, w in enumerate(re.findall(r"\s*\S+", span))]

    return ScriptedGenerator([reply], reader=reader)


def _engine_diagnosis(attempt, thresholds, weights, verdicts: Verdicts) -> tuple[str, float, float]:
    """What the engine's rules say of a recorded attempt under ``weights`` and the bars of
    ``verdicts``: its attribution (as Engine._attempt makes it) with the confidence recomputed
    from the features it was scored with; with that confidence and its bar."""
    conf = confidence(attempt.signals.confidence.detail["features"], weights)
    bar = decision.answer_bar(verdicts.answer_threshold, verdicts.retry_margin, attempt.number)
    signals = dataclasses.replace(attempt.signals, confidence=dataclasses.replace(attempt.signals.confidence,
                                                                                  value=conf))
    thr = thresholds.model_copy(update={"confidence": max(verdicts.confidence_floor, bar),
                                        "dates_unstated": verdicts.dates_threshold})
    return attribute(signals, thr, retrieved=bool(attempt.passages)).failure, conf, bar


def _expected(answers, thresholds, weights, verdicts: Verdicts) -> dict[str, dict]:
    """The policy's counts (every attempt, repairs after each failure, by repair after
    LOW_CONFIDENCE) as the engine's decisions make them."""
    by_key, by_failure, after_low = Counter(), Counter(), Counter()
    for ans in answers:
        previous = None
        for a in ans.attempts:
            failure, conf, bar = _engine_diagnosis(a, thresholds, weights, verdicts)
            ok = failure == "NONE"
            if ok:  # an attempt judged a success is one the engine would return
                assert decision.acceptable(a.answer, conf, failure, bar)
            by_key[(a.strategy.key, ok)] += 1
            if a.repair is not None:
                by_failure[(previous, ok)] += 1
                if previous == "LOW_CONFIDENCE":
                    after_low[(a.repair, ok)] += 1
            previous = a.attribution.failure  # the failure recorded when the repair was chosen

    def pairs(counts: Counter) -> dict:
        return {k: (counts[(k, True)], counts[(k, False)]) for k in {k for k, _ in counts}}

    return {"strategies": pairs(by_key), "repairs": pairs(by_failure), "after_low": pairs(after_low)}


def _counted(store: MemoryStore, verdicts: Verdicts) -> dict[str, dict]:
    return {"strategies": store.strategy_counts(first_only=False, verdicts=verdicts),
            "repairs": store.repairs_by_failure(verdicts=verdicts),
            "after_low": store.repair_counts("LOW_CONFIDENCE", verdicts=verdicts)}


def test_the_stores_verdicts_are_the_engines_decisions(fake_config, built_index, hash_embedder, tmp_path) -> None:
    from self_improving_rag.engine import Engine

    # Recorded with the dates rule off, so that the attempts about 1923 are judged by their
    # confidence when they run, and by their dates when re-judged with it on.
    cfg = load_config(None, fake_overrides(tmp_path) + [
        "loop.answer_threshold=0.75", "loop.retry_margin=0.05", "policy.stop_below=0", "thresholds.dates_unstated=1.0"])
    fitted = {**DEFAULT_WEIGHTS, "bias": DEFAULT_WEIGHTS["bias"] + 0.5, "faithfulness": 2.0, "answer_words": -0.8,
              "question_fit": 0.3, "question_prior": 0.2, "agreement": 1.5, "explanation": -1.0,
              "dates_unstated": -0.5}
    doubting = {**DEFAULT_WEIGHTS, "bias": -10.0}
    with MemoryStore(tmp_path / "m.db") as store:
        engine = Engine(cfg, embedder=hash_embedder, generator=_generator(), memory=store)
        try:
            answers = []
            for question in REPLIES:
                answers.append(engine.ask(question))
                attempts = [a for ans in answers for a in ans.attempts]
                # The engine's own verdicts (its weights and bars) say what it recorded.
                own = engine.policy.verdicts
                assert own.weights is None and engine._scorer.weights is None  # the default weights
                recorded = Counter((a.strategy.key, a.attribution.failure == "NONE") for a in attempts)
                assert _counted(store, own)["strategies"] == {
                    k: (recorded[(k, True)], recorded[(k, False)]) for k, _ in recorded}
                # Other weights, bars, floors and dates thresholds: bars at the median confidence
                # of the attempts, so that some pass and some do not.
                for weights in (None, fitted):
                    median = statistics.median(confidence(a.signals.confidence.detail["features"], weights)
                                               for a in attempts)
                    own_fit = {engine.corpus: weights or DEFAULT_WEIGHTS}  # the corpus's own fit wins
                    for verdicts in (Verdicts(weights, median, 0.05, 0.0, 1.0),
                                     Verdicts(weights, median - 0.2, 0.1, median, 0.0),
                                     Verdicts(doubting, median, 0.0, 0.0, 0.5, own_fit)):
                        assert _counted(store, verdicts) == _expected(answers, cfg.thresholds, weights, verdicts), (
                            question, verdicts)
        finally:
            engine.close()
    failures = Counter(a.attribution.failure for ans in answers for a in ans.attempts)
    assert {"NONE", "WEAK_RETRIEVAL", "MISSED_ANSWER"} <= set(failures)  # every kind was recorded
    assert sum(1 for ans in answers for a in ans.attempts if a.repair) >= 3
