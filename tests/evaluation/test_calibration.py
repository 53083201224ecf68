"""The logistic confidence model and its prior-shrunk refit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from self_improving_rag.confidence import (
    ADDED_FEATURES,
    DEFAULT_WEIGHTS,
    FEATURES,
    LOGPROB_FLOOR,
    NEUTRAL_VALUES,
    confidence,
    answer_words,
)
from self_improving_rag.evaluation.crossfit import (
    L2_GRID,
    choose_l2,
    choose_model,
    cross_fit,
    fit_corpora,
    own_fit_corpora,
)
from self_improving_rag.evaluation.fit_scores import evaluate_fit
from self_improving_rag.evaluation.fitting import MODELS, fit_scaled, fit_weights, scaled_params


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _synthetic_rows(n: int, seed: int, agreement: bool = False) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    rows = [
        {
            "coverage": float(rng.uniform()),
            "grounding": float(rng.uniform()),
            "faithfulness": float(rng.uniform()),
            "redundancy": float(rng.uniform()),
            "mean_logprob": float(rng.uniform(-2.0, 0.0)),
            "refusal": float(rng.uniform() < 0.1),
            "answer_words": math.log1p(int(rng.integers(1, 30))),
            "question_fit": float(rng.uniform(-15.0, -0.5)),
            "question_prior": float(rng.uniform(-15.0, -0.5)),
        }
        for _ in range(n)
    ]
    # Features added later draw from a stream of their own: the earlier ones keep their values.
    later = np.random.default_rng(seed + 10_000)
    for r in rows:
        r["dates_unstated"] = float(later.uniform() < 0.1)
        r["explanation"] = float(later.uniform() < 0.1)
    latest = np.random.default_rng(seed + 20_000)
    for r in rows if agreement else ():  # as an older store's answers may hold it
        r["agreement"] = float(latest.integers(0, 5)) / 4  # four samples
    return rows


def _labels_from(rows: list[dict[str, float]], weights: dict[str, float], seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(rng.uniform() < confidence(r, weights)) for r in rows]


# --------------------------------------------------------------------------- the prior


def test_default_weights_cover_every_feature() -> None:
    assert set(DEFAULT_WEIGHTS) == {"bias", *FEATURES}
    assert set(NEUTRAL_VALUES) == set(FEATURES)
    for name in ("coverage", "grounding", "faithfulness", "mean_logprob"):
        assert DEFAULT_WEIGHTS[name] > 0
    assert -1.0 < DEFAULT_WEIGHTS["redundancy"] < 0
    assert DEFAULT_WEIGHTS["refusal"] < -2 * abs(DEFAULT_WEIGHTS["redundancy"])


def test_all_missing_is_even_odds() -> None:
    assert confidence({}) == pytest.approx(0.5)
    assert confidence({f: None for f in FEATURES}) == pytest.approx(0.5)
    assert confidence({f: NEUTRAL_VALUES[f] for f in FEATURES}) == pytest.approx(0.5)


def test_confidence_hand_computed() -> None:
    strong = {"coverage": 0.9, "grounding": 0.9, "faithfulness": 0.9, "redundancy": 0.2, "mean_logprob": -0.1, "refusal": 0}
    weak = {"coverage": 0.3, "grounding": 0.3, "faithfulness": 0.3, "redundancy": 0.5, "mean_logprob": -1.5, "refusal": 0}
    # bias = −(1.5·0.5 + 1·0.5 + 4·0.5 − 0.5·0.3 + 1.5·(−0.6)) = −2.2
    # logit = −2.2 + 1.5·0.9 + 1·0.9 + 4·0.9 − 0.5·0.2 + 1.5·(−0.1) = 3.4
    assert _logit(confidence(strong)) == pytest.approx(3.4)
    # logit = −2.2 + 0.45 + 0.3 + 1.2 − 0.25 − 2.25 = −2.75
    assert _logit(confidence(weak)) == pytest.approx(-2.75)
    assert _logit(confidence({"refusal": 1.0})) == pytest.approx(-3.0)


def test_confidence_directions() -> None:
    base = {f: NEUTRAL_VALUES[f] for f in FEATURES}
    c0 = confidence(base)
    for name in ("coverage", "grounding", "faithfulness"):
        assert confidence({**base, name: 0.9}) > c0
    assert confidence({**base, "mean_logprob": -0.1}) > c0 > confidence({**base, "mean_logprob": -1.5})
    assert confidence({**base, "redundancy": 0.9}) < c0
    assert confidence({**base, "refusal": 1.0}) < 0.1


def test_confidence_input_handling() -> None:
    # unknown keys are ignored, so a whole Signals.values() dict can be passed
    assert confidence({"confidence": 0.99, "answer_len": 3}) == pytest.approx(0.5)
    # very low log-probabilities are clipped at the floor
    assert confidence({"mean_logprob": -100.0}) == confidence({"mean_logprob": LOGPROB_FLOOR})
    with pytest.raises(ValueError, match="grounding"):
        confidence({"grounding": float("nan")})
    with pytest.raises(ValueError, match="refusal"):
        confidence({}, {k: v for k, v in DEFAULT_WEIGHTS.items() if k != "refusal"})
    extreme = {f: 1e6 for f in FEATURES if f != "mean_logprob"}
    assert 0.0 <= confidence(extreme) <= 1.0


@settings(max_examples=50)
@given(st.fixed_dictionaries({f: st.one_of(st.none(), st.floats(-10, 10)) for f in FEATURES}))
def test_confidence_in_unit_interval(features) -> None:
    c = confidence(features)
    assert 0.0 <= c <= 1.0


# --------------------------------------------------------------------------- fitting


def test_fit_without_rows_returns_prior() -> None:
    assert fit_weights([], []) == pytest.approx(DEFAULT_WEIGHTS)


def test_few_labels_stay_near_prior() -> None:
    rows = _synthetic_rows(4, seed=1)
    fitted = fit_weights(rows, [1, 0, 0, 1], l2=10.0)
    assert all(abs(fitted[k] - DEFAULT_WEIGHTS[k]) < 0.5 for k in DEFAULT_WEIGHTS)


def test_stronger_l2_shrinks_harder() -> None:
    rows = _synthetic_rows(200, seed=2)
    labels = _labels_from(rows, {**DEFAULT_WEIGHTS, "coverage": -3.0}, seed=3)

    def dist(w: dict[str, float]) -> float:
        return math.sqrt(sum((w[k] - DEFAULT_WEIGHTS[k]) ** 2 for k in DEFAULT_WEIGHTS))

    d = [dist(fit_weights(rows, labels, l2=l2)) for l2 in (0.1, 1.0, 10.0, 1000.0, 10000.0)]
    assert d == sorted(d, reverse=True)
    assert d[-1] < 0.1


def test_fit_recovers_known_direction() -> None:
    # Ground truth flips two priors: coverage now hurts, redundancy now helps.
    truth = {**DEFAULT_WEIGHTS, "coverage": -2.0, "redundancy": 3.0}
    rows = _synthetic_rows(1500, seed=4)
    labels = _labels_from(rows, truth, seed=5)
    fitted = fit_weights(rows, labels, l2=1.0)
    assert fitted["coverage"] < -1.0
    assert fitted["redundancy"] > 2.0
    assert fitted["grounding"] > 0.5 and fitted["faithfulness"] > 0.5
    before = evaluate_fit(rows, labels, DEFAULT_WEIGHTS)
    after = evaluate_fit(rows, labels, fitted)
    assert after["auroc"] > before["auroc"] + 0.05
    assert after["n"] == 1500


def test_fit_matches_plain_l2_logistic_regression() -> None:
    """With a zero prior the objective is ordinary ridge logistic regression."""
    sklearn_linear = pytest.importorskip("sklearn.linear_model", reason="scikit-learn is not installed")
    rows = _synthetic_rows(300, seed=6, agreement=True)
    labels = _labels_from(rows, DEFAULT_WEIGHTS, seed=7)
    zero = {k: 0.0 for k in DEFAULT_WEIGHTS}
    ours = fit_weights(rows, labels, l2=2.0, prior=zero)
    X = np.array([[1.0] + [r[f] for f in FEATURES] for r in rows])
    ref = sklearn_linear.LogisticRegression(C=1 / 2.0, fit_intercept=False, tol=1e-10, max_iter=10_000).fit(X, labels)
    assert [ours[k] for k in ("bias", *FEATURES)] == pytest.approx(ref.coef_[0].tolist(), abs=1e-4)


def test_fit_is_stationary_point() -> None:
    rows = _synthetic_rows(100, seed=8, agreement=True)
    labels = _labels_from(rows, DEFAULT_WEIGHTS, seed=9)
    l2 = 0.5
    w = fit_weights(rows, labels, l2=l2)
    X = np.array([[1.0] + [r[f] for f in FEATURES] for r in rows])
    wv = np.array([w[k] for k in ("bias", *FEATURES)])
    w0 = np.array([DEFAULT_WEIGHTS[k] for k in ("bias", *FEATURES)])
    p = 1 / (1 + np.exp(-(X @ wv)))
    grad = X.T @ (p - np.array(labels)) + l2 * (wv - w0)
    assert np.max(np.abs(grad)) < 1e-6


def test_fit_separable_data_stays_finite() -> None:
    rows = [{"grounding": g} for g in (0.0, 0.1, 0.9, 1.0)]
    fitted = fit_weights(rows, [0, 0, 1, 1], l2=0.01)
    assert all(math.isfinite(v) for v in fitted.values())


def test_fit_rejects_bad_arguments() -> None:
    rows = _synthetic_rows(3, seed=10)
    with pytest.raises(ValueError, match="items"):
        fit_weights(rows, [1, 0])
    with pytest.raises(ValueError, match="labels"):
        fit_weights(rows, [1, 0, 2])
    with pytest.raises(ValueError, match="l2"):
        fit_weights(rows, [1, 0, 1], l2=0.0)


# --------------------------------------------------------------------------- evaluation


def test_evaluate_fit_undefined_values() -> None:
    out = evaluate_fit([{"grounding": 0.9}, {"grounding": 0.8}], [1, 1])
    assert out["auroc"] is None and "one class" in out["notes"]["auroc"]
    assert out["ece"] is not None and out["n"] == 2
    empty = evaluate_fit([], [])
    assert empty["auroc"] is None and empty["ece"] is None and empty["n"] == 0


def test_cross_fit_improves_ece_on_miscalibrated_data() -> None:
    # Outcomes follow the default ranking but at much lower odds: the defaults are
    # overconfident by 2.5 logits, which the refit bias should absorb.
    truth = {**DEFAULT_WEIGHTS, "bias": DEFAULT_WEIGHTS["bias"] - 2.5}
    rows = _synthetic_rows(2000, seed=11)
    labels = _labels_from(rows, truth, seed=12)
    out = cross_fit(rows, labels, seed=0)
    # Five folds: every label held out once, each fold fitted on the other 1600.
    assert out["folds"] == 5 and out["n_test"] == 2000 and out["n_train"] == 1600
    assert out["after"]["n"] == out["before"]["n"] == 2000
    assert out["before"]["ece"] > 0.15
    assert out["after"]["ece"] < 0.05
    assert out["after"]["ece"] < out["before"]["ece"]
    assert out["after"]["brier"] < out["before"]["brier"]
    # Ranking was already right, so AUROC should not get materially worse.
    assert out["after"]["auroc"] > out["before"]["auroc"] - 0.02


def test_cross_fit_gives_auroc_intervals_over_questions_only_when_asked() -> None:
    from self_improving_rag.evaluation.confidence_metrics import auroc_interval

    rows = _synthetic_rows(300, seed=21)
    labels = _labels_from(rows, DEFAULT_WEIGHTS, seed=22)
    groups = [f"q{i // 3}" for i in range(300)]  # each question answered three times
    plain = cross_fit(rows, labels, seed=0, groups=groups)
    # Left out by default: choose_l2 cross-fits many times and reads the Brier score alone.
    assert "auroc_interval" not in plain["after"] and "auroc_interval" not in plain["before"]
    out = cross_fit(rows, labels, seed=0, groups=groups, interval=True)
    assert out["after"]["auroc"] == plain["after"]["auroc"]
    for key in ("before", "after"):
        iv = out[key]["auroc_interval"]
        assert iv["low"] < out[key]["auroc"] < iv["high"] and iv["high"] - iv["low"] < 0.25
    # The interval draws questions, not rows: the held-out confidences drawn by question.
    before = [confidence(r) for r in rows]
    assert out["before"]["auroc_interval"] == auroc_interval(before, labels, groups)
    assert out["before"]["auroc_interval"] != auroc_interval(before, labels)
    corpora = ["/a" if i < 150 else "/b" for i in range(300)]
    by = cross_fit(rows, labels, seed=0, groups=groups, corpora=corpora, interval=True)["by_corpus"]
    assert all("auroc_interval" in by[c][k] for c in ("/a", "/b") for k in ("before", "pooled", "after"))


def test_cross_fit_is_seeded_and_stratified() -> None:
    from self_improving_rag.evaluation.crossfit import _folds

    rows = _synthetic_rows(40, seed=13)
    labels = [1] * 10 + [0] * 30
    a = cross_fit(rows, labels, seed=3)
    b = cross_fit(rows, labels, seed=3)
    assert a == b
    assert a["n_test"] == 40 and a["before"]["auroc"] is not None and a["after"]["auroc"] is not None
    fold = _folds(np.array(labels, dtype=float), list(range(40)), 5, seed=3)
    # stratified: every fold holds 2 of the 10 positives and 6 of the 30 negatives
    assert [int(((fold == f) & (np.array(labels) == 1)).sum()) for f in range(5)] == [2] * 5
    assert np.bincount(fold).tolist() == [8] * 5
    assert not np.array_equal(fold, _folds(np.array(labels, dtype=float), list(range(40)), 5, seed=4))
    with pytest.raises(ValueError, match="at least 2"):
        cross_fit(rows[:1], labels[:1])
    with pytest.raises(ValueError, match="folds"):
        cross_fit(rows, labels, folds=1)


def test_cross_fit_keeps_a_questions_answers_in_one_fold() -> None:
    """The same question asked four times must not be fitted and scored at once: its answers share
    a fold. With fewer groups than folds, there are as many folds as groups."""
    from self_improving_rag.evaluation.crossfit import _folds

    labels = np.array([1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1], dtype=float)
    groups = ["q1"] * 4 + ["q2"] * 2 + ["q3"] * 3 + ["q4"] * 3
    for seed in range(5):
        fold = _folds(labels, groups, 3, seed)
        for g in set(groups):
            assert len({int(fold[i]) for i, x in enumerate(groups) if x == g}) == 1
        assert len(set(fold.tolist())) == 3
    rows = _synthetic_rows(12, seed=5)
    out = cross_fit(rows, labels.tolist(), groups=groups, folds=10)
    assert out["folds"] == 4 and out["n_test"] == 12 and out["n_train"] == 8  # the four-answer question held out
    with pytest.raises(ValueError, match="2 groups"):
        cross_fit(rows, labels.tolist(), groups=["same"] * 12)
    with pytest.raises(ValueError, match="groups has 3"):
        cross_fit(rows, labels.tolist(), groups=["a", "b", "c"])


def test_cross_fit_scores_each_label_with_a_fit_that_never_saw_it() -> None:
    """One fold per row: each row's held-out confidence is that of a fit on the other 29 rows,
    exactly as computed by hand."""
    from self_improving_rag.confidence import _sigmoid, _weight_vector
    from self_improving_rag.evaluation.fit_scores import _scores
    from self_improving_rag.evaluation.fitting import _design

    base = _synthetic_rows(30, seed=21)
    labels = _labels_from(base, DEFAULT_WEIGHTS, seed=22)
    out = cross_fit(base, labels, groups=list(range(30)), folds=30)
    X, _ = _design(base, labels)
    p = [float(_sigmoid(X[i] @ _weight_vector(fit_weights(base[:i] + base[i + 1:], labels[:i] + labels[i + 1:]))))
         for i in range(30)]
    expect = _scores(np.array(p), np.array(labels, dtype=float))
    assert out["folds"] == 30 and out["after"]["brier"] == pytest.approx(expect["brier"])
    assert out["after"]["auroc"] == pytest.approx(expect["auroc"])


# ------------------------------------------------------------------ the penalty's strength


def test_choose_l2_takes_the_strength_with_the_lowest_cross_fitted_brier() -> None:
    rows = _synthetic_rows(120, seed=31)
    truth = {**DEFAULT_WEIGHTS, "faithfulness": -2.0, "coverage": 3.0, "bias": DEFAULT_WEIGHTS["bias"] + 1.0}
    labels = _labels_from(rows, truth, seed=32)
    brier = {l2: cross_fit(rows, labels, seed=4, l2=l2)["after"]["brier"] for l2 in L2_GRID}
    assert len(set(brier.values())) > 1  # the strengths differ here, so the choice means something
    assert choose_l2(rows, labels, seed=4) == min(L2_GRID, key=lambda v: (brier[v], -v))
    # Equal scores (within 1e-9): the stronger pull.
    assert choose_l2(rows, labels, seed=4, grid=(0.5, 0.5 + 1e-13)) == 0.5 + 1e-13
    for bad in ((), (0.0, 1.0), (-1.0,), (float("nan"),), (True,)):
        with pytest.raises(ValueError, match="grid"):
            choose_l2(rows, labels, grid=bad)


def test_choose_l2_pulls_hard_toward_right_priors_and_lets_many_labels_move_wrong_ones() -> None:
    """Labels drawn from the default weights themselves: the priors are right and the strongest
    pull wins. The same rows labelled by weights far from the priors: a weak pull wins."""
    far = {**DEFAULT_WEIGHTS, "faithfulness": -4.0, "mean_logprob": -1.5, "coverage": 4.0}
    for seed in (41, 43, 45):
        rows = _synthetic_rows(60, seed=seed)
        assert choose_l2(rows, _labels_from(rows, DEFAULT_WEIGHTS, seed=seed + 1)) == max(L2_GRID)
        assert choose_l2(rows, _labels_from(rows, far, seed=seed + 1)) <= 0.3


def _cross_fit_by_hand(rows, labels, folds: int, seed: int, fit) -> tuple[list, float]:
    """cross_fit's folds (one row a question) computed here: ``fit(training rows, their labels,
    their indices)`` gives each fold's (choice, weights); returns the choices and the Brier score
    of the held-out confidences."""
    from self_improving_rag.confidence import _sigmoid, _weight_vector
    from self_improving_rag.evaluation.crossfit import _folds
    from self_improving_rag.evaluation.fit_scores import _scores
    from self_improving_rag.evaluation.fitting import _design

    n = len(rows)
    fold = _folds(np.array(labels, dtype=float), list(range(n)), folds, seed=seed)
    X, y = _design(rows, labels)
    p = np.zeros(n)
    picks = []
    for f in range(folds):
        train = [i for i in range(n) if fold[i] != f]
        pick, w = fit([rows[i] for i in train], [labels[i] for i in train], train)
        picks.append(pick)
        held = fold == f
        p[held] = _sigmoid(X[held] @ _weight_vector(w))
    return picks, _scores(p, y)["brier"]


def test_cross_fit_with_auto_l2_chooses_inside_each_training_fold() -> None:
    """With l2='auto' each fold's penalty is chosen on that fold's training rows only, and the
    held-out confidences are those of fits with it, as computed by hand."""
    rows = _synthetic_rows(80, seed=51)
    labels = _labels_from(rows, {**DEFAULT_WEIGHTS, "coverage": 4.0}, seed=52)
    out = cross_fit(rows, labels, seed=2, l2="auto", folds=4)

    def fit(tr_rows, tr_labels, train):
        l2 = choose_l2(tr_rows, tr_labels, train, folds=4, seed=2)
        return l2, fit_weights(tr_rows, tr_labels, l2=l2)

    picks, brier = _cross_fit_by_hand(rows, labels, 4, 2, fit)
    assert out["l2"] == picks
    assert out["after"]["brier"] == pytest.approx(brier)
    assert cross_fit(rows, labels, seed=2, l2=0.3)["l2"] == [0.3] * 5
    for bad in ("strong", 0.0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="'auto'"):
            cross_fit(rows, labels, l2=bad)


def test_cross_fit_with_auto_l2_falls_back_when_a_training_fold_holds_one_label() -> None:
    """Two questions, one right and one wrong: each training fold holds one label only, so there
    is nothing to choose from and the fold is fitted at the default strength."""
    rows = _synthetic_rows(4, seed=61)
    out = cross_fit(rows, [1, 1, 0, 0], groups=["a", "a", "b", "b"], l2="auto")
    assert out["l2"] == [1.0, 1.0]


# ------------------------------------------------------------------ the scaled model


def _default_logit(row: dict[str, float]) -> float:
    return _logit(confidence(row))


def test_scaled_params_recover_the_slope_and_shift_the_labels_were_drawn_with() -> None:
    """Labels drawn from σ(2.5 · z₀ − 4), z₀ the default weights' logit: the fit finds both numbers."""
    rows = _synthetic_rows(6000, seed=71)
    truth = {k: 2.5 * v for k, v in DEFAULT_WEIGHTS.items()}
    truth["bias"] -= 4.0
    labels = _labels_from(rows, truth, seed=72)
    a, b = scaled_params(rows, labels)
    assert a == pytest.approx(2.5, abs=0.2) and b == pytest.approx(-4.0, abs=0.35)
    w = fit_scaled(rows, labels)
    for row in rows[:20]:  # the weights are the scaled defaults: σ(a · z₀ + b)
        assert confidence(row, w) == pytest.approx(1 / (1 + math.exp(-(a * _default_logit(row) + b))), rel=1e-9)
    assert scaled_params([], []) == (1.0, 0.0) and fit_scaled([], []) == pytest.approx(DEFAULT_WEIGHTS)


