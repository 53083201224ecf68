"""The cold-start protocol: the replay of recorded attempts, and the whole command on fakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from self_improving_rag import decision
from self_improving_rag.evaluation import coldstart as cs
from self_improving_rag.evaluation import shipped
from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence
from tests.conftest import DOCS, REPO, batch_overrides

GOOD = {"coverage": 0.9, "grounding": 0.9, "faithfulness": 0.9, "redundancy": 0.1, "mean_logprob": -0.1,
        "refusal": 0.0}
WEAK = {"coverage": 0.5, "grounding": 0.5, "faithfulness": 0.5, "redundancy": 0.3, "mean_logprob": -1.0,
        "refusal": 0.0}


def attempt(n, answer="x", failure="NONE", features=GOOD, correct=True, tokens=100, seconds=1.0):
    return cs.RecordedAttempt(n, answer, failure, dict(features), tokens, seconds, correct if answer else None)


def question(*attempts, kind="answerable", corpus="c"):
    return cs.RecordedQuestion(corpus, "q", kind, tuple(attempts))


def test_replay_returns_the_most_confident_acceptable_attempt_or_refuses():
    q = question(attempt(1, features=WEAK, failure="LOW_CONFIDENCE", correct=False), attempt(2, correct=True))
    low, high = confidence(WEAK), confidence(GOOD)
    # A bar both attempts clear: the more confident one is returned; every attempt was made.
    d = cs.replay(q, None, low - 0.01, 0.0)
    assert d.answered and d.correct and d.confidence == pytest.approx(high) and d.prompt_tokens == 200
    # A bar only the second clears: the same. A bar neither clears: a refusal of the best.
    assert cs.replay(q, None, (low + high) / 2, 0.0).correct
    d = cs.replay(q, None, high + 0.001, 0.0)
    assert not d.answered and not d.correct
    assert d.confidence == pytest.approx(decision.refusal_confidence(high))
    # The retry margin raises the second attempt's bar, as the engine's.
    assert not cs.replay(q, None, (low + high) / 2, high).answered


def test_replay_keeps_vetoes_and_refuses_rightly_an_unanswerable_question():
    vetoed = question(attempt(1, failure="HALLUCINATION_RISK"))
    assert not cs.replay(vetoed, None, 0.0, 0.0).answered  # a veto holds whatever the weights
    declined = question(attempt(1, answer=None, failure="LOW_CONFIDENCE", features={**WEAK, "refusal": 1.0}),
                        kind="unanswerable")
    d = cs.replay(declined, None, 0.0, 0.0)
    assert not d.answered and d.correct
    assert d.confidence == pytest.approx(decision.refusal_confidence(confidence({**WEAK, "refusal": 1.0})))


def test_replay_agrees_with_the_engine_under_its_own_weights():
    # Decided with the weights and bar of the loop that recorded it, a question ends as recorded.
    conf = confidence(GOOD)
    q = question(attempt(1, features=WEAK, failure="LOW_CONFIDENCE"), attempt(2, failure="NONE"))
    d = cs.replay(q, DEFAULT_WEIGHTS, 0.5, 0.1)
    assert d.answered and d.confidence == pytest.approx(conf)


def test_figures_and_bar_for():
    ds = [cs.Decision(question(attempt(1)), True, True, 0.9, 10, 1.0),
          cs.Decision(question(attempt(1), kind="unanswerable"), False, True, 0.8, 10, 2.0),
          cs.Decision(question(attempt(1)), True, False, 0.7, 10, 3.0)]
    f = cs.figures(ds)
    assert f["precision"] == 0.5 and f["unanswerable_refused"] == 1.0 and f["answered_right"] == 0.5
    assert f["false_refusals"] == 0.0 and f["n_returned"] == 2
    pts = [{"bar": 0.3, "precision": 0.6}, {"bar": 0.5, "precision": 0.82}, {"bar": 0.7, "precision": 0.9}]
    assert shipped.bar_for(pts, 0.8) == 0.5 and shipped.bar_for(pts, 0.95) == 0.7


def _batch(tmp_path: Path, name: str, doc: str, rows: list[dict], reply: str) -> Path:
    docs = tmp_path / f"docs-{name}"
    docs.mkdir()
    (docs / doc).write_text(DOCS[doc])
    qa = tmp_path / f"{name}.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"name": name, "corpus": [str(docs)], "index": str(tmp_path / "index" / name),
            "questions": {"file": str(qa)}, "output_dir": str(tmp_path / "runs"),
            "overrides": {"generator.replies": [reply]}}
    f = tmp_path / f"batch-{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def test_the_protocol_runs_end_to_end_on_fakes(tmp_path):
    harbour = _batch(tmp_path, "harbour", "harbour.md", [
        {"id": "h1", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"],
         "answerable": True},
        {"id": "h2", "question": "Who rowed out to the schooner Greyling in the storm?", "answers": ["Tobias Lune"],
         "answerable": True},
        {"id": "h3", "question": "What is the name of the harbour master's dog?", "answers": [], "answerable": False},
    ], "Clara Venn built it [1].")
    orchard = _batch(tmp_path, "orchard", "orchard.txt", [
        {"id": "o1", "question": "Who planted the Grandmother tree in the orchard?", "answers": ["Ansel Brook"],
         "answerable": True},
        {"id": "o2", "question": "How many pear trees grow in the orchard?", "answers": ["nine"], "answerable": True},
        {"id": "o3", "question": "What breed is the miller's horse?", "answers": [], "answerable": False},
    ], "Ansel Brook planted it [1].")
    out, ship = tmp_path / "coldstart", tmp_path / "shipped.json"
    sets = [x for o in batch_overrides(tmp_path) for x in ("--set", o)]
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "coldstart.py"), str(harbour), str(orchard),
                        "--record", "--out", str(out), "--ship", str(ship), *sets],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "## before" in r.stdout and "## after" in r.stdout and "| pooled |" in r.stdout
    report = json.loads((out / "coldstart.json").read_text())
    assert set(report["folds"]) == {"harbour", "orchard"}
    pooled = report["before"]["pooled"]["figures"]
    assert pooled["n"] == 6 and pooled["n_unanswerable"] == 2
    assert (out / "risk_coverage.png").stat().st_size > 1000
    model = json.loads(ship.read_text())
    assert set(model["weights"]) >= {"bias", "coverage"} and model["curve"] and model["provenance"]["corpora"]
    # Each corpus was answered from its own empty memory store.
    assert sorted(p.name for p in (out / "memory").glob("*.db")) == ["harbour.db", "orchard.db"]
