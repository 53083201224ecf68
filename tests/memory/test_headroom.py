"""benchmarks/headroom.py: first attempts of the same questions paired across stored runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.append(str(_HERE))

from memory_testkit import STRATEGY_A, STRATEGY_B, make_answer, make_attempt  # noqa: E402

from self_improving_rag.memory import MemoryStore  # noqa: E402

BENCH = _HERE.parents[1] / "benchmarks"


def _headroom(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # headroom imports its sibling `common`; undone after the test
    spec = importlib.util.spec_from_file_location("headroom", BENCH / "headroom.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _store(path: Path, runs: list[tuple[str, str, object, str]]) -> Path:
    store = MemoryStore(path)
    for question, query_class, strategy, failure in runs:
        first = make_attempt(1, strategy=strategy, failure=failure, answer=None if failure != "NONE" else "x [1]")
        store.record(make_answer(question, (first,), query_class=query_class, refused=failure != "NONE"))
    store.close()
    return path


def test_pairs_count_gains_losses_and_the_per_question_bound(tmp_path, monkeypatch):
    # Run 1: the default (A) first everywhere. Run 2: B first on the same questions.
    a = _store(tmp_path / "a.db", [("Who rang?", "who", STRATEGY_A, "WEAK_RETRIEVAL"),
                                   ("Who left?", "who", STRATEGY_A, "NONE"),
                                   ("What fell?", "what", STRATEGY_A, "NONE"),
                                   ("Where is it?", "where", STRATEGY_A, "MISSED_ANSWER")])
    b = _store(tmp_path / "b.db", [("Who  rang?", "who", STRATEGY_B, "NONE"),  # spacing differs: same question
                                   ("Who left?", "who", STRATEGY_B, "NONE"),
                                   ("What fell?", "what", STRATEGY_B, "LOW_CONFIDENCE"),
                                   ("Where is it?", "where", STRATEGY_B, "WEAK_RETRIEVAL"),
                                   ("Why not?", "why", STRATEGY_B, "NONE")])  # never asked with A: no pair
    h = _headroom(monkeypatch)
    seen, classes = h.first_attempts([a, b])
    assert len(seen) == 5 and classes["Who rang?"] == "who"
    result = h.paired(seen, classes, STRATEGY_A.key)
    assert result["asked_with_default"] == 4
    assert result["default_failed_other_passed"] == 1  # "Who rang?" only
    table = result["tables"][STRATEGY_B.key]
    assert table["all"] == {"both": 1, "gain": 1, "loss": 1, "neither": 1}
    assert table["who"] == {"both": 1, "gain": 1, "loss": 0, "neither": 0}
    assert table["what"]["loss"] == 1 and table["where"]["neither"] == 1


def test_a_question_asked_several_times_counts_by_its_majority(monkeypatch):
    h = _headroom(monkeypatch)
    seen = {"q": {"A": [True, False, False], "B": [True, False]}}  # A fails by majority; B ties: a pass
    result = h.paired(seen, {"q": "what"}, "A")
    assert result["tables"]["B"]["all"]["gain"] == 1 and result["default_failed_other_passed"] == 1
