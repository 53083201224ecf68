"""The shipped confidence model: loaded by a new store, and the answer bar read off its curve."""

from __future__ import annotations

import json

import pytest

from self_improving_rag.config import load_config
from self_improving_rag.evaluation import shipped
from self_improving_rag.confidence import DEFAULT_WEIGHTS

CURVE = [{"bar": 0.3, "precision": 0.55, "coverage": 0.9}, {"bar": 0.45, "precision": 0.72, "coverage": 0.7},
         {"bar": 0.6, "precision": 0.83, "coverage": 0.5}, {"bar": 0.8, "precision": 0.91, "coverage": 0.2}]


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
    assert load_config(overrides=["loop.target_precision=0.8"]).loop.answer_threshold == 0.6
    assert load_config(overrides=["loop.target_precision=0.7"]).loop.answer_threshold == 0.45
    # Out of the curve's reach: its strictest bar.
    assert load_config(overrides=["loop.target_precision=0.95"]).loop.answer_threshold == 0.8
    # A raw bar set by the user wins; without a target the bar is 0.5.
    assert load_config(overrides=["loop.answer_threshold=0.33"]).loop.answer_threshold == 0.33
    assert load_config(overrides=["loop.target_precision=null"]).loop.answer_threshold == 0.5


def test_meaning_reads_the_held_out_reliability(model_file):
    assert shipped.meaning(0.55) == ("answers at this confidence were right 60% of the time on corpora the "
                                     "model was not fitted on (n=40)")
    assert shipped.meaning(0.95) is None


def test_a_new_store_scores_with_the_shipped_weights(model_file, make_engine, fake_config):
    config = fake_config.model_copy(update={"loop": fake_config.loop.model_copy(update={"target_precision": 0.8})})
    eng, _, store = make_engine(["Clara Venn built the lighthouse in 1852 [1]."], config=config)
    ans = eng.ask("Who built the lighthouse of Marrow Point?")
    first = ans.attempts[0].signals.confidence
    assert "(shipped weights)" in first.reason
    from self_improving_rag.confidence import confidence

    assert first.value == pytest.approx(confidence(first.detail["features"], model_file))
    # Without a target the hand-set weights score, as before.
    eng2, _, _ = make_engine(["Clara Venn built the lighthouse in 1852 [1]."], memory=False)
    second = eng2.ask("Who built the lighthouse of Marrow Point?").attempts[0].signals.confidence
    assert "(default weights)" in second.reason
    assert second.value == pytest.approx(confidence(second.detail["features"], DEFAULT_WEIGHTS))
