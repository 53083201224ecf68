"""The shipped confidence model: loaded by a new store, and the answer bar read off its curve."""

from __future__ import annotations

import json

import pytest

from self_improving_rag.config import load_config
from self_improving_rag.evaluation import shipped
from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence

CURVE = [{"bar": 0.3, "precision": 0.55, "coverage": 0.9}, {"bar": 0.45, "precision": 0.72, "coverage": 0.7},
         {"bar": 0.6, "precision": 0.83, "coverage": 0.5}, {"bar": 0.9, "precision": 0.91, "coverage": 0.2}]


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    # Hand-set weights scaled: a model that differs from the defaults, so its use can be seen.
    weights = {k: v * 0.5 for k, v in DEFAULT_WEIGHTS.items()}
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps({"weights": weights, "curve": CURVE, "reliability": [
        {"lo": 0.5, "hi": 0.6, "count": 40, "accuracy": 0.6}, {"lo": 0.6, "hi": 0.7, "count": 30, "accuracy": 0.7}],
        "provenance": {"commit": "abc"}}))
    monkeypatch.setattr(shipped, "PATH", path)
    shipped.load.cache_clear()
    yield weights
    shipped.load.cache_clear()


def test_target_precision_picks_the_bar_from_the_curve(model_file):
    assert shipped.gate(0.8).bar == 0.6 and shipped.gate(0.7).bar == 0.45
    assert shipped.gate(0.95).bar == 0.9  # out of the curve's reach: its strictest bar
    assert shipped.gate(None) is None
    # The loop's own bar does not move with the target.
    assert load_config(overrides=["loop.target_precision=0.8"]).loop.answer_threshold == 0.5


def test_meaning_reads_the_held_out_reliability(model_file):
    assert shipped.meaning(0.55) == ("answers at this confidence were right 60% of the time on corpora the "
                                     "model was not fitted on (n=40)")
    assert shipped.meaning(0.95) is None


def _with_target(fake_config, target):
    return fake_config.model_copy(update={"loop": fake_config.loop.model_copy(update={"target_precision": target})})


@pytest.mark.parametrize("target", [0.8, 0.95])
def test_the_shipped_model_decides_what_is_returned(model_file, make_engine, fake_config, target):
    eng, _, _ = make_engine(["Clara Venn built the lighthouse in 1852 [1]."], config=_with_target(fake_config, target))
    ans = eng.ask("Who built the lighthouse of Marrow Point?")
    first = ans.attempts[0].signals.confidence
    # The loop scores and retries with its own (hand-set) weights, as without a target ...
    assert first.value == pytest.approx(confidence(first.detail["features"], DEFAULT_WEIGHTS))
    assert len(ans.attempts) == 1 and ans.attempts[0].attribution.failure == "NONE"
    # ... and the shipped model's confidence, against the bar of its curve, decides the return.
    held_out = confidence(first.detail["features"], model_file)
    bar = shipped.gate(target).bar
    assert ans.refused is (held_out < bar)
    if ans.refused:
        assert "loop.target_precision" in ans.refusal_reason
        # The answer withheld is named, for the user to check against the passages shown.
        assert f"the best answer withheld, at {held_out:.2f}: 'Clara Venn built the lighthouse in 1852.'" \
            in ans.refusal_reason
        assert ans.confidence == pytest.approx(1 - held_out)
    else:
        assert ans.confidence == pytest.approx(held_out)


def test_the_curve_covers_both_outcomes(model_file, make_engine, fake_config):
    # The test above sees a return at one target and a refusal at the other.
    eng, _, _ = make_engine(["Clara Venn built the lighthouse in 1852 [1]."], config=_with_target(fake_config, 0.8))
    conf = confidence(eng.ask("Who built the lighthouse of Marrow Point?").attempts[0].signals.confidence
                      .detail["features"], model_file)
    assert shipped.gate(0.8).bar <= conf < shipped.gate(0.95).bar


def test_without_a_target_the_loop_alone_decides(model_file, make_engine):
    eng, _, _ = make_engine(["Clara Venn built the lighthouse in 1852 [1]."], memory=False)
    ans = eng.ask("Who built the lighthouse of Marrow Point?")
    first = ans.attempts[0].signals.confidence
    assert "(default weights)" in first.reason and not eng.returns_checked
    assert not ans.refused and ans.confidence == pytest.approx(first.value)


def test_the_loop_off_view_applies_the_same_check(model_file):
    from self_improving_rag.batch import single_attempt_row

    features = {"coverage": 0.9, "grounding": 0.9, "faithfulness": 0.9, "redundancy": 0.1, "mean_logprob": -0.1,
                "refusal": 0.0}
    row = {"id": "q", "answer": "x", "attempts": [{"number": 1, "answer": "x", "failure": "NONE", "failure_reason": "",
                                                    "timings_ms": {}, "signals": {"confidence": {
                                                        "value": 0.97, "detail": {"features": features}}}}]}
    held_out = confidence(features, model_file)
    assert not single_attempt_row(row, 0.5)["refused"]
    for target in (0.8, 0.95):
        out = single_attempt_row(row, 0.5, shipped.gate(target))
        assert out["refused"] is (held_out < shipped.gate(target).bar)
        assert out["confidence"] == pytest.approx(held_out)