def test_fit_scaled_keeps_the_default_ranking_whatever_the_labels() -> None:
    """Labels that also follow a feature the defaults do not weigh move the full fit's ranking,
    never the scaled one's: its confidences order the answers as the default weights' do."""
    rows = _synthetic_rows(300, seed=73)
    labels = _labels_from(rows, {**DEFAULT_WEIGHTS, "question_prior": 0.6}, seed=74)
    assert scaled_params(rows, labels)[0] > 0
    default = [confidence(r) for r in rows]
    scaled = [confidence(r, fit_scaled(rows, labels)) for r in rows]
    assert np.array_equal(np.argsort(default, kind="stable"), np.argsort(scaled, kind="stable"))
    full = [confidence(r, fit_weights(rows, labels, l2=0.1)) for r in rows]
    assert not np.array_equal(np.argsort(default, kind="stable"), np.argsort(full, kind="stable"))


def test_scaled_params_hold_the_slope_at_zero_when_the_defaults_rank_backwards() -> None:
    """Answers the default weights rank high are the wrong ones: no positive slope fits, and the
    fit gives every answer the labels' own rate instead of turning the defaults upside down."""
    rows = _synthetic_rows(400, seed=75)
    z = [_default_logit(r) for r in rows]
    cut = float(np.median(z))
    labels = [int(v < cut) for v in z]
    a, b = scaled_params(rows, labels)
    assert a == 0.0 and b == pytest.approx(_logit(sum(labels) / len(labels)), abs=0.01)
    assert {round(confidence(r, fit_scaled(rows, labels)), 9) for r in rows} == {round(sum(labels) / len(labels), 9)}


