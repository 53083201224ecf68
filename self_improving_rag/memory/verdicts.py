"""The policy's counts, and today's verdict on a recorded attempt.

:class:`Counts` gives the policy its evidence: per strategy, and per repair after each failure,
how many recorded attempts succeeded and how many failed.

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
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..decision import CONFIDENCE_FAILURES, answer_bar, rediagnose
from ..confidence import FEATURES, answer_words, confidence_function
from .connection import StoreFile
from .interrupts import interruptible

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


class Counts(StoreFile):
    """The policy's counts of recorded attempts (see :meth:`strategy_counts`)."""

    def _register_functions(self, conn: sqlite3.Connection) -> None:
        super()._register_functions(conn)
        self._judge = Judge()  # the counts' sirag_verdict on this connection
        conn.create_function("sirag_verdict", len(VERDICT_ARGUMENTS), interruptible(self._judge))

    # An attempt's success: the outcome's label when this attempt is the answer that was
    # labelled (and labels are used), else, without Verdicts (:rejudge = 0), whether its
    # attribution was NONE, and with them whether today's rule diagnoses it NONE (sirag_verdict,
    # see verdicts.Judge).
    _SUCCESS = f"""CASE WHEN :use_labels AND l.label IS NOT NULL AND a.number = o.chosen_attempt
                      THEN l.label
                      WHEN NOT :rejudge THEN a.failure = 'NONE'
                      ELSE {VERDICT_SQL} END"""

    # Every repair attempt (an attempt made by a repair) with its success, its outcome's query
    # class, and the failure of the attempt before it in the same outcome (the failure the
    # repair answered).
    _REPAIRS = f"""{StoreFile._LATEST_LABEL},
            seq AS (
                SELECT repair, ok, query_class, prev_failure FROM (
                    -- Only the repairs are judged: the others are there for LAG.
                    SELECT a.repair, CASE WHEN a.repair IS NOT NULL THEN {_SUCCESS} END AS ok,
                           o.query_class,
                           LAG(a.failure) OVER (PARTITION BY a.outcome_id ORDER BY a.number) AS prev_failure
                    FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
                    LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1
                    WHERE (:corpus IS NULL OR o.corpus = :corpus)  -- here, so other corpora are never judged
                ) WHERE repair IS NOT NULL
            )"""

    def _judged_rows(self, sql: str, params: dict[str, Any], use_labels: bool,
                     verdicts: Verdicts | None) -> list[dict[str, Any]]:
        """The rows of a count whose SQL reads :attr:`_SUCCESS`, its attempts judged by ``verdicts``."""
        with self._lock, self._judge.judging(verdicts):
            return self._rows(sql, {**params, "use_labels": 1 if use_labels else 0,
                                    "rejudge": 0 if verdicts is None else 1})

    def strategy_counts(self, query_class: str | None = None, first_only: bool = True,
                        use_labels: bool = False, verdicts: Verdicts | None = None,
                        corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Attempts per strategy key: (successes, failures); success is failure == 'NONE'.

        ``first_only`` counts only each outcome's first attempt; otherwise every attempt counts,
        so a strategy that only ever ran as a repair is known too. With ``use_labels`` the
        attempt an outcome answered with counts by the outcome's latest label (gold from an
        evaluation or ``sirag feedback``) instead of its attribution: an answer that passed its
        checks but was labelled wrong is a failure. With ``verdicts`` an attempt is judged by the
        confidence weights and answer bars in use now (:class:`Verdicts`) instead of by the
        diagnosis recorded when it ran. With ``corpus``, only the outcomes answered from that
        corpus (index folder) count.
        """
        # COUNT(*) - SUM(ok): the one SUM is computed once a row, so each attempt is judged once.
        rows = self._judged_rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT a.strategy_key AS key, SUM({self._SUCCESS}) AS ok, COUNT(*) - SUM({self._SUCCESS}) AS bad
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1
            WHERE (NOT :first_only
                   OR a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id))
              AND (:qc IS NULL OR o.query_class = :qc)
              AND (:corpus IS NULL OR o.corpus = :corpus)
            GROUP BY a.strategy_key
            """,
            {"qc": query_class, "first_only": 1 if first_only else 0, "corpus": corpus}, use_labels, verdicts,
        )
        return {r["key"]: (int(r["ok"]), int(r["bad"])) for r in rows}

    def repair_counts(self, failure: str, query_class: str | None = None,
                      use_labels: bool = False, verdicts: Verdicts | None = None,
                      corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Per repair: (successes, failures) of the attempts that followed a ``failure`` attempt
        (the failure recorded when the repair was chosen).

        ``use_labels``, ``verdicts`` and ``corpus`` as in :meth:`strategy_counts`.
        """
        if not isinstance(failure, str) or not failure:
            raise ValueError(f"failure must be a non-empty str, got {failure!r}")
        rows = self._judged_rows(
            f"""
            WITH {self._REPAIRS}
            SELECT repair, SUM(ok) AS ok, SUM(NOT ok) AS bad
            FROM seq WHERE prev_failure = :failure AND (:qc IS NULL OR query_class = :qc)
            GROUP BY repair
            """,
            {"qc": query_class, "failure": failure, "corpus": corpus}, use_labels, verdicts,
        )
        return {r["repair"]: (int(r["ok"]), int(r["bad"])) for r in rows}

    def repairs_by_failure(self, use_labels: bool = False, verdicts: Verdicts | None = None,
                           corpus: str | None = None) -> dict[str, tuple[int, int]]:
        """Per failure type: (successes, failures) of all repairs that followed it, over every
        query class and repair; the stop rule's evidence for a failure type with little record of
        its own. ``use_labels``, ``verdicts`` and ``corpus`` as in :meth:`strategy_counts`."""
        rows = self._judged_rows(
            f"""
            WITH {self._REPAIRS}
            SELECT prev_failure, SUM(ok) AS ok, SUM(NOT ok) AS bad
            FROM seq WHERE prev_failure IS NOT NULL
            GROUP BY prev_failure
            """,
            {"corpus": corpus}, use_labels, verdicts,
        )
        return {r["prev_failure"]: (int(r["ok"]), int(r["bad"])) for r in rows}


__all__ = ["COLUMN_FEATURES", "Counts", "Judge", "Verdicts", "stored_features"]
