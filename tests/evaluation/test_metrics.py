"""Hand-computed examples and properties of the evaluation metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from self_improving_rag.evaluation.answer_metrics import (
    contains_gold,
    exact_match,
    normalize_answer,
    refusal_metrics,
    token_f1,
)
from self_improving_rag.evaluation.confidence_metrics import (
    accuracy_at_coverage,
    auroc,
    auroc_interval,
    ece_noise_floor,
    expected_calibration_error,
    percentiles,
    reliability_bins,
    risk_coverage,
)
from self_improving_rag.evaluation.retrieval_metrics import evidence_hit, mrr, recall_at_k

# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Book of Life", "book of life"),
        ("“The Book of Life,”", "book of life"),  # curly quotes and comma go
        ("  An   apple\n", "apple"),
        ("Gaboriau's Lecoq", "gaboriaus lecoq"),
        ("Holmes—the detective", "holmes detective"),  # em dash separates words
        ("crest-fallen", "crestfallen"),  # ASCII hyphen deleted, as in SQuAD
        ("theatre", "theatre"),  # articles only as whole words
        ("", ""),
        ("Seven wives", "7 wives"),  # number words in digits
        ("the Third pillar", "3rd pillar"),
        ("twenty-one", "twentyone"),  # a hyphenated number stays one (unmapped) word
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_exact_match_uses_best_gold() -> None:
    assert exact_match("the Eloi.", ["Morlocks", "Eloi"]) == 1.0
    assert exact_match("Eloi people", ["Eloi"]) == 0.0
    assert exact_match("Eloi", "The Eloi") == 1.0  # a bare string is one gold


def test_numbers_in_words_or_digits_grade_alike() -> None:
    assert exact_match("7", ["seven"]) == 1.0
    assert contains_gold("about 7 lawsuits", ["about seven"]) == 1.0
    assert contains_gold("fourteen pounds a week", ["14 pounds"]) == 1.0
    assert exact_match("8", ["seven"]) == 0.0
    # "one" stays a word: "no one knew" does not contain the gold "1".
    assert contains_gold("no one knew", ["1"]) == 0.0


def test_token_f1_hand_computed() -> None:
    # pred tokens {john, underwood}, gold {john, underwood, and, sons}: P = 1, R = 1/2, F1 = 2/3
    assert token_f1("John Underwood", ["John Underwood and Sons"]) == pytest.approx(2 / 3)
    # pred {richmond, in, surrey}, gold {richmond, surrey}: P = 2/3, R = 1, F1 = 0.8
    assert token_f1("Richmond in Surrey", ["Richmond, Surrey"]) == pytest.approx(0.8)
    # max over golds: second gold matches exactly
    assert token_f1("Lecoq", ["Gaboriau's Lecoq", "Lecoq"]) == 1.0
    assert token_f1("Watson", ["Holmes"]) == 0.0
    # repeated tokens count as a multiset: pred {a1: "x x"} vs gold "x": c = 1, P = 1/2, R = 1
    assert token_f1("x x", ["x"]) == pytest.approx(2 / 3)


def test_token_f1_empty_after_normalisation() -> None:
    assert token_f1("the", ["a"]) == 1.0  # both normalise to nothing
    assert token_f1("", ["Eloi"]) == 0.0


def test_contains_gold_on_token_boundaries() -> None:
    assert contains_gold("It was the Eloi, I think.", ["Eloi"]) == 1.0
    assert contains_gold("Eloise", ["Eloi"]) == 0.0
    assert contains_gold("Morlocks", ["Eloi", "the Morlocks"]) == 1.0
    assert contains_gold("anything", ["The"]) == 0.0


@pytest.mark.parametrize("fn", [exact_match, token_f1, contains_gold])
def test_answer_metrics_reject_empty_golds(fn) -> None:
    with pytest.raises(ValueError, match="unanswerable"):
        fn("anything", [])


_words = st.lists(st.sampled_from(["the", "a", "Eloi", "eloi", "Morlocks", "time", "machine", "x", ",", "“"]), max_size=6)
_answer = _words.map(" ".join)


@given(_answer, st.lists(_answer, min_size=1, max_size=3))
def test_em_le_f1_le_one(pred: str, golds: list[str]) -> None:
    em, f1, cg = exact_match(pred, golds), token_f1(pred, golds), contains_gold(pred, golds)
    assert 0.0 <= em <= f1 <= 1.0
    assert em <= cg <= 1.0


@given(st.text(max_size=40))
def test_normalize_is_idempotent(s: str) -> None:
    once = normalize_answer(s)
    assert normalize_answer(once) == once


# --------------------------------------------------------------------------- refusals


def test_refusal_metrics_hand_computed() -> None:
    # 6 questions: 2 unanswerable (indices 0, 1); refused 0, 2, 3.
    answerable = [False, False, True, True, True, True]
    refused = [True, False, True, True, False, False]
    out = refusal_metrics(refused, answerable)
    assert out["precision"] == pytest.approx(1 / 3)  # 1 of 3 refusals was right
    assert out["recall"] == pytest.approx(1 / 2)  # 1 of 2 unanswerables refused
    assert out["f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert out["false_refusal_rate"] == pytest.approx(2 / 4)
    assert (out["n"], out["n_refused"], out["n_unanswerable"], out["n_answerable"]) == (6, 3, 2, 4)
    assert out["notes"] == {}


def test_refusal_metrics_none_without_denominator() -> None:
    out = refusal_metrics([False, False], [True, True])
    assert out["precision"] is None and "refusals" in out["notes"]["precision"]
    assert out["recall"] is None and "unanswerable" in out["notes"]["recall"]
    assert out["f1"] is None
    assert out["false_refusal_rate"] == 0.0


def test_refusal_metrics_f1_zero_when_all_wrong() -> None:
    out = refusal_metrics([True, False], [True, False])
    assert out["precision"] == 0.0 and out["recall"] == 0.0 and out["f1"] == 0.0


def test_refusal_metrics_length_mismatch() -> None:
    with pytest.raises(ValueError, match="items"):
        refusal_metrics([True], [True, False])


# --------------------------------------------------------------------------- selective prediction


def test_aurc_perfect_vs_reversed() -> None:
    conf = [0.9, 0.8, 0.7, 0.6]
    # Perfect: risks at k = 1..4 are 0, 0, 1/3, 1/2 -> AURC = (0 + 0 + 1/3 + 1/2) / 4
    good = risk_coverage(conf, [1, 1, 0, 0])
    assert good["aurc"] == pytest.approx((1 / 3 + 1 / 2) / 4)
    assert good["e_aurc"] == pytest.approx(0.0)
    # Reversed: risks 1, 1, 2/3, 1/2 -> AURC = (1 + 1 + 2/3 + 1/2) / 4
    bad = risk_coverage(conf, [0, 0, 1, 1])
    assert bad["aurc"] == pytest.approx((2 + 2 / 3 + 1 / 2) / 4)
    assert bad["e_aurc"] == pytest.approx(bad["aurc"] - good["aurc"])
    assert [p["coverage"] for p in bad["curve"]] == [0.25, 0.5, 0.75, 1.0]
    assert [p["risk"] for p in good["curve"]] == pytest.approx([0.0, 0.0, 1 / 3, 0.5])


def test_aurc_ties_form_one_point() -> None:
    # All equal confidences: no threshold separates them; the curve is one point at
    # coverage 1 and AURC equals the overall risk.
    out = risk_coverage([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 1])
    assert len(out["curve"]) == 1
    assert out["curve"][0] == {"threshold": 0.5, "coverage": 1.0, "risk": 0.25}
    assert out["aurc"] == pytest.approx(0.25)
    # Order of tied items must not change the result.
    assert risk_coverage([0.5] * 4, [0, 1, 1, 1])["aurc"] == pytest.approx(0.25)


def test_accuracy_at_coverage() -> None:
    conf = [0.1 * i for i in range(10, 0, -1)]  # 1.0, 0.9, ..., 0.1
    correct = [1] * 7 + [0] * 3
    # top ceil(0.8 * 10) = 8 items: 7 correct
    assert accuracy_at_coverage(conf, correct, 0.8) == pytest.approx(7 / 8)
    assert risk_coverage(conf, correct)["accuracy_at_coverage"] == pytest.approx(7 / 8)
    assert accuracy_at_coverage(conf, correct, 1.0) == pytest.approx(0.7)
    assert accuracy_at_coverage([], [], 0.8) is None
    with pytest.raises(ValueError, match="coverage"):
        accuracy_at_coverage(conf, correct, 0.0)


def test_risk_coverage_empty_is_none_with_note() -> None:
    out = risk_coverage([], [])
    assert out["aurc"] is None and out["notes"]["aurc"]


def test_ece_perfectly_calibrated_is_zero() -> None:
    # 10 items at 0.7 with 7 correct, 10 items at 0.2 with 2 correct.
    conf = [0.7] * 10 + [0.2] * 10
    correct = [1] * 7 + [0] * 3 + [1] * 2 + [0] * 8
    assert expected_calibration_error(conf, correct) == pytest.approx(0.0)


def test_ece_hand_computed() -> None:
    # bin [0.9, 1.0]: 4 items, conf 0.95, accuracy 0.5 -> gap 0.45, weight 4/5
    # bin [0.1, 0.2): 1 item, conf 0.1, accuracy 0 -> gap 0.1, weight 1/5
    conf = [0.95, 0.95, 0.95, 0.95, 0.1]
    correct = [1, 1, 0, 0, 0]
    assert expected_calibration_error(conf, correct) == pytest.approx(0.8 * 0.45 + 0.2 * 0.1)
    bins = reliability_bins(conf, correct)
    assert len(bins) == 10
    top = bins[9]
    assert (top["lo"], top["hi"], top["count"]) == (0.9, 1.0, 4)
    assert top["mean_confidence"] == pytest.approx(0.95) and top["accuracy"] == 0.5
    assert bins[5]["count"] == 0 and bins[5]["accuracy"] is None and bins[5]["gap"] is None


def test_ece_confidence_one_lands_in_last_bin() -> None:
    assert reliability_bins([1.0], [1], n_bins=4)[3]["count"] == 1


def test_ece_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error([1.2], [1])
    with pytest.raises(ValueError, match="items"):
        expected_calibration_error([0.5, 0.5], [1])
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([0.5], [1], n_bins=0)
    assert expected_calibration_error([], []) is None


_conf_lists = st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=40)


@given(_conf_lists)
def test_selective_metrics_in_unit_interval(pairs) -> None:
    conf = [c for c, _ in pairs]
    correct = [int(y) for _, y in pairs]
    out = risk_coverage(conf, correct)
    assert 0.0 <= out["aurc"] <= 1.0
    assert -1e-12 <= out["e_aurc"] <= 1.0
    assert 0.0 <= out["accuracy_at_coverage"] <= 1.0
    assert out["curve"][-1]["coverage"] == 1.0
    assert out["curve"][-1]["risk"] == pytest.approx(1 - sum(correct) / len(correct))
    ece = expected_calibration_error(conf, correct)
    assert 0.0 <= ece <= 1.0


# --------------------------------------------------------------------------- AUROC


def test_auroc_hand_computed() -> None:
    assert auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == 0.0
    # positive at 3; negatives at 1, 2, 3: wins 2, tie 1 (counts 1/2) -> 2.5 / 3
    assert auroc([1, 2, 3, 3], [0, 0, 1, 0]) == pytest.approx(2.5 / 3)
    assert auroc([0.5, 0.5], [0, 1]) == 0.5


def test_auroc_single_class_is_none() -> None:
    assert auroc([0.1, 0.9], [1, 1]) is None
    assert auroc([], []) is None


def test_auroc_rejects_bad_labels() -> None:
    with pytest.raises(ValueError, match="labels"):
        auroc([0.1, 0.2], [0, 2])


@given(st.lists(st.tuples(st.integers(-3, 3), st.booleans()), min_size=2, max_size=30))
def test_auroc_antisymmetric(pairs) -> None:
    scores = [float(s) for s, _ in pairs]
    labels = [y for _, y in pairs]
    a = auroc(scores, labels)
    if a is None:
        assert len(set(labels)) == 1
        return
    assert 0.0 <= a <= 1.0
    assert auroc([-s for s in scores], labels) == pytest.approx(1 - a)


@settings(max_examples=50)
@given(st.lists(st.tuples(st.floats(-5, 5), st.booleans()), min_size=2, max_size=20))
def test_auroc_matches_pairwise_definition(pairs) -> None:
    pos = [s for s, y in pairs if y]
    neg = [s for s, y in pairs if not y]
    a = auroc([s for s, _ in pairs], [y for _, y in pairs])
    if not pos or not neg:
        assert a is None
        return
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    assert a == pytest.approx(wins / (len(pos) * len(neg)))


# --------------------------------------------------------------------------- percentiles


def test_percentiles() -> None:
    out = percentiles([1, 2, 3, 4, 5])
    assert out == {"p50": 3.0, "p95": pytest.approx(4.8)}  # 4 + 0.8 * (5 - 4)
    assert percentiles([10.0], ps=(0, 99.9)) == {"p0": 10.0, "p99.9": 10.0}
    assert percentiles([]) == {"p50": None, "p95": None}
    with pytest.raises(ValueError, match="percentile"):
        percentiles([1.0], ps=(101,))


# --------------------------------------------------------------------------- retrieval


def test_evidence_hit_collapses_whitespace_only() -> None:
    chunk = "“Lecoq was a miserable\r\n   bungler,” he said,\nin an angry voice"
    assert evidence_hit(chunk, "“Lecoq was a miserable bungler,” he said, in an angry voice")
    assert evidence_hit(chunk, "miserable\nbungler")
    # Characters are exact: straight quotes do not match curly ones.
    assert not evidence_hit(chunk, '"Lecoq was a miserable bungler,"')
    with pytest.raises(ValueError, match="empty"):
        evidence_hit(chunk, "  \n")


def test_recall_and_mrr_hand_computed() -> None:
    hits = [
        [False, True, False],  # first hit at rank 2
        [True, False, False],  # rank 1
        [False, False, False],  # none
        [False, False, True],  # rank 3
    ]
    assert recall_at_k(hits, 1) == pytest.approx(1 / 4)
    assert recall_at_k(hits, 2) == pytest.approx(2 / 4)
    assert recall_at_k(hits, 3) == pytest.approx(3 / 4)
    assert mrr(hits) == pytest.approx((1 / 2 + 1 + 0 + 1 / 3) / 4)
    assert mrr(hits, k=2) == pytest.approx((1 / 2 + 1) / 4)
    assert recall_at_k([], 5) is None and mrr([]) is None
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(hits, 0)


@given(st.lists(st.lists(st.booleans(), max_size=8), min_size=1, max_size=10), st.integers(1, 8))
def test_retrieval_metrics_bounded_and_monotone(hits, k) -> None:
    r = recall_at_k(hits, k)
    assert 0.0 <= r <= 1.0
    assert recall_at_k(hits, k + 1) >= r
    m = mrr(hits, k)
    assert 0.0 <= m <= r + 1e-12  # each query contributes at most 1 and only if recalled
    assert not math.isnan(m)


def test_bins_hold_their_lower_edge_despite_float_rounding():
    from self_improving_rag.confidence import bin_index
    from self_improving_rag.evaluation.confidence_metrics import reliability_bins

    # 0.57 * 100 is 56.99999999999999 in floating point: the value still belongs to [0.57, 0.58).
    for value in (0.29, 0.57, 0.58):
        bins = reliability_bins([value], [1], n_bins=100)
        (hit,) = [b for b in bins if b["count"]]
        assert hit["lo"] == pytest.approx(value)
    assert bin_index(1.0, 10) == 9 and bin_index(0.0, 10) == 0 and bin_index(0.1, 10) == 1


def test_ece_noise_floor_shrinks_with_more_labels() -> None:
    import numpy as np

    assert ece_noise_floor([]) is None
    # Certain confidences (0 or 1) draw labels that always agree with them: no noise.
    assert ece_noise_floor([0.0, 1.0, 1.0, 0.0]) == pytest.approx(0.0)
    rng = np.random.default_rng(1)
    few, many = rng.uniform(0.05, 0.95, 22).tolist(), rng.uniform(0.05, 0.95, 500).tolist()
    # One label at 0.5: |y - 0.5| is 0.5 whatever y is.
    assert ece_noise_floor([0.5]) == pytest.approx(0.5)
    assert 0.15 < ece_noise_floor(few) < 0.3
    assert ece_noise_floor(many) < 0.07
    # Seeded: the same figure every time; another seed moves it by sampling noise only.
    assert ece_noise_floor(few, seed=3) == ece_noise_floor(few, seed=3)
    assert ece_noise_floor(few, seed=3) == pytest.approx(ece_noise_floor(few, seed=4), abs=0.03)


def test_typographic_hyphens_are_deleted_like_the_ascii_one() -> None:
    assert normalize_answer("crested night\u2010jar") == normalize_answer("crested night-jar") == "crested nightjar"
    assert normalize_answer("night\u2011jar") == "nightjar"
    assert normalize_answer("night\u00adjar") == "nightjar"  # a soft hyphen (&shy;) is no character
    assert normalize_answer("Holmes\u2014the") == "holmes"  # a long dash still parts words


# --------------------------------------------------------------------------- AUROC's interval


def _normal_scores(rng, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    # Right answers score N(shift, 1), wrong ones N(0, 1): the population AUROC is Φ(shift / √2).
    y = rng.random(n) < 0.5
    return rng.normal(size=n) + shift * y, y


def test_auroc_interval_holds_the_population_auroc_about_95_times_in_100() -> None:
    shift = 1.0
    truth = 0.5 * (1 + math.erf(shift / 2))  # Φ(shift / √2) = 0.760
    rng = np.random.default_rng(7)
    held = 0
    for k in range(200):
        s, y = _normal_scores(rng, 120, shift)
        iv = auroc_interval(s.tolist(), y.tolist(), resamples=300, seed=k)
        assert iv["low"] <= auroc(s.tolist(), y.tolist()) <= iv["high"]
        held += iv["low"] <= truth <= iv["high"]
    # Binomial(200, 0.95) lies in [180, 198] with probability above 0.99; the percentile
    # bootstrap runs a little narrow on 120 labels, so the lower end is met, not exceeded by much.
    assert 176 <= held <= 199


def test_auroc_interval_draws_a_questions_answers_together() -> None:
    rng = np.random.default_rng(3)
    s, y = _normal_scores(rng, 80, 1.0)
    # Each question answered five times, alike: five rows that are one question's evidence.
    s5, y5, g5 = np.repeat(s, 5), np.repeat(y, 5), np.repeat(np.arange(80), 5)
    one = auroc_interval(s.tolist(), y.tolist())
    grouped = auroc_interval(s5.tolist(), y5.tolist(), g5.tolist())
    loose = auroc_interval(s5.tolist(), y5.tolist())  # every row taken as a question of its own
    width = lambda iv: iv["high"] - iv["low"]  # noqa: E731
    # Drawn by question, the repeats add nothing: as wide as the questions alone. Drawn by row,
    # the interval narrows by about √5, a certainty that five copies do not give.
    assert width(grouped) == pytest.approx(width(one), rel=0.15)
    assert width(loose) < width(grouped) / 1.8


def test_auroc_interval_is_repeatable_and_none_where_auroc_is() -> None:
    s, y = _normal_scores(np.random.default_rng(5), 60, 0.8)
    assert auroc_interval(s.tolist(), y.tolist(), seed=4) == auroc_interval(s.tolist(), y.tolist(), seed=4)
    assert auroc_interval(s.tolist(), y.tolist())["resamples"] == 1000
    assert auroc_interval([0.2, 0.9, 0.4], [True, True, True]) is None  # one class: no AUROC
    assert auroc_interval([0.2, 0.9, 0.4], [1, 0, 1], groups=["q", "q", "q"]) is None  # one question
    # Perfectly ranked answers stay perfectly ranked in every draw.
    ten = [0.1 * k for k in range(10)]
    # (a draw of ten with one kind only, chance 2 / 2**10, is left out)
    assert auroc_interval(ten, [0] * 5 + [1] * 5) == {"low": 1.0, "high": 1.0, "level": 0.95,
                                                     "resamples": pytest.approx(1000, abs=20)}
    # Four right answers: too few to draw from, however well they are ranked.
    assert auroc_interval(ten[1:], [0] * 5 + [1] * 4) is None
    # Five right rows that are one question's answers are one question.
    assert auroc_interval(ten, [0] * 5 + [1] * 5, groups=[0, 1, 2, 3, 4, 5, 5, 5, 5, 5]) is None
    with pytest.raises(ValueError, match="level"):
        auroc_interval([0.1, 0.9], [0, 1], level=95)
    with pytest.raises(ValueError, match="groups"):
        auroc_interval([0.1, 0.9], [0, 1], groups=["a"])
