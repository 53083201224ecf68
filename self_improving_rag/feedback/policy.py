"""Memory-biased choice of the first strategy and of the order of repairs.

On success/failure counts from the memory store. Under ``policy.method: greedy`` (the
default) each candidate first strategy of a query class is scored by the mean of its posterior
Beta(κ·m + successes, κ·(1 − m) + failures) and the best wins, except for a seeded share
``policy.explore`` of questions, which draw from the posteriors as ``thompson`` does for every
question. Here κ = :data:`PRIOR_STRENGTH` and m is the pooled success rate of the class's
other non-default strategies, capped at the default's own rate: an unproven alternative starts where
alternatives have tended to land, not at a coin flip, so one lucky success among many failed
alternatives cannot displace the default's long record, while an alternative with a record of
its own can. The default carries one extra pseudo-success, so it wins ties on thin evidence.
The catalogue order is the repairs' prior. ``switch_chunker`` tries the other chunkers in the
fixed order section, semantic, fixed (memory does not rank them: see :meth:`StrategyPolicy.repair`),
those no attempt at the question has read first, skipping any strategy already tried.
Sampling uses a generator seeded from the config seed and the question, so runs repeat.

Every attempt in memory counts (a strategy that succeeded as a repair becomes a candidate first
choice for its query class), judged by the confidence weights and answer bars in use now, not by
the diagnosis stored when it ran (after a calibration fit those were made by another confidence
model: docs/memory.md). A label counts only through the fit it gives.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import PolicyConfig
from ..memory.verdicts import Verdicts
from ..query import QueryFeatures
from ..types import Strategy
from .repairs import CATALOGUE, apply_repair, other_chunkers

#: The most a repair's place in its failure's catalogue adds to its score (the first entry gets all
#: of it, the last 1/len of it), divided by 1 + its attempts: a tie-breaker between repairs with
#: no or equal records. At 0.5 (its earlier value) an untried first entry scored 1.0 under
#: greedy, above any record a repair could show.
CATALOGUE_PRIOR = 0.1
#: Counted attempts of a query class before memory overrides the configured strategy.
MIN_HISTORY = 3
#: κ, the pseudo-attempts of the first-strategy prior (greedy's posterior mean and Thompson's draw):
#: every strategy of a query class starts at Beta(κ·m, κ·(1 − m)), so one lucky success of a rarely
#: tried strategy does not outweigh a long record (0: Beta(1, 1)).
PRIOR_STRENGTH = 4.0
#: k: a record with fewer than this many repairs is shrunk toward the level above it (stop rule,
#: see :meth:`StrategyPolicy.futile`), and another corpus's record counts as at most this many
#: attempts per strategy or repair (see :meth:`StrategyPolicy._own_or_all`).
STOP_MIN_EVIDENCE = 20
#: The seeded share of questions that retry although memory says the repairs are futile, so the
#: record that stopped the loop can still change.
STOP_EXPLORE = 0.1


@dataclass(frozen=True)
class StopEvidence:
    """Why the loop stops retrying: ``successes`` of ``repairs`` after ``failure``, and, when
    that record was too short to decide alone, the record of repairs after any failure it was
    shrunk toward (``pooled``: successes, repairs)."""

    failure: str
    successes: int
    repairs: int
    pooled: tuple[int, int] | None = None
    #: Where the record comes from, said after it ("on this index" when the policy reads one
    #: corpus's record; empty when it reads every outcome).
    scope: str = ""

    @property
    def note(self) -> str:
        where = f" {self.scope}" if self.scope else ""
        if self.repairs == 0 and self.pooled is not None:
            return (f"no retry: memory holds no repair after {self.failure}{where} yet, and repairs after any "
                    f"failure worked {self.pooled[0]} time(s) in {self.pooled[1]}")
        text = (f"no retry: memory shows repairs after {self.failure}{where} worked {self.successes} time(s) "
                f"in {self.repairs}")
        if self.pooled is not None:
            text += f", and repairs after any failure {self.pooled[0]} time(s) in {self.pooled[1]}"
        return text


class StrategyPolicy:
    """Chooses strategies from memory counts; falls back to the default when memory is empty."""

    def __init__(self, config: PolicyConfig, default: Strategy, memory=None,
                 available_chunkers: tuple[str, ...] = ("fixed", "section", "semantic"),
                 verdicts: Verdicts | None = None, corpus: str | None = None) -> None:
        self.config = config
        self.default = default
        self.memory = memory
        self.available = available_chunkers
        # The corpus (index folder) the questions are answered from: a memory store serving several
        # learns for each from its own record (see _own_or_all); None reads every outcome alike.
        self.corpus = corpus
        # How memory's attempts are judged: by today's confidence model (None: by the diagnosis
        # stored with them, as for a policy made without an engine).
        self.verdicts = verdicts

    def _judged(self) -> dict:
        return {"verdicts": self.verdicts}

    def _own_or_all(self, count: Callable[..., dict[str, tuple[int, int]]], *args: Any,
                    **kw: Any) -> dict[str, tuple[float, float]]:
        """``count(*args, **kw)`` for this corpus, its own counts plus the other corpora's shrunk
        to at most k = :data:`STOP_MIN_EVIDENCE` attempts per key, in proportion: what works
        depends on the documents, so a corpus's own record decides once it has one, while a long
        record elsewhere still guides it before (a few of its own failures must not outweigh
        hundreds of successes elsewhere, nor those hundreds drown its own). Without a corpus,
        every outcome counts alike."""
        everywhere = count(*args, **kw)
        if self.corpus is None:
            return everywhere
        own = count(*args, **kw, corpus=self.corpus)
        k = max(1, STOP_MIN_EVIDENCE)
        out: dict[str, tuple[float, float]] = {}
        for key in everywhere.keys() | own.keys():
            s_own, f_own = own.get(key, (0, 0))
            s_all, f_all = everywhere.get(key, (0, 0))
            s_else, f_else = s_all - s_own, f_all - f_own
            shrink = min(1.0, k / (s_else + f_else)) if s_else + f_else else 0.0
            out[key] = (s_own + shrink * s_else, f_own + shrink * f_else)
        return out

    def _rng(self, question: str, salt: str) -> np.random.Generator:
        h = hashlib.sha256(f"{self.config.seed}\x00{salt}\x00{question}".encode()).digest()
        return np.random.default_rng(int.from_bytes(h[:8], "little"))

    def _greedy(self, question: str, salt: str) -> bool:
        """Whether this choice takes the best posterior mean: under ``greedy``, except for a seeded
        share ``explore`` of questions, which sample as Thompson sampling does."""
        return self.config.method == "greedy" and self._rng(question, salt).random() >= self.config.explore

    def _score(self, rng: np.random.Generator, s: float, f: float, n_total: int,
               prior: tuple[float, float] = (1.0, 1.0), mean: bool = False) -> float:
        if mean:  # greedy: the posterior mean
            return (prior[0] + s) / (prior[0] + prior[1] + s + f)
        if self.config.method == "ucb":
            n = s + f
            if n == 0:
                return 0.5 + math.sqrt(2 * math.log(max(2, n_total)))
            return s / n + math.sqrt(2 * math.log(max(2, n_total)) / n)
        return float(rng.beta(prior[0] + s, prior[1] + f))

    def _prior(self, counts: dict[str, tuple[int, int]], key: str) -> tuple[float, float]:
        """Beta(κ·m, κ·(1 − m)) for ``key``: m = pooled success rate of the other non-default
        strategies (leaving ``key`` out, so its record is not counted twice; smoothed by one
        success and one failure), at most the default's smoothed rate. Beta(1, 1) when
        :data:`PRIOR_STRENGTH` is 0."""
        kappa = PRIOR_STRENGTH
        if kappa <= 0:
            return (1.0, 1.0)
        alt = [c for k, c in counts.items() if k not in (self.default.key, key)]
        s = sum(c[0] for c in alt)
        n = sum(c[0] + c[1] for c in alt)
        m = (s + 1) / (n + 2)
        # The prior never rates an unproven alternative above the default's own record: to be
        # preferred, an alternative has to show it with its own successes.
        ds, df = counts.get(self.default.key, (0, 0))
        m = min(m, (ds + 1) / (ds + df + 2))
        return (kappa * m, kappa * (1 - m))

    def first(self, question: str, features: QueryFeatures) -> Strategy:
        """The first strategy for a question of this class."""
        if self.memory is None or self.config.method == "fixed" or not self.config.first_from_memory:
            return self.default
        counts = self._own_or_all(self.memory.strategy_counts, features.query_class, first_only=False,
                                  **self._judged())
        total = sum(s + f for s, f in counts.values())
        if total < MIN_HISTORY:
            return self.default
        rng = self._rng(question, "first")
        mean = self._greedy(question, "explore")
        best_key, best = self.default.key, -1.0
        known = {self.default.key: self.default}
        for key in counts:
            st = strategy_from_key(key)
            if st is not None and st.chunker in self.available:
                known[key] = st
        for key, st in known.items():
            s, f = counts.get(key, (0, 0))
            # The configured default carries one pseudo-success: it wins ties on thin evidence.
            bonus = 1 if key == self.default.key else 0
            v = self._score(rng, s + bonus, f, total, self._prior(counts, key), mean=mean)
            if v > best:
                best_key, best = key, v
        return known[best_key]

    def futile(self, failure: str, question: str = "", features: QueryFeatures | None = None) -> StopEvidence | None:
        """The evidence when memory shows that repairs after ``failure`` rarely work, so another
        attempt is not worth its time; None otherwise.

        Three levels, each shrunk toward the one above when it has fewer than
        k = :data:`STOP_MIN_EVIDENCE` repairs of its own:

        - all repairs in memory, after any failure: at least k are needed to judge anything,
          and their smoothed rate is R = (S + 1) / (N + 2);
        - the failure type over all query classes: its own smoothed rate (s + 1) / (n + 2)
          with k repairs or more, else (s + k·R) / (n + k). A failure type memory has not seen
          repaired (LOW_CONFIDENCE after the first calibration fit, say) starts from the
          store's record of repairs after other failures, not from a coin flip;
        - the question's class: its own smoothed rate with k repairs after ``failure`` or more,
          else its counts shrunk toward the failure type's rate r, (s_c + k·r) / (n_c + k), so a
          class whose few repairs worked is not stopped by the others' failures.

        Futile when the last rate is below ``policy.stop_below``. A share :data:`STOP_EXPLORE` of
        questions (seeded by the question) retries anyway, so the record can still change.
        """
        if self.memory is None or self.config.method == "fixed" or self.config.stop_below <= 0:
            return None
        k = STOP_MIN_EVIDENCE
        # This corpus's record alone: stopping is judged on evidence about these documents, never
        # on another corpus's (whose failures say nothing of what a repair does here).
        by_failure = self.memory.repairs_by_failure(**self._judged(), corpus=self.corpus)
        s_all = sum(c[0] for c in by_failure.values())
        n_all = sum(c[0] + c[1] for c in by_failure.values())
        if n_all < k:
            return None
        rate_all = (s_all + 1) / (n_all + 2)
        s, bad = by_failure.get(failure, (0, 0))
        n = s + bad
        rate = (s + 1) / (n + 2) if n >= k else (s + k * rate_all) / (n + k)
        borrowed = n < k
        if features is not None and features.query_class:
            own = self.memory.repair_counts(failure, features.query_class, **self._judged(), corpus=self.corpus)
            sc, nc = sum(c[0] for c in own.values()), sum(c[0] + c[1] for c in own.values())
            if nc >= k:
                s, n, rate, borrowed = sc, nc, (sc + 1) / (nc + 2), False
            elif nc:
                rate = (sc + k * rate) / (nc + k)
        if rate >= self.config.stop_below:
            return None
        if STOP_EXPLORE > 0 and self._rng(question, f"stop\x00{failure}").random() < STOP_EXPLORE:
            return None
        return StopEvidence(failure, s, n, (s_all, n_all) if borrowed else None,
                            "on this index" if self.corpus is not None else "")

    def repair_order(self, question: str, failure: str, features: QueryFeatures) -> list[str]:
        """Candidate repairs for a failure, best first."""
        catalogue = list(CATALOGUE.get(failure, ()))
        if not catalogue:
            return []
        if self.memory is None or self.config.method == "fixed":
            return catalogue
        counts = self._own_or_all(self.memory.repair_counts, failure, features.query_class, **self._judged())
        total = sum(s + f for s, f in counts.values())
        if total < MIN_HISTORY:
            return catalogue
        rng = self._rng(question, failure)
        mean = self._greedy(question, f"explore\x00{failure}")
        # Catalogue position is a weak prior, a tie-breaker that fades with evidence: at most 0.1,
        # so an untried repair (mean 0.5) does not outrank one that worked 6 times in 8 (0.7).
        scored = []
        for pos, name in enumerate(catalogue):
            s, f = counts.get(name, (0, 0))
            prior = CATALOGUE_PRIOR * (len(catalogue) - pos) / len(catalogue)
            scored.append((self._score(rng, s, f, total, mean=mean) + prior / (1 + s + f), -pos, name))
        return [n for *_, n in sorted(scored, reverse=True)]

    def repair(self, question: str, failure: str, strategy: Strategy, tried: set[str],
               features: QueryFeatures) -> tuple[str, Strategy] | None:
        """The next strategy for this failure that was not tried yet, with the repair's name.

        ``switch_chunker`` moves to a chunker no attempt at this question has read yet, in the
        order ``CHUNKERS`` (section, semantic, fixed), before one an attempt has read with other
        settings. Among the failure's own repairs it offers a chunker only while the question's
        attempts have read one chunker: a second switch would spend the retries on chunkers and
        never reach the failure's other repairs (``raise_top_k``, ``query_rewrite``, ...). When
        none of those is left, the general repairs offer every other chunker: from ``semantic``
        after ``section`` failed, ``fixed``, not nothing.

        The chunkers are not ranked by memory's record: a chunker other than the default is
        mostly read by repairs, after a failure, on harder questions than the default's first
        attempts, so its record would rank it below the default whatever its worth. Memory
        chooses chunkers through the first strategy (:meth:`first`) and ranks ``switch_chunker``
        among the other repairs (:meth:`repair_order`).
        """
        read = {st.chunker for key in tried if (st := strategy_from_key(key)) is not None}

        def candidates(name: str, general: bool) -> list[Strategy]:
            if name != "switch_chunker":
                nxt = apply_repair(name, strategy, self.available)
                return [nxt] if nxt is not None else []
            if not general and len(read) > 1:
                return []
            # sorted() is stable: the fixed order within the unread chunkers and within the read ones.
            return sorted(other_chunkers(strategy, self.available), key=lambda s: s.chunker in read)

        # When none of the failure's own repairs is left: any untried general repair before giving up.
        order = [(name, False) for name in self.repair_order(question, failure, features)]
        order += [(name, True) for name in ("switch_chunker", "hybrid_retriever", "raise_top_k", "neighbors")]
        for name, general in order:
            for nxt in candidates(name, general):
                if nxt.key not in tried:
                    return name, nxt
        return None


def strategy_from_key(key: str) -> Strategy | None:
    """Parse a Strategy key written by ``Strategy.key``."""
    try:
        parts = dict(p.split("=", 1) for p in key.split("|"))
        return Strategy(chunker=parts["c"], retriever=parts["r"], top_k=int(parts["k"]), rerank=parts["rr"] == "1",
                        prompt=parts["p"], neighbors=int(parts["n"]), query_rewrite=parts["q"],
                        context_budget=int(parts["b"]))
    except (KeyError, ValueError):
        return None
