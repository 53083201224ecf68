"""Metrics of a confidence: how well it ranks answers (AUROC with its bootstrap interval,
risk-coverage, accuracy at a coverage) and how well it is calibrated (reliability bins, ECE and
its noise floor); and percentiles of a list of values.

Every function is deterministic and side-effect free. A value that is undefined for
the given input (no denominator, a single class, an empty list) is ``None`` -- never a
silent 0.0 -- and the dict-returning functions say why under ``"notes"``. Bad arguments
(mismatched lengths, confidences outside [0, 1]) raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..confidence import bin_index
from .answer_metrics import _as_bools

__all__ = [
    "risk_coverage",
    "accuracy_at_coverage",
    "expected_calibration_error",
    "ece_noise_floor",
    "reliability_bins",
    "auroc",
    "auroc_interval",
    "percentiles",
]

# --------------------------------------------------------------------------- selective prediction


def _check_conf_correct(confidences: Sequence[float], correct: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    if len(confidences) != len(correct):
        raise ValueError(f"confidences has {len(confidences)} items but correct has {len(correct)}")
    conf = np.asarray(confidences, dtype=float).reshape(-1)
    if conf.size and not np.all(np.isfinite(conf)):
        raise ValueError("confidences must be finite numbers (use None-filtering before scoring)")
    corr = np.asarray(correct, dtype=float).reshape(-1)
    if corr.size and (np.any(corr < 0) or np.any(corr > 1) or not np.all(np.isfinite(corr))):
        raise ValueError("correct must hold values in [0, 1] (booleans, 0/1, or graded scores)")
    return conf, corr


def _sorted_desc(conf: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Stable sort on -conf: ties keep input order, so results are deterministic.
    order = np.argsort(-conf, kind="stable")
    return conf[order], corr[order]


def risk_coverage(
    confidences: Sequence[float], correct: Sequence[Any], coverage: float = 0.8
) -> dict[str, Any]:
    """Risk-coverage curve of answering only the most confident items.

    Items are sorted by confidence, highest first. Answering the top k of n gives
    coverage k/n and selective risk 1 - mean(correct[:k]). Items with equal confidence
    cannot be separated by a threshold, so the curve has one point per distinct
    confidence (at the end of each tie group), and every k inside a group takes that
    group's risk:

      AURC = (1/n) Σ_k risk(k)  =  Σ_groups (|group| / n) · risk(end of group).

    ``e_aurc`` = AURC − AURC of the ideal order (all correct items first), the excess
    risk due to ranking alone. ``correct`` may be graded in [0, 1] (e.g. token F1).
    Returns ``curve`` (list of {threshold, coverage, risk}), ``aurc``, ``e_aurc``,
    ``accuracy_at_coverage`` (see :func:`accuracy_at_coverage`), ``coverage_target``,
    ``n`` and ``notes``; empty input gives ``None`` values with a note.
    """
    conf, corr = _check_conf_correct(confidences, correct)
    n = conf.size
    if n == 0:
        return {
            "curve": [],
            "aurc": None,
            "e_aurc": None,
            "accuracy_at_coverage": None,
            "coverage_target": coverage,
            "n": 0,
            "notes": {"aurc": "undefined: no items"},
        }
    conf_s, corr_s = _sorted_desc(conf, corr)
    cum_correct = np.cumsum(corr_s)
    k = np.arange(1, n + 1)
    # Last index of each group of equal confidences.
    group_end = np.flatnonzero(np.append(conf_s[1:] != conf_s[:-1], True))
    curve = []
    aurc = 0.0
    start = 0
    for end in group_end:
        risk = 1.0 - cum_correct[end] / k[end]
        curve.append({"threshold": float(conf_s[end]), "coverage": float(k[end] / n), "risk": float(risk)})
        aurc += (end - start + 1) / n * risk
        start = end + 1
    ideal = np.sort(corr)[::-1]
    ideal_aurc = float(np.mean(1.0 - np.cumsum(ideal) / k))
    return {
        "curve": curve,
        "aurc": float(aurc),
        "e_aurc": float(aurc - ideal_aurc),
        "accuracy_at_coverage": accuracy_at_coverage(conf, corr, coverage),
        "coverage_target": coverage,
        "n": n,
        "notes": {},
    }


def accuracy_at_coverage(confidences: Sequence[float], correct: Sequence[Any], coverage: float = 0.8) -> float | None:
    """Mean correctness of the ceil(coverage · n) most confident items.

    Ties at the cut-off are broken by input order. ``None`` for empty input.
    """
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    conf, corr = _check_conf_correct(confidences, correct)
    if conf.size == 0:
        return None
    _, corr_s = _sorted_desc(conf, corr)
    # The small tolerance keeps 0.8 * 10 from rounding up to 9 via 8.000000000000002.
    k = max(1, math.ceil(coverage * conf.size - 1e-9))
    return float(np.mean(corr_s[:k]))


def _check_bins(conf: np.ndarray, n_bins: int) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if conf.size and (np.any(conf < 0) or np.any(conf > 1)):
        raise ValueError("confidences must lie in [0, 1] for calibration metrics")


def reliability_bins(confidences: Sequence[float], correct: Sequence[Any], n_bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width reliability diagram on [0, 1].

    Bin b covers [b/n_bins, (b+1)/n_bins) (the last bin includes 1.0). Each bin reports
    ``lo``, ``hi``, ``count``, ``mean_confidence``, ``accuracy`` (mean correctness) and
    ``gap`` = accuracy − mean_confidence; the three means are ``None`` for an empty bin.
    """
    conf, corr = _check_conf_correct(confidences, correct)
    _check_bins(conf, n_bins)
    idx = bin_index(conf, n_bins)
    bins = []
    for b in range(n_bins):
        mask = idx == b
        count = int(mask.sum())
        mean_conf = float(conf[mask].mean()) if count else None
        acc = float(corr[mask].mean()) if count else None
        bins.append(
            {
                "lo": b / n_bins,
                "hi": (b + 1) / n_bins,
                "count": count,
                "mean_confidence": mean_conf,
                "accuracy": acc,
                "gap": None if mean_conf is None or acc is None else acc - mean_conf,
            }
        )
    return bins


