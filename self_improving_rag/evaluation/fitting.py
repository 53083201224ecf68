"""Fitting the confidence model's weights (:mod:`self_improving_rag.confidence`) to labelled attempts.

:func:`fit_weights` is an L2-regularised logistic regression whose penalty pulls the weights
toward the priors rather than toward zero, so a few dozen labels nudge the model instead of
overturning it. :func:`fit_scaled` keeps the prior's ranking and fits only a slope and a shift of
its logit. How hard the full refit pulls (``l2``) and which of the two models to use are chosen
from the labels themselves by cross-fitting (``crossfit.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..confidence import DEFAULT_WEIGHTS, FEATURES, _as_weights, _feature_vector, _sigmoid, _weight_vector

__all__ = ["MODELS", "SCALED_RIDGE", "fit_model", "fit_scaled", "fit_weights", "scaled_params", "scaled_weights"]


def _design(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    if len(rows) != len(labels):
        raise ValueError(f"rows has {len(rows)} items but labels has {len(labels)}")
    y = []
    for v in labels:
        if isinstance(v, (bool, np.bool_)) or v in (0, 1):
            y.append(float(v))
        else:
            raise ValueError(f"labels must be 0/1 or booleans, got {v!r}")
    X = np.vstack([_feature_vector(r) for r in rows]) if rows else np.zeros((0, 1 + len(FEATURES)))
    return X, np.asarray(y, dtype=float)


def fit_weights(
    rows: Sequence[Mapping[str, Any]],
    labels: Sequence[Any],
    l2: float = 1.0,
    prior: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Refit the weights by L2-regularised logistic regression shrunk toward the prior.

    Minimises, over w = (bias, w_1, ..., w_n) with p_j = σ(x_j · w),

        J(w) = −Σ_j [y_j log p_j + (1 − y_j) log(1 − p_j)] + (l2 / 2) · ‖w − w₀‖²

    where w₀ is ``prior`` (default :data:`DEFAULT_WEIGHTS`); the bias is penalised too,
    so with no labels the result is w₀. J is strictly convex for l2 > 0 and is solved by
    Newton's method (IRLS) with step halving:
    gradient g = Xᵀ(p − y) + l2 (w − w₀), Hessian H = Xᵀ diag(p(1 − p)) X + l2 I.
    Missing features are imputed as in :func:`confidence` before fitting. A feature missing from
    every row keeps its prior weight: its imputed column is a constant, and fitting a weight to it
    would only move the bias into it, a weight that would act on real values once they appear
    (say, ``question_fit`` or ``agreement`` in a store whose answers never had them).
    """
    if not (isinstance(l2, (int, float)) and math.isfinite(l2) and l2 > 0):
        raise ValueError(f"l2 must be a positive finite number (it keeps the fit well posed), got {l2!r}")
    prior_w = _weight_vector(DEFAULT_WEIGHTS if prior is None else prior)
    X, y = _design(rows, labels)
    if X.shape[0] == 0:
        return _as_weights(prior_w)
    free = np.array([True] + [any(r.get(f) is not None for r in rows) for f in FEATURES])
    w0, X = prior_w[free], X[:, free]

    out = prior_w.copy()
    out[free] = _penalised_logistic(X, y, w0, l2)
    return _as_weights(out)


def _penalised_logistic(X: np.ndarray, y: np.ndarray, w0: np.ndarray, l2: float, f_tol: float = 1e-10,
                        step_tol: float = 1e-9) -> np.ndarray:
    """The w minimising −Σ_j [y_j log σ(x_j · w) + (1 − y_j) log(1 − σ(x_j · w))]
    + (l2 / 2)·‖w − w₀‖², by Newton's method from w₀ with step halving; stops when the objective changes by at most
    ``f_tol`` (relative) or a step by at most ``step_tol``."""

    def objective(w: np.ndarray) -> float:
        z = X @ w
        # log(1 + e^z) − y z, computed stably.
        nll = float(np.sum(np.logaddexp(0.0, z) - y * z))
        return nll + 0.5 * l2 * float(np.sum((w - w0) ** 2))

    w = w0.copy()
    f = objective(w)
    eye = np.eye(w.size)
    for _ in range(100):
        p = _sigmoid(X @ w)
        grad = X.T @ (p - y) + l2 * (w - w0)
        hess = (X * (p * (1 - p))[:, None]).T @ X + l2 * eye
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            w_new = w - t * step
            f_new = objective(w_new)
            if f_new <= f or t < 1e-10:
                break
            t *= 0.5
        converged = abs(f - f_new) <= f_tol * max(1.0, abs(f)) or np.max(np.abs(t * step)) < step_tol
        w, f = w_new, f_new
        if converged:
            break
    return w


