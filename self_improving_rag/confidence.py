"""The confidence model: a logistic combination of the self-evaluation signals.

    confidence = σ(bias + Σ_i w_i · x_i),   σ(z) = 1 / (1 + e^(−z))

over the features in :data:`FEATURES`, with the hand-set priors (:data:`DEFAULT_WEIGHTS`) or
weights fitted on labelled attempts (``evaluation/fitting.py``). The scorer of an attempt, the
memory store's re-judging of recorded attempts and the fits all read the features and the
weights through this module.

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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .text import strip_citations

__all__ = [
    "FEATURES",
    "ADDED_FEATURES",
    "DEFAULT_WEIGHTS",
    "NEUTRAL_VALUES",
    "LOGPROB_FLOOR",
    "QUESTION_FIT_FLOOR",
    "QUESTION_FEATURES",
    "answer_words",
    "bin_index",
    "complete_weights",
    "confidence",
    "confidence_function",
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
    return math.log1p(len(strip_citations(answer).split()))
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


def bin_index(conf, n_bins: int):
    """The equal-width bin of a confidence in [0, 1] (or of each in an array): [k/n, (k+1)/n) holds
    bin k, and 1.0 the last bin. A tolerance of 1e-9 keeps 0.57 out of [0.56, 0.57) when 0.57 · 100
    rounds to 56.99999999999999."""
    idx = np.floor(np.asarray(conf, dtype=float) * n_bins + 1e-9).astype(int)
    idx = np.clip(idx, 0, n_bins - 1)
    return idx if idx.ndim else int(idx)
