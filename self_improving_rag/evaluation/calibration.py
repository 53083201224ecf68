"""The confidence model: a logistic combination of the self-evaluation signals.

    confidence = σ(bias + Σ_i w_i · x_i),   σ(z) = 1 / (1 + e^(−z))

over the features in :data:`FEATURES`. The weights start as hand-set priors
(:data:`DEFAULT_WEIGHTS`) and can be refit on labelled attempts with
:func:`fit_weights`, an L2-regularised logistic regression whose penalty pulls the
weights toward the priors rather than toward zero, so a few dozen labels nudge the
model instead of overturning it. How hard it pulls (``l2``) is chosen from the labels
themselves by :func:`choose_l2`: the strength whose cross-fitted Brier score is lowest.

Feature scales: ``coverage``, ``grounding``, ``faithfulness`` and ``redundancy`` are
in [0, 1]; ``mean_logprob`` is the mean token log-probability of the answer (≤ 0;
about −0.1 for a fluent, certain answer and −1.5 for a guess), clipped below at
:data:`LOGPROB_FLOOR`; ``refusal`` is 1.0 for a refusal, else 0.0; ``answer_words`` is
log(1 + words in the answer without its citations), None for a refusal (the prompts ask for
an answer in a few words: a long answer is usually a sentence copied in place of an answer);
``question_fit`` is the lowest log-probability of a content word of the question, read after
the passages and the answer, among the words the answer does not repeat
(≤ 0, clipped below at :data:`QUESTION_FIT_FLOOR`; the engine no longer reads it, which cost
~0.5 s per attempt, so it is None but in the answers of older stores);
``question_prior`` is the same minimum read where the answer prompt holds the question, after
the passages and before any answer (read while the prompt is evaluated: almost free; None for a
refusal, for a backend that cannot score its prompt, or when
the answer repeats every content word); ``dates_unstated`` is the share of the question's
dates (years, decades, centuries, spans) that the answer's evidence does not state, in [0, 1]
(None for a question without a date, a refusal, or no passages); ``explanation`` is 1.0 when
the question asks why, or how followed by a verb ("how did", not "how many"), else 0.0;
``agreement`` is the share of replies sampled from the answer prompt that agree with the answer,
in [0, 1] (the engine no longer samples replies, which cost a median 15% of the generator's time
for no better confidence, so it is None but in the answers of older stores).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from self_improving_rag.evaluation.metrics import auroc, auroc_interval, ece_noise_floor, expected_calibration_error

__all__ = [
    "FEATURES",
    "ADDED_FEATURES",
    "DEFAULT_WEIGHTS",
    "NEUTRAL_VALUES",
    "LOGPROB_FLOOR",
    "QUESTION_FIT_FLOOR",
    "QUESTION_FEATURES",
    "confidence",
    "confidence_function",
    "fit_weights",
    "fit_scaled",
    "fit_model",
    "scaled_params",
    "scaled_weights",
    "choose_model",
    "choose_model_and_l2",
    "MODELS",
    "evaluate_fit",
    "cross_fit",
    "choose_l2",
    "fit_corpora",
    "own_fit_corpora",
    "L2_GRID",
    "answer_words",
    "complete_weights",
    "sigmoid",
]

FEATURES: tuple[str, ...] = ("coverage", "grounding", "faithfulness", "redundancy", "mean_logprob", "refusal",
                             "answer_words", "question_fit", "question_prior", "dates_unstated", "explanation",
                             "agreement")

#: Features added after weights could already be stored: a stored fit without one of them
#: gives it this weight (0: that fit did not use it), so old fits keep their meaning.
ADDED_FEATURES: dict[str, float] = {"answer_words": 0.0, "question_fit": 0.0, "question_prior": 0.0,
                                    "dates_unstated": 0.0, "explanation": 0.0, "agreement": 0.0}

#: Value used for a feature that is missing (``None``): a middling value that neither
#: argues for nor against the answer. ``refusal`` is imputed as "not a refusal", since
#: the engine always knows whether it refused and a missing flag means none was raised.
NEUTRAL_VALUES: dict[str, float] = {
    "coverage": 0.5,
    "grounding": 0.5,
    "faithfulness": 0.5,
    "redundancy": 0.3,
    "mean_logprob": -0.6,
    "refusal": 0.0,
    "answer_words": math.log1p(4),  # a four-word answer
    "question_fit": -6.3,  # the median on SQuAD answers (docs/results.md)
    "question_prior": -6.0,  # the median on SQuAD answers (docs/results.md)
    "dates_unstated": 0.0,  # a question without a date: nothing unstated
    "explanation": 0.0,
    "agreement": 0.5,  # half the samples agree: neither for nor against
}

#: Log-probabilities below this are clipped: past it the answer is noise either way, and
#: an unbounded feature would let a single extreme value dominate a fit.
LOGPROB_FLOOR = -5.0

#: ``question_fit`` below this is clipped: one token's log-probability can be far lower than any
#: answer's mean, and past −20 (p < 2e-9) the question is unexpected either way.
QUESTION_FIT_FLOOR = -20.0

#: The readings of the question: log-probabilities clipped at :data:`QUESTION_FIT_FLOOR`.
QUESTION_FEATURES: tuple[str, ...] = ("question_fit", "question_prior")

_PRIOR_SLOPES: dict[str, float] = {
    "coverage": 1.5,  # the passages address the question
    "grounding": 1.0,  # the retrieved passages are relevant to the question
    "faithfulness": 4.0,  # the answer's claims are supported by the passages: the strongest signal
    "redundancy": -0.5,  # repetitive context crowds out evidence: a slight penalty
    "mean_logprob": 1.5,  # from −1.5 to −0.1 adds 2.1 to the logit
    "refusal": -3.0,  # a refusal is rarely a correct answer to score with confidence
    "answer_words": -0.5,  # 25 words instead of 4 take 0.8 off the logit
    # 0 until fitted: its scale belongs to the model that reads the question back, so only a fit
    # on labelled answers gives it a weight; the default confidence does not use it.
    "question_fit": 0.0,
    "question_prior": 0.0,  # likewise
    # 0 until fitted: both mark answers that were mostly wrong in the evaluations (a date the
    # evidence does not state; a why/how question), but how much that weighs against the other
    # signals is for a fit on labelled answers to say (docs/results.md).
    "dates_unstated": 0.0,
    "explanation": 0.0,
    # 0 until fitted: off by default (sampling costs generator time), and how much it weighs
    # against the other signals is for a fit on labelled answers that recorded it to say.
    "agreement": 0.0,
}

#: Hand-set priors. The bias is chosen so that an attempt whose every feature is at its
#: neutral value gets confidence exactly 0.5: bias = −Σ_i w_i · neutral_i ≈ −1.395.
#: Then a strong four-word answer (coverage, grounding, faithfulness 0.9, redundancy 0.2,
#: mean_logprob −0.1) scores σ(3.4) ≈ 0.97, a weak one (0.3, 0.3, 0.3, 0.5, −1.5)
#: scores σ(−2.75) ≈ 0.06, and a neutral refusal σ(−3.0) ≈ 0.05.
DEFAULT_WEIGHTS: dict[str, float] = {
    "bias": -sum(_PRIOR_SLOPES[f] * NEUTRAL_VALUES[f] for f in FEATURES),
    **_PRIOR_SLOPES,
}


def _sigmoid(z: np.ndarray | float) -> np.ndarray:
    z = np.asarray(z, dtype=float)
    # Split by sign so that exp never overflows.
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def sigmoid(z: float | None) -> float | None:
    """σ(z) for one number, as :func:`_sigmoid` computes it (for SQL, row by row, without
    numpy's per-call cost); None for None or NaN."""
    if z is None or math.isnan(z):
        return None
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    ez = math.exp(z)
    return ez / (1.0 + ez)


def _feature_vector(features: Mapping[str, Any]) -> np.ndarray:
    """The design row [1, x_1, ..., x_n] with imputation and clipping; unknown keys ignored."""
    row = [1.0]
    for name in FEATURES:
        value = features.get(name)
        if value is None:
            x = NEUTRAL_VALUES[name]
        else:
            if isinstance(value, str):
                raise ValueError(f"feature {name!r} must be a number or None, got {value!r}")
            x = float(value)
            if not math.isfinite(x):
                raise ValueError(f"feature {name!r} must be finite or None, got {value!r}")
            if name == "mean_logprob":
                x = min(max(x, LOGPROB_FLOOR), 0.0)
            elif name in QUESTION_FEATURES:
                x = min(max(x, QUESTION_FIT_FLOOR), 0.0)
        row.append(x)
    return np.asarray(row, dtype=float)


def answer_words(answer: str | None, refused: bool = False) -> float | None:
    """The ``answer_words`` feature: log(1 + words without citations); None for a refusal."""
    if refused or answer is None:
        return None
    from self_improving_rag.generation.prompts import strip_citations

    return math.log1p(len(strip_citations(answer).split()))


def _weight_vector(weights: Mapping[str, float]) -> np.ndarray:
    weights = {**ADDED_FEATURES, **weights}
    missing = [k for k in ("bias", *FEATURES) if k not in weights]
    if missing:
        raise ValueError(f"weights lack {', '.join(missing)}; start from DEFAULT_WEIGHTS")
    w = np.asarray([float(weights[k]) for k in ("bias", *FEATURES)], dtype=float)
    if not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite numbers")
    return w


def complete_weights(weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """``weights`` (default :data:`DEFAULT_WEIGHTS`) with every feature's weight, an
    :data:`ADDED_FEATURES` one filled in; ValueError if one is missing or not finite."""
    return _as_weights(_weight_vector(DEFAULT_WEIGHTS if weights is None else weights))


def _as_weights(w: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(("bias", *FEATURES), w)}


def confidence(features: Mapping[str, float | None], weights: Mapping[str, float] | None = None) -> float:
    """σ(bias + Σ_i w_i · x_i); a ``None`` feature takes its :data:`NEUTRAL_VALUES` entry.

    ``weights`` defaults to :data:`DEFAULT_WEIGHTS`; keys of ``features`` that are not in
    :data:`FEATURES` are ignored (so a whole ``Signals.values()`` dict can be passed).
    """
    return confidence_function(weights)(features)


def confidence_function(weights: Mapping[str, float] | None = None) -> Callable[[Mapping[str, float | None]], float]:
    """:func:`confidence` under ``weights``, the weights checked (ValueError) and read once: for
    scoring many attempts with one set of weights, as the memory store's re-judging does."""
    w = _weight_vector(DEFAULT_WEIGHTS if weights is None else weights)

    def score(features: Mapping[str, float | None]) -> float:
        return float(_sigmoid(_feature_vector(features) @ w))

    return score


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


#: The penalty strengths :func:`choose_l2` tries, weakest first. Weaker than 0.01 the fit is
#: nearly unpenalised (a feature that one class never shows would run off); above 10 it barely
#: leaves the priors.
L2_GRID: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)

#: The penalty strength when the labels are too few to choose one (fewer than two groups, or
#: one class, in a fold's training rows).
DEFAULT_L2 = 1.0

#: Folds of the choice made inside each training fold: with ``folds`` of its own, a cross-fit in
#: 20 folds would make 20 × 20 × 7 fits.
INNER_FOLDS = 5


def _is_strength(v: Any) -> bool:
    """Whether ``v`` is a penalty strength: a positive finite number, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def choose_l2(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], groups: Sequence[Any] | None = None,
              folds: int = 5, seed: int = 0, grid: Sequence[float] = L2_GRID,
              prior: "Prior" = None) -> float:
    """The penalty strength of :func:`fit_weights` for these labels: the value of ``grid`` whose
    cross-fit (:func:`cross_fit`, ``folds`` folds seeded by ``seed``, ``groups`` kept whole) has
    the lowest Brier score, the stronger one on a tie (within 1e-9). Labels that agree with the
    priors then keep the fit near them, and many that disagree let it move: on SQuAD's 96
    labelled answers of one half a strength of 0.03–0.1 ranks answers better than 1
    (docs/results.md).

    ``prior`` is the weights the fits are pulled toward (default :data:`DEFAULT_WEIGHTS`), or,
    as :func:`cross_fit` takes it, a callable giving each fold's from its training row indices.

    Raises ValueError for an empty grid or a value that is not a positive finite number, and, as
    :func:`cross_fit` does, for rows that cannot be split."""
    grid = list(grid)
    if not grid or not all(_is_strength(v) for v in grid):
        raise ValueError(f"grid must hold positive finite numbers, got {grid!r}")
    return _best_l2(rows, labels, groups, folds, seed, grid, prior)[0]


def _best_l2(rows, labels, groups, folds: int, seed: int, grid: Sequence[float] = L2_GRID,
             prior: "Prior" = None) -> tuple[float, float]:
    """:func:`choose_l2`'s strength, with its cross-fitted Brier score."""
    best_l2, best = DEFAULT_L2, math.inf
    for l2 in sorted(grid, reverse=True):  # strongest first, so a tie keeps the stronger pull
        brier = cross_fit(rows, labels, seed=seed, l2=l2, folds=folds, groups=groups, prior=prior)["after"]["brier"]
        if brier < best - 1e-9:
            best_l2, best = float(l2), brier
    return best_l2, best


def choose_model(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], groups: Sequence[Any] | None = None,
                 folds: int = 5, seed: int = 0, l2: float | str = "auto",
                 prior: Mapping[str, float] | None = None) -> str:
    """``"scaled"`` or ``"full"`` for these labels (the model ``"auto"``).

    Both models are cross-fitted on the labels (:func:`cross_fit`, ``folds`` folds seeded by
    ``seed``, ``groups`` kept whole), and the one with the lower held-out Brier score wins,
    ``scaled`` on a tie (within 1e-12). The full refit is fitted with penalty ``l2``; with
    "auto", its score is that of :func:`choose_l2`'s strength on the same folds, the lowest of
    the grid's (which favours it a little: the strength is chosen on the rows it is scored on, but
    the choice costs no more fits than the penalty's own). On 109 labelled answers to the
    project's Holmes questions the default weights rank answers better than any refit of them, and
    ``scaled`` was chosen; on SQuAD, whose answers they rank at 0.52–0.57, ``full`` was
    (docs/results.md). A rule that took ``full`` only when it won by more than one
    standard error chose ``scaled`` too often on SQuAD's 91 labels of one half. Labels of one
    kind, or all on one question, give ``scaled``: there is nothing to compare on."""
    return choose_model_and_l2(rows, labels, groups, folds, seed, l2, prior)[0]