def test_scaled_params_stay_finite_when_the_defaults_separate_the_labels() -> None:
    rows = _synthetic_rows(100, seed=76)
    z = [_default_logit(r) for r in rows]
    cut = float(np.median(z))
    a, b = scaled_params(rows, [int(v > cut) for v in z])
    assert math.isfinite(a) and math.isfinite(b) and a > 1.0


def test_choose_model_takes_scaled_when_the_defaults_rank_well_and_full_when_they_do_not() -> None:
    rows = _synthetic_rows(100, seed=77)
    # The defaults' ranking, miscalibrated: the scaled model fixes that with two numbers.
    stretched = {k: 3.0 * v for k, v in DEFAULT_WEIGHTS.items()}
    stretched["bias"] -= 2.0
    assert choose_model(rows, _labels_from(rows, stretched, seed=78)) == "scaled"
    # Another feature decides: only a full refit can rank by it.
    other = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "redundancy": 6.0, "bias": -3.0}
    assert choose_model(rows, _labels_from(rows, other, seed=79)) == "full"
    # Nothing to compare on (one question, or one kind of label): the model with two numbers.
    assert choose_model(rows[:4], [1, 1, 0, 0], groups=["a"] * 4) == "scaled"
    assert choose_model(rows[:4], [1, 1, 1, 1]) == "scaled"


