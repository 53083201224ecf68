"""How well a set of confidence weights scores labelled rows: AUROC (with its bootstrap
interval), ECE and its noise floor, and Brier score; and how a confidence bar sorts the labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..confidence import DEFAULT_WEIGHTS, _sigmoid, _weight_vector
from .confidence_metrics import auroc, auroc_interval, ece_noise_floor, expected_calibration_error
from .fitting import _design

__all__ = ["evaluate_fit", "threshold_counts"]


def evaluate_fit(
    rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], weights: Mapping[str, float] | None = None,
    corpora: Sequence[str | None] | None = None, corpus_fits: Mapping[str, Mapping[str, Any]] | None = None,
    groups: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Score ``weights`` on labelled rows: AUROC and ECE of the confidences, and Brier score.
    With ``corpora`` (each row's corpus) and ``corpus_fits`` (:func:`fit_corpora`), a row whose
    corpus has a fit of its own is scored by that fit's weights instead, as the engine would.
    With ``groups`` (each row's question), also AUROC's bootstrap interval (:func:`_scores`).

    brier = mean_j (p_j − y_j)². ``ece_floor`` is the ECE these confidences would show if they
    were perfectly calibrated, on this many labels (:func:`ece_noise_floor`): an ECE near it is
    sampling noise. AUROC is ``None`` when the labels hold one class and everything is ``None``
    for no rows; ``notes`` says why.
    """
    X, y = _design(rows, labels)
    if corpora is not None and len(corpora) != X.shape[0]:
        raise ValueError(f"corpora has {len(corpora)} items but rows has {X.shape[0]}")
    w = _weight_vector(DEFAULT_WEIGHTS if weights is None else weights)
    if X.shape[0] == 0:
        return {"auroc": None, "ece": None, "ece_floor": None, "brier": None, "n": 0,
                "notes": {"all": "undefined: no rows"}}
    p = _sigmoid(X @ w)
    if corpus_fits and corpora is None:
        raise ValueError("corpus_fits needs corpora: the corpus of each row")
    masks = _corpus_masks(corpora) if corpus_fits else {}
    for key, fit in (corpus_fits or {}).items():
        if key in masks:
            p[masks[key]] = _sigmoid(X[masks[key]] @ _weight_vector(fit["weights"]))
    return _scores(p, y, groups)


def _corpus_masks(corpora: Sequence[str | None]) -> dict[str | None, np.ndarray]:
    """For each corpus (in order of first appearance), which rows belong to it."""
    keys = np.asarray(list(corpora), dtype=object)
    return {key: keys == key for key in dict.fromkeys(corpora)}


def _scores(p: np.ndarray, y: np.ndarray, groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """AUROC, ECE, its noise floor and Brier score of confidences ``p`` for 0/1 labels ``y``; with
    ``groups`` (each row's question) also ``auroc_interval``, AUROC's 95% bootstrap interval with
    each group's rows drawn together (:func:`auroc_interval`; None where it is undefined)."""
    notes: dict[str, str] = {}
    score = auroc(p.tolist(), y.astype(bool).tolist())
    if score is None:
        notes["auroc"] = "undefined: the labels contain only one class"
    out = {
        "auroc": score,
        "ece": expected_calibration_error(p.tolist(), y.tolist()),
        "ece_floor": ece_noise_floor(p.tolist()),
        "brier": float(np.mean((p - y) ** 2)),
        "n": int(y.shape[0]),
        "notes": notes,
    }
    if groups is not None:
        out["auroc_interval"] = auroc_interval(p.tolist(), y.astype(bool).tolist(), list(groups))
    return out


def threshold_counts(confidences: Sequence[float], labels: Sequence[Any], threshold: float) -> dict[str, int]:
    """How a confidence bar sorts labelled answers: of the ``right`` ones, how many fall below
    ``threshold`` (an engine using these confidences would withhold them), and of the ``wrong``
    ones, how many reach it (it would return them)."""
    p = np.asarray(list(confidences), dtype=float)
    y = np.asarray([int(v) for v in labels])
    if y.shape != p.shape:
        raise ValueError(f"confidences has {p.size} items but labels has {y.size}")
    return {"right": int(y.sum()), "right_below": int(np.sum((y == 1) & (p < threshold))),
            "wrong": int(np.sum(y == 0)), "wrong_at_or_above": int(np.sum((y == 0) & (p >= threshold)))}