def expected_calibration_error(
    confidences: Sequence[float], correct: Sequence[Any], n_bins: int = 10
) -> float | None:
    """ECE = Σ_b (|B_b| / n) · |accuracy(B_b) − mean_confidence(B_b)| over equal-width bins.

    Bins as in :func:`reliability_bins`. ``None`` for empty input (no items to average).
    """
    bins = reliability_bins(confidences, correct, n_bins)
    n = sum(b["count"] for b in bins)
    if n == 0:
        return None
    return float(sum(b["count"] / n * abs(b["gap"]) for b in bins if b["count"]))


def ece_noise_floor(confidences: Sequence[float], n_bins: int = 10, draws: int = 500, seed: int = 0) -> float | None:
    """The ECE that perfectly calibrated confidences would show on this few labels.

    Labels drawn as y_j ~ Bernoulli(p_j) from the confidences themselves (so they are calibrated
    by construction), ECE measured as :func:`expected_calibration_error`, averaged over ``draws``
    seeded draws. A measured ECE near this floor says the labels are too few to tell, not that
    the confidences are off: with 22 labels spread over [0.05, 0.95] the floor is about 0.21,
    with 200 about 0.07. ``None`` for no confidences.
    """
    conf = np.asarray(confidences, dtype=float)
    if conf.size == 0:
        return None
    _check_bins(conf, n_bins)
    rng = np.random.default_rng(seed)
    idx = bin_index(conf, n_bins)
    sums = np.bincount(idx, weights=conf, minlength=n_bins)
    total = 0.0
    for _ in range(draws):
        y = (rng.random(conf.size) < conf).astype(float)
        hits = np.bincount(idx, weights=y, minlength=n_bins)
        total += float(np.abs(hits - sums).sum()) / conf.size
    return total / draws


# --------------------------------------------------------------------------- ranking quality


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # the last rank of each distinct value
    return ((ends - counts + 1 + ends) / 2.0)[inverse.reshape(-1)]  # mean of ranks start .. end