def test_choose_model_compares_the_two_cross_fitted_brier_scores() -> None:
    rows = _synthetic_rows(120, seed=80)
    labels = _labels_from(rows, {**DEFAULT_WEIGHTS, "coverage": 5.0}, seed=81)
    brier = {m: cross_fit(rows, labels, seed=3, folds=4, l2=0.3, model=m)["after"]["brier"] for m in ("full", "scaled")}
    assert choose_model(rows, labels, folds=4, seed=3, l2=0.3) == ("full" if brier["full"] < brier["scaled"] else "scaled")
    # A strength that is not one is refused, as cross_fit refuses it, not read as a number (True as 1.0).
    for bad in (True, "0.3", "strong", 0.0):
        with pytest.raises(ValueError, match="'auto'"):
            choose_model(rows, labels, folds=4, seed=3, l2=bad)


def test_with_auto_l2_the_full_refit_competes_with_its_chosen_strengths_score() -> None:
    """l2='auto': the full refit's score is the lowest cross-fitted Brier over the penalty grid
    (choose_l2's own search, on the same folds), and a full pick comes with that strength."""
    from self_improving_rag.evaluation.crossfit import choose_model_and_l2

    for seed, weights in ((85, {**DEFAULT_WEIGHTS, "redundancy": 3.0, "bias": -0.5}),
                          (86, {k: 3.0 * v for k, v in DEFAULT_WEIGHTS.items()})):
        rows = _synthetic_rows(100, seed=seed)
        labels = _labels_from(rows, weights, seed=seed + 100)
        groups = list(range(100))
        best = min(cross_fit(rows, labels, seed=1, l2=v, folds=4, groups=groups)["after"]["brier"] for v in L2_GRID)
        scaled = cross_fit(rows, labels, seed=1, folds=4, groups=groups, model="scaled")["after"]["brier"]
        model, l2 = choose_model_and_l2(rows, labels, groups, 4, 1, "auto")
        assert model == ("full" if best < scaled else "scaled")
        assert l2 == (choose_l2(rows, labels, groups, folds=4, seed=1) if model == "full" else None)