#: The confidence models a fit chooses from (``MODEL`` in calibrate.py): ``full`` refits every weight
#: (:func:`fit_weights`); ``scaled`` keeps the default weights' ranking and fits only how their
#: score maps to a probability (:func:`fit_scaled`); ``auto`` takes the one with the lower
#: cross-fitted Brier score, ``scaled`` on a tie (:func:`choose_model`).
MODELS: tuple[str, ...] = ("auto", "full", "scaled")

#: The pull of :func:`scaled_params` toward (slope 1, shift 0): negligible against any label's
#: say, it only keeps the fit finite when the prior's score separates the labels perfectly.
SCALED_RIDGE = 1e-3


def scaled_params(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any],
                  prior: Mapping[str, float] | None = None) -> tuple[float, float]:
    """The slope a ≥ 0 and shift b of σ(a · z₀ + b), z₀ the logit that ``prior`` (default
    :data:`DEFAULT_WEIGHTS`) gives each row, that maximise the labels' likelihood, with a penalty
    of ``SCALED_RIDGE / 2 · ((a − 1)² + b²)`` (Newton's method with step halving; a slope that
    would come out negative, the prior ranking the labels backwards, is held at 0: every answer
    then gets the labels' own rate). No rows: (1, 0), the prior itself."""
    X, y = _design(rows, labels)
    if X.shape[0] == 0:
        return 1.0, 0.0
    z = X @ _weight_vector(DEFAULT_WEIGHTS if prior is None else prior)
    target = np.array([1.0, 0.0])
    a, b = _penalised_logistic(np.column_stack([z, np.ones_like(z)]), y, target, SCALED_RIDGE, 1e-12, 1e-10)
    if a < 0:
        a, b = 0.0, float(_penalised_logistic(np.ones((z.size, 1)), y, np.zeros(1), SCALED_RIDGE, 1e-12, 1e-10)[0])
    return float(a), float(b)


def fit_scaled(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any],
               prior: Mapping[str, float] | None = None) -> dict[str, float]:
    """The ``scaled`` model: ``prior``'s weights (default :data:`DEFAULT_WEIGHTS`) times the
    slope a of :func:`scaled_params`, and its bias times a plus the shift b, so that the
    confidence is σ(a · z₀ + b). Two numbers are fitted whatever the labels: the answers are
    ranked as the prior ranks them, and only how sure each rank is comes from the labels."""
    return scaled_weights(*scaled_params(rows, labels, prior), prior=prior)


def scaled_weights(slope: float, shift: float, prior: Mapping[str, float] | None = None) -> dict[str, float]:
    """``prior``'s weights (default :data:`DEFAULT_WEIGHTS`) times ``slope``, the bias plus
    ``shift``: the weights of σ(slope · z₀ + shift)."""
    w = _weight_vector(DEFAULT_WEIGHTS if prior is None else prior) * slope
    w[0] += shift
    return _as_weights(w)


def fit_model(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], model: str, l2: float | None = None,
              prior: Mapping[str, float] | None = None) -> dict[str, float]:
    """The fit of ``model``, ``"scaled"`` (:func:`fit_scaled`) or ``"full"`` (:func:`fit_weights`
    with strength ``l2``), pulled toward or scaled from ``prior``."""
    if model == "scaled":
        return fit_scaled(rows, labels, prior=prior)
    return fit_weights(rows, labels, l2=l2, prior=prior)
