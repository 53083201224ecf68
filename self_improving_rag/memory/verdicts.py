"""Today's verdict on a recorded attempt, for the policy's counts.

The diagnosis stored with an attempt was made under the confidence weights and answer bars in use
when it ran. With a :class:`Verdicts` the counts judge each attempt again as the engine would
today, through the rule's one definition: the confidence :func:`calibration.confidence` gives the
features the attempt was scored with, against the bar :func:`decision.answer_bar` sets for its
attempt number, diagnosed as :func:`decision.rediagnose` says. The counts' SQL asks that of each
row through the SQL function ``sirag_verdict`` (:class:`Judge`); the rule itself is not written in SQL.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..decision import CONFIDENCE_FAILURES, answer_bar, rediagnose
from ..evaluation.calibration import FEATURES, answer_words, confidence_function

#: The confidence features the attempts table keeps in columns of their own (every version of
#: the store recorded them there); the others are read from the features the scorer stored with
#: the attempt, so a feature added to the confidence model needs nothing here.
COLUMN_FEATURES = ("coverage", "grounding", "faithfulness", "redundancy", "refusal", "mean_logprob")

#: SQL for the features the scorer stored in an attempt's signals (a JSON object; NULL where it
#: stored none), and for whether it kept the question's tokens (see :func:`stored_features`).
FEATURES_SQL = "json_extract(a.signals_json, '$.confidence.detail.features')"
QUESTION_TOKENS_SQL = "json_type(a.signals_json, '$.confidence.detail.question_tokens') IS NOT NULL"


def stored_features(columns: Mapping[str, Any], stored: str | Mapping[str, Any] | None, question_tokens: Any,
                    answer: str | None) -> dict[str, Any]:
    """The features a recorded attempt was scored with, as the store holds them: ``columns`` (an
    attempt row's :data:`COLUMN_FEATURES`), ``stored`` (the scorer's features, JSON text or a dict;
    None for an attempt recorded before they were kept), ``question_tokens`` (whether the scorer
    kept the question's tokens) and ``answer`` (the stored answer text). A feature the attempt was
    recorded without is None (:func:`calibration.confidence` imputes it), except:

    - ``answer_words``: the value the scorer used (from the raw answer; the stored answer has
      unknown citations dropped, which can change its words), else, for attempts recorded before
      the feature existed, the stored answer's;
    - ``question_fit``: as the scorer defines it now. Values recorded by its first version, read
      from another prompt and token by token, come without the question's tokens and are left out
      (the feature is then missing, as for an attempt recorded with the check off).
    """
    if isinstance(stored, str):
        stored = json.loads(stored)
    if not isinstance(stored, Mapping):
        stored = {}
    features = {name: columns[name] if name in COLUMN_FEATURES else stored.get(name) for name in FEATURES}
    if features["answer_words"] is None:
        features["answer_words"] = answer_words(answer, bool(columns["refusal"]))
    if not question_tokens:
        features["question_fit"] = None
    return features


@dataclasses.dataclass(frozen=True)
class Verdicts:
    """Today's rule for whether a recorded attempt succeeded, for the policy's counts.

    The diagnosis stored with an attempt was made under the confidence weights in use when it
    ran. After a calibration fit those verdicts are stale: with the default weights SQuAD's first
    attempts passed their checks 88% of the time, with the weights fitted on their gold labels
    31% (docs/results.md). Counts read with a ``Verdicts`` judge every attempt whose other checks
    passed (stored NONE or LOW_CONFIDENCE) by its confidence recomputed from its stored features
    under ``weights``, against ``max(confidence_floor, min(1, answer_threshold + retry_margin ·
    (number − 1)))``, the bar below which the engine diagnoses LOW_CONFIDENCE
    (``thresholds.confidence``, ``loop.answer_threshold``, ``loop.retry_margin``). Such an attempt
    also fails when its stored ``dates_unstated`` is above ``dates_threshold``
    (``thresholds.dates_unstated``, attribution's rule 3b, which comes before the confidence):
    attempts recorded before that rule, or under another threshold, are judged by today's.
    ``corpus_weights`` maps a corpus to the weights its own fit gives (the stored fit's
    ``corpus_fits``): an outcome recorded on that corpus is judged by them, as the engine would
    judge it today; the others by ``weights``.
    """

    weights: dict[str, float] | None = None  # None: DEFAULT_WEIGHTS
    answer_threshold: float = 0.5
    retry_margin: float = 0.0
    confidence_floor: float = 0.0
    dates_threshold: float = 1.0  # 1: no attempt fails by its dates (the rule off)
    corpus_weights: dict[str, dict[str, float]] | None = None

    @functools.cached_property
    def _confidence(self) -> dict[str | None, Callable[[Mapping[str, Any]], float]]:
        # calibration.confidence under the weights of each corpus with a fit of its own, and
        # (None) the others': their weights checked once (ValueError for weights lacking a feature).
        own = self.corpus_weights or {}
        return {None: confidence_function(self.weights), **{c: confidence_function(w) for c, w in own.items()}}

    def check(self) -> None:
        """Raise ValueError for weights that lack a feature, or are not finite numbers."""
        self._confidence  # noqa: B018 (read for its check)

    def diagnose(self, failure: str, number: int, features: Mapping[str, Any], corpus: str | None = None) -> str:
        """The diagnosis the engine would give today an attempt on ``corpus`` recorded with
        ``failure`` as its ``number``-th, scored with ``features`` (see :func:`stored_features`):
        a diagnosis made before the confidence is looked at stays; WEAK_RETRIEVAL when its
        dates_unstated is above today's threshold; else NONE or LOW_CONFIDENCE as
        :func:`decision.rediagnose` says of its confidence (:func:`calibration.confidence` under the
        weights for ``corpus``) against its bar (:func:`decision.answer_bar`). A confidence that
        cannot be computed (a feature that is not a finite number) is LOW_CONFIDENCE."""
        if failure not in CONFIDENCE_FAILURES:
            return failure
        dates = features.get("dates_unstated")
        if dates is not None and dates > self.dates_threshold:
            return "WEAK_RETRIEVAL"
        scores = self._confidence
        try:
            conf = scores.get(corpus, scores[None])(features)
        except ValueError:
            return "LOW_CONFIDENCE"
        return rediagnose(failure, conf, answer_bar(self.answer_threshold, self.retry_margin, number),
                          self.confidence_floor)


#: What :class:`Judge` reads of an attempt (``a``) and its outcome (``o``), in the order the SQL
#: function ``sirag_verdict`` takes it.
VERDICT_ARGUMENTS = ("a.failure", "a.number", "o.corpus", *(f"a.{name}" for name in COLUMN_FEATURES), "a.answer",
                     FEATURES_SQL, QUESTION_TOKENS_SQL)
VERDICT_SQL = f"sirag_verdict({', '.join(VERDICT_ARGUMENTS)})"


class Judge:
    """The SQL function ``sirag_verdict`` of one connection: 1 when the attempt of a row
    (:data:`VERDICT_ARGUMENTS`) is diagnosed NONE under the :class:`Verdicts` of the count that runs
    (:meth:`judging`), else 0. The store's lock keeps counts of different threads apart."""

    def __init__(self) -> None:
        self._verdicts: Verdicts | None = None

    @contextmanager
    def judging(self, verdicts: Verdicts | None) -> Iterator[None]:
        """Judge by ``verdicts`` within (None: no row is judged). Their weights are checked here,
        so that weights lacking a feature fail before the query, not in a row of it."""
        if verdicts is not None:
            verdicts.check()
        self._verdicts = verdicts
        try:
            yield
        finally:
            self._verdicts = None

    def __call__(self, failure: str, number: int, corpus: str | None, *row: Any) -> int:
        verdicts = self._verdicts
        if verdicts is None:
            raise RuntimeError("sirag_verdict is called by the counts of MemoryStore alone")
        if failure not in CONFIDENCE_FAILURES:  # diagnosed before the confidence: no feature is read
            return 0
        *columns, answer, stored, question_tokens = row
        features = stored_features(dict(zip(COLUMN_FEATURES, columns)), stored, question_tokens, answer)
        return int(verdicts.diagnose(failure, number, features, corpus) == "NONE")


__all__ = ["COLUMN_FEATURES", "Judge", "Verdicts", "stored_features"]