def test_cross_fit_with_auto_model_chooses_inside_each_training_fold() -> None:
    """model='auto': each fold's model is chosen on its training rows alone (as choose_model does
    there), and its held-out confidences come from that model; a scaled fold has no penalty."""
    rows = _synthetic_rows(90, seed=82)
    labels = _labels_from(rows, {**DEFAULT_WEIGHTS, "redundancy": 3.0, "bias": -0.5}, seed=83)
    out = cross_fit(rows, labels, seed=4, l2=0.3, folds=3, model="auto")

    def fit(tr_rows, tr_labels, train):
        m = choose_model(tr_rows, tr_labels, train, folds=3, seed=4, l2=0.3)
        return m, fit_scaled(tr_rows, tr_labels) if m == "scaled" else fit_weights(tr_rows, tr_labels, l2=0.3)

    picks, brier = _cross_fit_by_hand(rows, labels, 3, 4, fit)
    assert out["models"] == picks
    assert out["l2"] == [None if m == "scaled" else 0.3 for m in picks]
    assert out["after"]["brier"] == pytest.approx(brier)
    assert cross_fit(rows, labels, folds=3, model="scaled")["l2"] == [None] * 3
    assert set(MODELS) == {"auto", "full", "scaled"}
    with pytest.raises(ValueError, match="model must be one of auto, full, scaled"):
        cross_fit(rows, labels, model="platt")
    with pytest.raises(ValueError, match="fixed l2 and model"):
        cross_fit(rows, labels, l2=1.0, model="auto", prior=lambda train: DEFAULT_WEIGHTS)


def test_a_scaled_fit_on_all_rows_pulls_each_corpus_fit_toward_it() -> None:
    """With the fit on all rows scaled, a corpus's own fit starts from it, and so do the inner
    priors of its penalty's choice: a scaled fit on the other rows, not a full one."""
    rows, labels, corpora = _two_corpora(160, seed=84)
    groups = list(range(len(rows)))
    pooled = fit_scaled(rows, labels)
    own = fit_corpora(rows, labels, groups, corpora, pooled, l2=0.5, pooled_model="scaled")
    assert set(own) and all(f["l2"] == 0.5 for f in own.values())
    for c, fit in own.items():
        idx = [i for i, k in enumerate(corpora) if k == c]
        assert fit["weights"] == pytest.approx(fit_weights([rows[i] for i in idx], [labels[i] for i in idx], l2=0.5,
                                                           prior=pooled))
    auto = fit_corpora(rows, labels, groups, corpora, pooled, l2="auto", folds=3, pooled_model="scaled")
    assert set(auto) == set(own)
    # Each inner fold's prior is the scaled fit on all rows but that fold's rows of the corpus. On
    # corpus "b" here a full one would choose another strength (0.1 against 0.3), so this tells them apart.
    a = [i for i, k in enumerate(corpora) if k == "b"]
    others = [i for i, k in enumerate(corpora) if k != "b"]

    def inner_prior(inner, fit):
        use = others + [a[j] for j in inner]
        return fit([rows[i] for i in use], [labels[i] for i in use])

    b_rows, b_labels = [rows[i] for i in a], [labels[i] for i in a]
    scaled_choice = choose_l2(b_rows, b_labels, a, folds=3, seed=0, prior=lambda t: inner_prior(t, fit_scaled))
    full_choice = choose_l2(b_rows, b_labels, a, folds=3, seed=0,
                            prior=lambda t: inner_prior(t, lambda r, y: fit_weights(r, y, l2=1.0)))
    assert scaled_choice != full_choice
    assert auto["b"]["l2"] == scaled_choice
    assert auto["b"]["weights"] == pytest.approx(fit_weights(b_rows, b_labels, l2=scaled_choice, prior=pooled))