def auroc(scores: Sequence[float], labels: Sequence[Any]) -> float | None:
    """Area under the ROC curve by the Mann-Whitney statistic.

    AUROC = (R₊ − n₊(n₊ + 1)/2) / (n₊ · n₋), where R₊ is the sum of the (tie-averaged)
    ranks of the positive items' scores: the probability that a random positive scores
    above a random negative, ties counting one half. ``None`` when only one class occurs.
    """
    if len(scores) != len(labels):
        raise ValueError(f"scores has {len(scores)} items but labels has {len(labels)}")
    s = np.asarray(scores, dtype=float).reshape(-1)
    if s.size and not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite numbers")
    return _mann_whitney(s, np.asarray(_as_bools("labels", labels), dtype=bool))


def _mann_whitney(s: np.ndarray, y: np.ndarray) -> float | None:
    """AUROC of checked scores ``s`` for boolean labels ``y``; None with one class only."""
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _average_ranks(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


#: Resamples :func:`auroc_interval` draws by default: enough that the interval's ends move by
#: about 0.005 from one seed to another on a few hundred labels, in well under a second.
INTERVAL_RESAMPLES = 1000

#: Groups (questions) with a right answer, and groups with a wrong one, that :func:`auroc_interval`
#: needs: below that the draws cannot show how the ranking varies.
INTERVAL_MIN_GROUPS = 5


def auroc_interval(scores: Sequence[float], labels: Sequence[Any], groups: Sequence[Any] | None = None,
                   level: float = 0.95, resamples: int = INTERVAL_RESAMPLES, seed: int = 0) -> dict[str, Any] | None:
    """A bootstrap interval for :func:`auroc`: how far it could move on other labels like these.

    The groups (``groups``: e.g. the question each row answers; default: every row its own) are
    drawn with replacement, as many as there are, ``resamples`` times (seeded by ``seed``, so the
    interval is repeatable); each draw takes all rows of the groups drawn, and its AUROC is
    computed. A draw with one class only has no AUROC and is left out. The interval is the middle
    ``level`` share of the draws' AUROCs (percentile method): ``{"low", "high", "level",
    "resamples"}``, ``resamples`` being the draws that had both classes. Rows of one group are
    drawn together because they are not independent evidence: one question answered five times
    is one question, and counting it five times would make the interval too narrow.

    ``None`` when AUROC itself is undefined (one class), when fewer than
    :data:`INTERVAL_MIN_GROUPS` groups hold a right row or fewer hold a wrong one, or when fewer
    than half of the draws had both classes. On so few of one kind the draws repeat the same
    handful of rows: three answers ranked perfectly would give 1.00–1.00, a certainty they do not
    give.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    if not (isinstance(resamples, int) and resamples >= 1):
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if auroc(scores, labels) is None:  # also checks lengths, finiteness and labels
        return None
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(_as_bools("labels", labels), dtype=bool)
    groups = list(range(s.size)) if groups is None else list(groups)
    if len(groups) != s.size:
        raise ValueError(f"groups has {len(groups)} items but scores has {s.size}")
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    index = [np.asarray(m) for m in members.values()]
    if min(sum(bool(y[m].any()) for m in index), sum(bool((~y[m]).any()) for m in index)) < INTERVAL_MIN_GROUPS:
        return None
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        rows = np.concatenate([index[k] for k in rng.integers(0, len(index), len(index))])
        value = _mann_whitney(s[rows], y[rows])
        if value is not None:
            values.append(value)
    if 2 * len(values) < resamples:
        return None
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return {"low": float(low), "high": float(high), "level": float(level), "resamples": len(values)}


def percentiles(values: Sequence[float], ps: Sequence[float] = (50, 95)) -> dict[str, float | None]:
    """Percentiles with linear interpolation between order statistics.

    Keys are ``"p50"``, ``"p95"``, ... (``"p99.9"`` for fractional p). All values are
    ``None`` for empty input.
    """
    for p in ps:
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {p}")
    v = np.asarray(values, dtype=float).reshape(-1)
    if v.size and not np.all(np.isfinite(v)):
        raise ValueError("values must be finite numbers")
    out: dict[str, float | None] = {}
    for p in ps:
        key = f"p{int(p)}" if float(p).is_integer() else f"p{p}"
        out[key] = float(np.percentile(v, p)) if v.size else None
    return out