def choose_model_and_l2(rows, labels, groups, folds: int, seed: int, l2: float | str,
                         prior: Mapping[str, float] | None = None) -> tuple[str, float | None]:
    """:func:`choose_model`'s model, with the full refit's strength when it is ``full`` (``l2``,
    or the strength chosen for it), None when it is ``scaled``. Raises ValueError for an ``l2``
    that is neither "auto" nor a positive finite number, as :func:`cross_fit` does."""
    if not (l2 == "auto" or _is_strength(l2)):
        raise ValueError(f"l2 must be a positive finite number or 'auto', got {l2!r}")
    X, y = _design(rows, labels)
    groups = list(range(y.size)) if groups is None else list(groups)
    if len(groups) != y.size:
        raise ValueError(f"groups has {len(groups)} items but rows has {y.size}")
    if len(set(y.tolist())) < 2 or len(set(groups)) < 2:
        return "scaled", None
    if l2 == "auto":
        strength, full = _best_l2(rows, labels, groups, folds, seed, prior=prior)
    else:
        strength = float(l2)
        full = cross_fit(rows, labels, seed=seed, l2=strength, folds=folds, groups=groups,
                         prior=prior)["after"]["brier"]
    scaled = cross_fit(rows, labels, seed=seed, folds=folds, groups=groups, prior=prior,
                       model="scaled")["after"]["brier"]
    return ("full", strength) if full < scaled - 1e-12 else ("scaled", None)


