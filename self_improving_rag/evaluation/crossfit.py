"""Cross-fitting the confidence model: every label held out once and scored by weights fitted
on the others (:func:`cross_fit`); the full refit's penalty strength and the model chosen by it
(:func:`choose_l2`, :func:`choose_model`); and the fits of their own that corpora with enough
labels get (:func:`fit_corpora`). The choices cross-fit inside the cross-fit, so the three call
each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..confidence import DEFAULT_WEIGHTS, _sigmoid, _weight_vector
from .fit_scores import _corpus_masks, _scores, evaluate_fit
from .fitting import MODELS, _design, fit_model, fit_weights

__all__ = ["DEFAULT_L2", "INNER_FOLDS", "L2_GRID", "choose_l2", "choose_model", "choose_model_and_l2", "cross_fit",
           "fit_corpora", "own_fit_corpora"]


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
    (:func:`~self_improving_rag.evaluation.confidence_metrics.auroc_interval`). It says how far the held-out
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