def test_cross_fit_hands_each_folds_model_to_the_corpus_fits(monkeypatch) -> None:
    """With corpora, each fold's corpus fits are pulled toward that fold's fit on all training
    rows and choose their penalty with inner priors made the same way: fit_corpora is told the
    fold's model (its l2 only for a full one; a scaled fold passes the unused default)."""
    from self_improving_rag.evaluation import crossfit

    seen = []
    real = crossfit.fit_corpora

    def spy(*args, **kwargs):
        seen.append((kwargs["pooled_model"], kwargs["pooled_l2"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(crossfit, "fit_corpora", spy)
    rows, labels, corpora = _two_corpora(60, seed=87)
    out = cross_fit(rows, labels, seed=1, l2=0.5, folds=3, corpora=corpora, corpus_min=20, model="scaled")
    assert out["models"] == ["scaled"] * 3 and seen == [("scaled", 1.0)] * 3
    seen.clear()
    out = cross_fit(rows, labels, seed=1, l2=0.5, folds=3, corpora=corpora, corpus_min=20, model="full")
    assert seen == [("full", 0.5)] * 3
    seen.clear()
    out = cross_fit(rows, labels, seed=1, l2=0.5, folds=3, corpora=corpora, corpus_min=20, model="auto")
    assert [m for m, _ in seen] == out["models"]


# ------------------------------------------------------------------ fits per corpus


def _two_corpora(n: int, seed: int) -> tuple[list[dict[str, float]], list[int], list[str]]:
    """Rows of two corpora whose answers are right for opposite reasons: on "a" faithful answers
    are right, on "b" (a corpus whose passages the checks misread) unfaithful ones."""
    rows_a, rows_b = _synthetic_rows(n, seed=seed), _synthetic_rows(n, seed=seed + 1)
    truth_a = {**DEFAULT_WEIGHTS, "faithfulness": 6.0, "bias": DEFAULT_WEIGHTS["bias"] - 1.0}
    truth_b = {**DEFAULT_WEIGHTS, "faithfulness": -6.0, "bias": DEFAULT_WEIGHTS["bias"] + 5.0}
    labels = _labels_from(rows_a, truth_a, seed=seed + 2) + _labels_from(rows_b, truth_b, seed=seed + 3)
    return rows_a + rows_b, labels, ["a"] * n + ["b"] * n


def test_own_fit_corpora_needs_enough_labels_of_both_kinds_and_another_corpus() -> None:
    assert own_fit_corpora(["a"] * 30, [0, 1] * 15, min_labels=20) == []  # one corpus: the fit on all is its own
    assert own_fit_corpora(["a"] * 30 + ["b"] * 30, [0, 1] * 30, min_labels=20) == ["a", "b"]
    assert own_fit_corpora(["a"] * 30 + ["b"] * 19, [0, 1] * 24 + [0], min_labels=20) == ["a"]
    assert own_fit_corpora(["a"] * 30 + ["b"] * 30, [0, 1] * 15 + [1] * 30, min_labels=20) == ["a"]  # b: one class
    # Rows of an unknown corpus count as another corpus but never get a fit.
    assert own_fit_corpora(["a"] * 30 + [None] * 30, [0, 1] * 30, min_labels=20) == ["a"]
    assert own_fit_corpora([None] * 30, [0, 1] * 15, min_labels=2) == []


def test_fit_corpora_pulls_each_corpus_toward_the_fit_on_all_labels() -> None:
    rows, labels, corpora = _two_corpora(80, seed=71)
    groups = list(range(len(rows)))
    pooled = fit_weights(rows, labels, l2=1.0)
    own = fit_corpora(rows, labels, groups, corpora, pooled, l2=1.0, min_labels=20)
    assert set(own) == {"a", "b"} and own["a"]["n"] == own["b"]["n"] == 80 and own["a"]["l2"] == 1.0
    assert own["a"]["weights"]["faithfulness"] > pooled["faithfulness"] + 1.0
    assert own["b"]["weights"]["faithfulness"] < pooled["faithfulness"] - 1.0
    # The pull is toward the pooled weights, not the defaults: at a huge strength the fit stays there.
    stiff = fit_corpora(rows, labels, groups, corpora, pooled, l2=1e6, min_labels=20)
    for f in ("bias", *FEATURES):
        assert stiff["a"]["weights"][f] == pytest.approx(pooled[f], abs=1e-3)
    assert fit_corpora(rows, labels, groups, corpora, pooled, min_labels=81) == {}
    # Chosen, the strength of a corpus's fit is scored in folds whose prior never saw the held-out
    # rows: the fit on all rows but that fold's rows of the corpus.
    chosen = fit_corpora(rows, labels, groups, corpora, pooled, l2="auto", min_labels=20, seed=3, pooled_l2=0.03)
    a = [i for i, c in enumerate(corpora) if c == "a"]
    b = [i for i, c in enumerate(corpora) if c != "a"]

    def honest(inner):
        use = b + [a[j] for j in inner]
        return fit_weights([rows[i] for i in use], [labels[i] for i in use], l2=0.03)

    a_rows, a_labels = [rows[i] for i in a], [labels[i] for i in a]
    assert chosen["a"]["l2"] == choose_l2(a_rows, a_labels, a, seed=3, prior=honest)
    assert chosen["a"]["weights"] == fit_weights(a_rows, a_labels, l2=chosen["a"]["l2"], prior=pooled)
    # `only` names the corpora to fit, whatever their count here; one with a single label is skipped.
    assert set(fit_corpora(rows, labels, groups, corpora, pooled, l2=1.0, min_labels=500, only=["b"])) == {"b"}
    one_label = [1 if c == "b" else v for v, c in zip(labels, corpora)]
    assert set(fit_corpora(rows, one_label, groups, corpora, pooled, l2=1.0, only=["a", "b"])) == {"a"}


def test_choose_l2_with_a_prior_pulls_hard_when_the_labels_agree_with_it() -> None:
    far = {**DEFAULT_WEIGHTS, "faithfulness": -4.0, "mean_logprob": -1.5, "coverage": 4.0}
    rows = _synthetic_rows(60, seed=41)
    labels = _labels_from(rows, far, seed=42)
    assert choose_l2(rows, labels) <= 0.3  # far from the defaults
    assert choose_l2(rows, labels, prior=far) == max(L2_GRID)  # but right where this prior is


def test_cross_fit_by_corpus_beats_one_fit_for_both_and_reports_each_corpus() -> None:
    rows, labels, corpora = _two_corpora(80, seed=81)
    plain = cross_fit(rows, labels, seed=1, l2=1.0)
    assert "by_corpus" not in plain
    out = cross_fit(rows, labels, seed=1, l2=1.0, corpora=corpora, corpus_min=20)
    assert out["l2"] == plain["l2"] and out["before"] == plain["before"]
    assert set(out["by_corpus"]) == {"a", "b"}
    for key in ("a", "b"):
        figures = out["by_corpus"][key]
        assert figures["n"] == 80 and figures["own_folds"] == 5
        assert figures["after"]["brier"] < figures["pooled"]["brier"] - 0.02
        assert figures["after"]["auroc"] > figures["pooled"]["auroc"] + 0.04
        assert figures["kept"] is True and figures["after"] == figures["own"]
    assert out["after"]["brier"] < plain["after"]["brier"] - 0.02
    ref = cross_fit(rows, labels, seed=1, l2=1.0, corpora=["a"] * len(rows))  # one corpus: no fit of its own
    assert ref["by_corpus"]["a"]["own_folds"] == 0 and ref["after"] == plain["after"]
    assert "own" not in ref["by_corpus"]["a"] and ref["by_corpus"]["a"]["kept"] is False
    # Too few labels per corpus: every row is scored by the fit on all rows, as without corpora,
    # and the figures of the fits on all rows do not depend on the corpora's own.
    few = cross_fit(rows, labels, seed=1, l2=1.0, corpora=corpora, corpus_min=81)
    assert few["after"] == plain["after"] and few["by_corpus"]["a"]["own_folds"] == 0
    assert few["by_corpus"]["a"]["pooled"] == out["by_corpus"]["a"]["pooled"]
    assert few["by_corpus"]["a"]["pooled"] == few["by_corpus"]["a"]["after"]
    with pytest.raises(ValueError, match="corpora has 3 items"):
        cross_fit(rows, labels, corpora=["a", "b", "a"])
    with pytest.raises(ValueError, match="give no prior with corpora"):
        cross_fit(rows, labels, corpora=corpora, prior=DEFAULT_WEIGHTS)
    with pytest.raises(ValueError, match="needs a fixed l2"):
        cross_fit(rows, labels, l2="auto", prior=lambda train: DEFAULT_WEIGHTS)


def test_a_corpus_with_enough_labels_in_all_is_fitted_in_every_fold() -> None:
    """Which corpora get a fit of their own is decided on all rows, as the stored fit decides
    it: a corpus with 24 labels (minimum 20) holds fewer than 20 in some training folds, and is
    fitted in each all the same, so its held-out figures are those of the fit it will keep."""
    rows, labels, corpora = _two_corpora(80, seed=81)
    keep = [i for i, c in enumerate(corpora) if c == "a" or i < 80 + 24]
    rows, labels, corpora = [rows[i] for i in keep], [labels[i] for i in keep], [corpora[i] for i in keep]
    assert corpora.count("b") == 24 and len(set(labels[80:])) == 2
    from self_improving_rag.evaluation.crossfit import _folds

    fold = _folds(np.array(labels, dtype=float), list(range(len(rows))), 5, seed=1)
    in_training = [sum(1 for i, c in enumerate(corpora) if c == "b" and fold[i] != f) for f in range(5)]
    assert min(in_training) < 20  # too few for a fit of its own if counted fold by fold
    out = cross_fit(rows, labels, seed=1, l2=1.0, corpora=corpora, corpus_min=20)
    assert out["by_corpus"]["b"]["own_folds"] == 5


def test_cross_fit_asks_a_callable_prior_for_each_folds_training_rows() -> None:
    rows = _synthetic_rows(40, seed=7)
    labels = _labels_from(rows, DEFAULT_WEIGHTS, seed=8)
    seen = []

    def prior(train):
        seen.append(sorted(int(i) for i in train))
        return DEFAULT_WEIGHTS

    out = cross_fit(rows, labels, seed=2, l2=1.0, folds=4, prior=prior)
    assert out["after"] == cross_fit(rows, labels, seed=2, l2=1.0, folds=4)["after"]
    assert len(seen) == 4 and all(len(t) == 30 for t in seen)
    assert sorted(i for t in seen for i in set(range(40)) - set(t)) == list(range(40))  # each row held out once


def test_a_corpus_whose_own_fits_score_worse_is_scored_by_the_fit_on_all_rows() -> None:
    """Labels of corpus b drawn from the same weights as a's: its own fits (on fewer labels) do
    no better than the fit on all rows, which then scores its rows in ``after``."""
    rows = _synthetic_rows(200, seed=5)
    truth = {**DEFAULT_WEIGHTS, "faithfulness": 6.0, "bias": DEFAULT_WEIGHTS["bias"] - 1.0}
    labels = _labels_from(rows, truth, seed=6)
    corpora = ["a"] * 170 + ["b"] * 30
    dropped = []
    for seed in range(6):
        out = cross_fit(rows, labels, seed=seed, l2=1.0, corpora=corpora, corpus_min=20)
        for key, figures in out["by_corpus"].items():
            assert figures["kept"] == (figures["own"]["brier"] <= figures["pooled"]["brier"])
            assert figures["after"] == (figures["own"] if figures["kept"] else figures["pooled"])
            if not figures["kept"]:
                dropped.append(key)
    assert dropped  # the situation arises here, so the test means something


def test_evaluate_fit_scores_a_corpus_by_its_own_fit() -> None:
    rows, labels, corpora = _two_corpora(40, seed=91)
    own = {"b": {"weights": {**DEFAULT_WEIGHTS, "faithfulness": -6.0}}}
    mixed = evaluate_fit(rows, labels, DEFAULT_WEIGHTS, corpora, own)
    b = [i for i, c in enumerate(corpora) if c == "b"]
    a = [i for i, c in enumerate(corpora) if c == "a"]
    p = [confidence(rows[i], DEFAULT_WEIGHTS) for i in a] + [confidence(rows[i], own["b"]["weights"]) for i in b]
    y = [labels[i] for i in a + b]
    assert mixed["brier"] == pytest.approx(float(np.mean((np.array(p) - np.array(y)) ** 2)))
    with pytest.raises(ValueError, match="needs corpora"):
        evaluate_fit(rows, labels, DEFAULT_WEIGHTS, None, own)


# ------------------------------------------------------------------ answer length


def test_answer_words_counts_words_without_citations() -> None:
    assert answer_words("Sherlock Holmes [1]") == pytest.approx(math.log1p(2))
    assert answer_words("In 1881 [2, 3], at Baker Street [4].") == pytest.approx(math.log1p(5))
    assert answer_words("anything", refused=True) is None
    assert answer_words(None) is None


def test_longer_answers_lower_confidence() -> None:
    base = {f: NEUTRAL_VALUES[f] for f in FEATURES}
    short = confidence({**base, "answer_words": answer_words("Lestrade [1]")})
    long = confidence({**base, "answer_words": answer_words(
        "Holmes said that the man who came to the door was the one who had written the letter [2]")})
    assert short > confidence(base) > long
    # 25 words instead of 4 take 0.5 · (log 26 − log 5) ≈ 0.82 off the logit
    assert _logit(confidence({**base, "answer_words": math.log1p(25)})) == pytest.approx(-0.5 * (math.log(26) - math.log(5)))


def test_a_fit_stored_before_answer_words_and_question_fit_keeps_its_meaning() -> None:
    added = ("answer_words", "question_fit", "question_prior", "dates_unstated", "explanation", "agreement")
    old = {k: v for k, v in {**DEFAULT_WEIGHTS, "faithfulness": 3.0}.items() if k not in added}
    rows = _synthetic_rows(30, seed=11)
    for r in rows:
        z = old["bias"] + sum(old[f] * min(max(r[f], LOGPROB_FLOOR), 0.0) if f == "mean_logprob" else old[f] * r[f]
                              for f in FEATURES if f not in added)
        assert _logit(confidence(r, old)) == pytest.approx(z)
    assert ADDED_FEATURES == {"answer_words": 0.0, "question_fit": 0.0, "question_prior": 0.0,
                              "dates_unstated": 0.0, "explanation": 0.0, "agreement": 0.0}


def test_question_fit_is_clipped_and_its_default_weight_leaves_the_confidence_unchanged() -> None:
    from self_improving_rag.confidence import QUESTION_FIT_FLOOR

    base = {"coverage": 0.8, "grounding": 0.7, "faithfulness": 0.9, "redundancy": 0.1, "mean_logprob": -0.3}
    assert DEFAULT_WEIGHTS["question_fit"] == 0.0
    assert confidence({**base, "question_fit": -1.0}) == confidence({**base, "question_fit": -15.0}) == confidence(base)
    w = {**DEFAULT_WEIGHTS, "question_fit": 0.2}
    assert _logit(confidence({**base, "question_fit": -1.0}, w)) - _logit(confidence({**base, "question_fit": -6.0}, w)) \
        == pytest.approx(1.0)
    # Clipped at the floor: below it, lower changes nothing; a missing value is the neutral one.
    assert confidence({**base, "question_fit": -500.0}, w) == confidence({**base, "question_fit": QUESTION_FIT_FLOOR}, w)
    assert confidence(base, w) == confidence({**base, "question_fit": NEUTRAL_VALUES["question_fit"]}, w)
    # question_prior, the same reading where the answer prompt holds the question, likewise.
    assert DEFAULT_WEIGHTS["question_prior"] == 0.0
    assert confidence({**base, "question_prior": -1.0}) == confidence({**base, "question_prior": -15.0}) == confidence(base)
    w = {**DEFAULT_WEIGHTS, "question_prior": 0.2}
    assert confidence({**base, "question_prior": -500.0}, w) == confidence({**base, "question_prior": QUESTION_FIT_FLOOR}, w)
    assert confidence(base, w) == confidence({**base, "question_prior": NEUTRAL_VALUES["question_prior"]}, w)
    assert _logit(confidence({**base, "question_prior": -2.0}, w)) - _logit(confidence(base, w)) == pytest.approx(0.2 * 4.0)


def test_a_feature_missing_from_every_row_keeps_its_prior_weight() -> None:
    """Rows recorded with question_fit off impute it as one constant: a fit must not turn the
    bias into a weight on it, which would act on real values once the check is turned on."""
    rows = [{k: v for k, v in r.items() if k != "question_fit"} for r in _synthetic_rows(400, seed=31)]
    truth = {**DEFAULT_WEIGHTS, "bias": DEFAULT_WEIGHTS["bias"] - 2.0}
    labels = _labels_from(rows, truth, seed=32)
    fitted = fit_weights(rows, labels)
    assert fitted["question_fit"] == DEFAULT_WEIGHTS["question_fit"] == 0.0
    assert fitted["bias"] < DEFAULT_WEIGHTS["bias"] - 1.0  # the shift went to the bias
    # Present in some rows, it is fitted.
    with_it = [{**r, "question_fit": -1.0 if y else -12.0} if i % 2 else r for i, (r, y) in enumerate(zip(rows, labels))]
    assert fit_weights(with_it, labels)["question_fit"] > 0.1


def test_dates_unstated_and_explanation_default_to_no_weight_and_act_once_fitted() -> None:
    """Both features start at weight 0 (the default confidence ignores them); with a weight, an
    unstated date and a why-question move the logit by exactly that weight, and a missing
    dates_unstated (a question without a date) is the neutral 'nothing unstated'."""
    base = {"coverage": 0.8, "grounding": 0.7, "faithfulness": 0.9, "redundancy": 0.1, "mean_logprob": -0.3}
    assert DEFAULT_WEIGHTS["dates_unstated"] == DEFAULT_WEIGHTS["explanation"] == 0.0
    assert confidence({**base, "dates_unstated": 1.0, "explanation": 1.0}) == confidence(base)
    w = {**DEFAULT_WEIGHTS, "dates_unstated": -1.5, "explanation": -2.0}
    assert _logit(confidence({**base, "dates_unstated": 1.0}, w)) - _logit(confidence({**base, "dates_unstated": 0.0}, w)) \
        == pytest.approx(-1.5)
    assert NEUTRAL_VALUES["dates_unstated"] == 0.0 and NEUTRAL_VALUES["explanation"] == 0.0
    assert confidence(base, w) == confidence({**base, "dates_unstated": 0.0, "explanation": 0.0}, w)
    assert _logit(confidence({**base, "explanation": 1.0}, w)) - _logit(confidence(base, w)) == pytest.approx(-2.0)


def test_agreement_defaults_to_no_weight_and_acts_once_fitted() -> None:
    """Sampled replies are off by default and their weight is 0: the default confidence is the
    same whatever the agreement; a fit on answers that recorded it moves the logit by its weight
    per unit, and an answer without samples gets the neutral value (half agree)."""
    base = {"coverage": 0.8, "grounding": 0.7, "faithfulness": 0.9, "redundancy": 0.1, "mean_logprob": -0.3}
    assert DEFAULT_WEIGHTS["agreement"] == 0.0
    assert confidence({**base, "agreement": 0.0}) == confidence({**base, "agreement": 1.0}) == confidence(base)
    w = {**DEFAULT_WEIGHTS, "agreement": 2.0}
    assert _logit(confidence({**base, "agreement": 1.0}, w)) - _logit(confidence({**base, "agreement": 0.25}, w)) \
        == pytest.approx(1.5)
    assert confidence(base, w) == confidence({**base, "agreement": NEUTRAL_VALUES["agreement"]}, w) \
        == confidence({**base, "agreement": 0.5}, w)
    # Labels that follow agreement give it a positive weight; rows without it keep the prior.
    rows = _synthetic_rows(400, seed=41, agreement=True)
    labels = [int(r["agreement"] >= 0.5) if i % 3 else 1 - int(r["agreement"] >= 0.5) for i, r in enumerate(rows)]
    assert fit_weights(rows, labels)["agreement"] > 0.5
    without = [{k: v for k, v in r.items() if k != "agreement"} for r in rows]
    assert fit_weights(without, labels)["agreement"] == 0.0