def _folds(y: np.ndarray, groups: Sequence[Any], folds: int, seed: int) -> np.ndarray:
    """The fold of each row. A group's rows (one question asked several times) share a fold, so
    no question is fitted and measured at once. Groups are dealt, in an order shuffled with
    ``seed``, each to the fold holding the fewest rows of the group's majority label (then the
    fewest rows, then the lowest number): every fold gets both labels whenever the groups allow."""
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    order = list(members.values())
    np.random.default_rng(seed).shuffle(order)  # shuffles the list of groups in place
    fold = np.zeros(len(y), dtype=int)
    count = np.zeros((folds, 2), dtype=int)  # rows per fold and label
    for idx in order:
        pos = int(y[idx].sum())
        major = 1 if 2 * pos > len(idx) else 0
        f = min(range(folds), key=lambda k: (count[k, major], count[k].sum(), k))
        fold[idx] = f
        count[f] += (len(idx) - pos, pos)
    return fold


Prior = Mapping[str, float] | Callable[[np.ndarray], Mapping[str, float]] | None


def cross_fit(
    rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], seed: int = 0, l2: float | str = 1.0, folds: int = 5,
    groups: Sequence[Any] | None = None, prior: Prior = None,
    corpora: Sequence[str | None] | None = None, corpus_min: int = 20, interval: bool = False,
    model: str = "full",
) -> dict[str, Any]:
    """K-fold cross-fitting: every label is held out once and scored by weights fitted on the others.

    The rows are dealt into ``folds`` folds (fewer when there are fewer groups), balanced by
    label, with all rows of one group in one fold (``groups``: e.g. the question asked; default:
    every row its own group); the split is seeded by ``seed``. For each fold the weights are
    fitted on the other folds (pulled toward ``prior``, default :data:`DEFAULT_WEIGHTS`; a
    callable, with a fixed ``l2``, is given the fold's training row indices and returns the prior
    for that fold) and
    give the fold's confidences; the pooled confidences of all rows are then scored, so AUROC,
    ECE and Brier rest on every label instead of one held-out half. With ``l2="auto"`` each
    fold's penalty is chosen by :func:`choose_l2` on that fold's training rows alone (a cross-fit
    inside the cross-fit), so the held-out figures include the choice.

    ``model`` is the confidence model of each fold's fit (:data:`MODELS`): ``"full"``
    (:func:`fit_weights`), ``"scaled"`` (:func:`fit_scaled`, which ``l2`` does not concern) or
    ``"auto"``: chosen by :func:`choose_model` on the fold's training rows alone, so that the
    held-out figures measure the choice too.

    ``corpora`` (the corpus each row was answered from, None where unknown) fits per corpus as
    the engine's calibration does: the corpora that get a fit of their own are those
    :func:`own_fit_corpora` names on all rows (``corpus_min`` labels), and in each fold each of
    them is fitted on its training rows, pulled toward the fold's fit on all training rows
    (:func:`fit_corpora`), and scores its held-out rows (a fold whose training rows of that
    corpus hold one label only scores them by the fit on all rows). A corpus whose own fits
    score worse than the fit on all rows on its held-out labels (Brier) is not kept
    (``by_corpus[c]["kept"]`` False): its rows are then scored by the fit on all rows in
    ``after``, as the engine will score them. That choice is made on the same held-out labels,
    which flatters ``after`` a little.

    Returns ``{"before", "after", "confidences", "folds", "n_train", "n_test", "seed", "l2", "models"}``:
    ``before`` and ``after`` are :func:`evaluate_fit` results of the default and the cross-fitted
    confidences on all ``n_test`` rows, ``confidences`` the cross-fitted confidence of each row;
    ``n_train`` is the smallest number of rows a fold was fitted on; ``l2`` lists the penalty each
    fold was fitted with (None for a scaled fit) and ``models`` each fold's model. With
    ``corpora`` also ``by_corpus``: for each corpus key, its ``n`` rows, ``eligible`` (it has enough labels of both kinds for fits of its
    own), ``own_folds`` (in how many folds a fit of its own scored held-out rows of it), ``kept``
    (never without such a fold), and the scores on its rows of the default weights (``before``),
    of the fits on all rows alone (``pooled``), of its own fits (``own``, only where they scored
    some) and of what is kept (``after``).

    With ``interval``, each of those scores also has ``auroc_interval``: AUROC's 95% bootstrap
    interval over the questions (``groups``), each question's rows drawn together
    (:func:`~self_improving_rag.evaluation.metrics.auroc_interval`). It says how far the held-out
    AUROC could move on as many other questions like these; it costs about 0.2 s per score on a
    thousand labels, so the penalty's choice, which cross-fits many times, leaves it out.
    """
    if not (l2 == "auto" or _is_strength(l2)):
        raise ValueError(f"l2 must be a positive finite number or 'auto', got {l2!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    X, y = _design(rows, labels)  # validates lengths and labels
    n = X.shape[0]
    if n < 2:
        raise ValueError(f"cross_fit needs at least 2 rows to split, got {n}")
    if not (isinstance(folds, int) and folds >= 2):
        raise ValueError(f"folds must be an integer of at least 2, got {folds!r}")
    groups = list(range(n)) if groups is None else list(groups)
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} items but rows has {n}")
    if corpora is not None and len(corpora) != n:
        raise ValueError(f"corpora has {len(corpora)} items but rows has {n}")
    if callable(prior) and (l2 == "auto" or model == "auto"):
        raise ValueError("a prior given per fold needs a fixed l2 and model: choosing them would fit priors within "
                         "priors")
    if corpora is not None and prior is not None:
        raise ValueError("corpora are fitted toward the fit on all rows, itself pulled toward the default weights; "
                         "give no prior with corpora")
    k = min(folds, len(set(groups)))
    if k < 2:
        raise ValueError("cross_fit needs at least 2 groups to split; every row here belongs to one")
    fold = _folds(y, groups, k, seed)
    eligible = own_fit_corpora(corpora, labels, corpus_min) if corpora is not None else []
    masks = _corpus_masks(corpora) if corpora is not None else {}
    p = np.zeros(n)
    pooled = np.zeros(n)
    used: list[float | None] = []
    models: list[str] = []
    own_folds: dict[Any, int] = {}
    for f in range(k):
        train = np.flatnonzero(fold != f)
        train_rows, train_labels = [rows[i] for i in train], [labels[i] for i in train]
        train_groups = [groups[i] for i in train]
        fold_prior = prior(train) if callable(prior) else prior
        fold_l2: float | None = None
        if model == "auto":
            fold_model, fold_l2 = choose_model_and_l2(train_rows, train_labels, train_groups,
                                                       min(folds, INNER_FOLDS), seed, l2, prior=fold_prior)
        else:
            fold_model = model
        if fold_model == "full" and fold_l2 is None:
            fold_l2 = float(l2) if l2 != "auto" else _choose_or_default(
                train_rows, train_labels, train_groups, min(folds, INNER_FOLDS), seed, prior)
        w = fit_model(train_rows, train_labels, fold_model, fold_l2, prior=fold_prior)
        used.append(fold_l2)
        models.append(fold_model)
        held = fold == f
        p[held] = pooled[held] = _sigmoid(X[held] @ _weight_vector(w))
        # A corpus with no held-out row in this fold needs no fit of its own here: it would score nothing.
        scored = [c for c in eligible if (held & masks[c]).any()]
        if not scored:
            continue
        own = fit_corpora(train_rows, train_labels, train_groups, [corpora[i] for i in train], w, l2=l2,
                          folds=min(folds, INNER_FOLDS), seed=seed, only=scored,
                          pooled_l2=DEFAULT_L2 if fold_l2 is None else fold_l2, pooled_model=fold_model)
        for key, fit in own.items():
            mask = held & masks[key]
            p[mask] = _sigmoid(X[mask] @ _weight_vector(fit["weights"]))
            own_folds[key] = own_folds.get(key, 0) + 1
    by_corpus: dict[Any, dict[str, Any]] = {}
    if corpora is not None:
        default = _sigmoid(X @ _weight_vector(DEFAULT_WEIGHTS))
        for key, mask in masks.items():
            g = [gr for gr, m in zip(groups, mask) if m] if interval else None
            figures = {"n": int(mask.sum()), "own_folds": own_folds.get(key, 0), "eligible": key in eligible,
                       "before": _scores(default[mask], y[mask], g), "pooled": _scores(pooled[mask], y[mask], g)}
            if own_folds.get(key, 0):
                figures["own"] = _scores(p[mask], y[mask], g)
            # Kept on evidence only: some held-out row scored by an own fit, and no worse a Brier.
            figures["kept"] = "own" in figures and figures["own"]["brier"] <= figures["pooled"]["brier"]
            if key in eligible and not figures["kept"]:
                p[mask] = pooled[mask]
            figures["after"] = _scores(p[mask], y[mask], g)
            by_corpus[key] = figures
    out = {
        "before": evaluate_fit(rows, labels, DEFAULT_WEIGHTS, groups=groups if interval else None),
        "after": _scores(p, y, groups if interval else None),
        # Each row's held-out confidence, in the rows' order, as ``after`` scores it.
        "confidences": p.tolist(),
        "folds": k,
        "n_train": int(n - np.bincount(fold, minlength=k).max()),
        "n_test": n,
        "seed": seed,
        "l2": used,
        "models": models,
    }
    if corpora is not None:
        out["by_corpus"] = by_corpus
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


def own_fit_corpora(corpora: Sequence[str | None], labels: Sequence[Any], min_labels: int) -> list[str]:
    """The corpora that get a fit of their own: those with at least ``min_labels`` labelled rows,
    right and wrong ones among them, when the rows come from more than one corpus (rows of an
    unknown corpus, None, count as one more, but never get a fit of their own). With one corpus
    the fit on all rows is already that corpus's."""
    if len(set(corpora)) < 2:
        return []
    seen: dict[str, set[int]] = {}
    count: dict[str, int] = {}
    for c, v in zip(corpora, labels):
        if c is not None:
            seen.setdefault(c, set()).add(int(v))
            count[c] = count.get(c, 0) + 1
    return [c for c in seen if count[c] >= min_labels and len(seen[c]) == 2]


def fit_corpora(rows: Sequence[Mapping[str, Any]], labels: Sequence[Any], groups: Sequence[Any],
                corpora: Sequence[str | None], pooled: Mapping[str, float], l2: float | str = "auto",
                folds: int = 5, seed: int = 0, min_labels: int = 20, only: Sequence[str] | None = None,
                pooled_l2: float = DEFAULT_L2, pooled_model: str = "full") -> dict[str, dict[str, Any]]:
    """A fit of its own for every corpus :func:`own_fit_corpora` names (``min_labels``; or each
    corpus in ``only`` whose rows here hold both labels), on that corpus's rows, pulled toward
    ``pooled`` (the fit on all rows, made with strength ``pooled_l2``) instead of the default
    weights: a corpus with few labels stays near what all corpora share, one with many moves to
    its own. ``l2`` is the penalty, or ``"auto"``: chosen per corpus by :func:`choose_l2`
    (``folds``, ``seed``), where each inner fold's prior is the fit on all rows but that fold's
    rows of the corpus (made as ``pooled`` was: model ``pooled_model``, strength ``pooled_l2``),
    so that the choice never scores rows its prior has seen. Confidence does not carry across corpora: with SQuAD's, sherlock_dev's and
    literaryqa_dev's labels in one store, one fit for all ranks sherlock_dev's answers at 0.68
    AUROC, its own fit at 0.78 (docs/results.md). Returns
    ``{corpus: {"weights", "n", "l2"}}``."""
    out: dict[str, dict[str, Any]] = {}
    keys = own_fit_corpora(corpora, labels, min_labels) if only is None else [
        c for c in only if len({int(v) for v, k in zip(labels, corpora) if k == c}) == 2]
    for key in keys:
        idx = np.asarray([i for i, c in enumerate(corpora) if c == key])
        c_rows, c_labels, c_groups = [rows[i] for i in idx], [labels[i] for i in idx], [groups[i] for i in idx]
        if l2 == "auto":
            others = [i for i, c in enumerate(corpora) if c != key]
            cache: dict[tuple[int, ...], Mapping[str, float]] = {}

            def prior_without(inner: np.ndarray, idx=idx, others=others, cache=cache) -> Mapping[str, float]:
                # The fit on all rows but the corpus's rows outside ``inner`` (its inner held-out fold).
                kept = tuple(int(j) for j in inner)
                if kept not in cache:
                    use = others + [int(idx[j]) for j in kept]
                    cache[kept] = fit_model([rows[i] for i in use], [labels[i] for i in use], pooled_model,
                                            pooled_l2)
                return cache[kept]

            strength = _choose_or_default(c_rows, c_labels, c_groups, folds, seed, prior_without)
        else:
            strength = float(l2)
        out[key] = {"weights": fit_weights(c_rows, c_labels, l2=strength, prior=pooled), "n": len(idx),
                    "l2": strength}
    return out


def _choose_or_default(rows, labels, groups, folds: int, seed: int, prior: Prior = None) -> float:
    """:func:`choose_l2` on training rows in ``folds`` folds, or :data:`DEFAULT_L2` when they
    cannot be split into folds with both labels."""
    if len({int(v) for v in labels}) < 2 or len(set(groups)) < 2:
        return DEFAULT_L2
    return choose_l2(rows, labels, groups, folds=folds, seed=seed, prior=prior)
