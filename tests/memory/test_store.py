"""MemoryStore: recording, the counts the policy reads, feedback, analysis and search."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Neither a conftest nor an installed package is assumed: make both importable.
_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import (  # noqa: E402
    STRATEGY_A,
    STRATEGY_B,
    STRATEGY_C,
    make_answer,
    make_attempt,
    repaired_answer,
)

from self_improving_rag.errors import InputError, MemoryStoreError  # noqa: E402
from self_improving_rag.memory import MemoryStore  # noqa: E402
from self_improving_rag.memory.store import question_id  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    s = MemoryStore(tmp_path / "memory" / "sirag.db")
    yield s
    s.close()


def count(store: MemoryStore, table: str) -> int:
    return store.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


# ------------------------------------------------------------------------ opening


def test_blank_database_creates_parent_dir_wal_and_empty_stats(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "sirag.db"
    with MemoryStore(path) as s:
        assert path.is_file()
        assert s.db.journal_mode == "wal"
        assert s.db.execute("PRAGMA busy_timeout").fetchone()[0] >= 30000
        stats = s.stats()
        assert stats["outcomes"] == stats["attempts"] == stats["questions"] == 0
        assert stats["mean_attempts"] is None
        assert stats["feedback"]["total"] == 0
        assert s.strategy_counts() == {}
        assert s.repair_counts("WEAK_RETRIEVAL") == {}
        assert s.labelled_attempts() == []
        assert s.latest_calibration() is None
        assert s.strategies() == [] and s.failures() == [] and s.learning_curve() == []
        assert s.search("holmes") == []


def test_in_memory_store_works() -> None:
    with MemoryStore(":memory:") as s:
        oid = s.record(make_answer())
        assert s.show(oid)["id"] == oid


def test_bad_path_argument_is_value_error() -> None:
    with pytest.raises(ValueError):
        MemoryStore("")


# ------------------------------------------------------------------------ record


def test_record_writes_question_outcome_and_every_attempt(store: MemoryStore) -> None:
    first = make_attempt(1, failure="WEAK_RETRIEVAL", answer=None, confidence=0.2, mean_logprob=-1.5)
    second = make_attempt(2, strategy=STRATEGY_B, repair="switch_retriever", confidence=0.9, mean_logprob=-0.25)
    ans = make_answer("Who found the body?", (first, second), confidence=0.9, query_class="who")
    oid = store.record(ans, features={"query_class": "who", "entities": ("Charles",)}, run_id="r1", item_id="7")
    assert len(oid) == 32

    q = store.db.execute("SELECT id, text, query_class FROM questions").fetchall()
    assert q == [(question_id("Who found the body?"), "Who found the body?", "who")]
    out = store.show(oid)
    assert out["question"] == "Who found the body?"
    assert out["answer"] == ans.answer and out["refused"] == 0 and out["success"] == 1
    assert out["n_attempts"] == 2 and out["chosen_attempt"] == 2
    assert out["first_strategy_key"] == STRATEGY_A.key and out["final_strategy_key"] == STRATEGY_B.key
    assert out["run_id"] == "r1" and out["item_id"] == "7"
    assert out["features"] == {"query_class": "who", "entities": ["Charles"]}
    assert out["total_ms"] == 300.0
    assert out["created_at"].endswith("+00:00")
    a1, a2 = out["attempts"]
    assert (a1["number"], a1["failure"], a1["repair"], a1["refusal"]) == (1, "WEAK_RETRIEVAL", None, 1)
    assert (a2["number"], a2["failure"], a2["repair"]) == (2, "NONE", "switch_retriever")
    assert a2["strategy"] == STRATEGY_B.to_json() and a2["strategy_key"] == STRATEGY_B.key
    assert a2["coverage"] == 0.7 and a2["faithfulness"] is None and a2["confidence"] == 0.9
    assert a2["signals"]["faithfulness"] == {"value": None, "reason": "no claims to check", "detail": {}}
    assert a1["mean_logprob"] == -1.5 and a2["mean_logprob"] == -0.25
    assert a2["timings_ms"] == {"retrieve": 12.5, "generate": 250.0, "score": 5.0}
    assert a2["total_ms"] == pytest.approx(267.5)
    assert (a2["prompt_tokens"], a2["completion_tokens"]) == (300, 20)


def test_same_question_is_one_question_row(store: MemoryStore) -> None:
    store.record(make_answer("Who is Holmes?"))
    store.record(make_answer("  who IS   holmes "))
    assert count(store, "questions") == 1
    assert count(store, "outcomes") == 2


def test_record_is_idempotent_per_run_item(store: MemoryStore) -> None:
    first = store.record(repaired_answer("q1"), run_id="run", item_id="1")
    again = store.record(repaired_answer("q1 changed"), run_id="run", item_id="1")
    other = store.record(repaired_answer("q1"), run_id="run", item_id="2")
    other_run = store.record(repaired_answer("q1"), run_id="run2", item_id="1")
    assert again == first
    assert len({first, other, other_run}) == 3
    assert count(store, "outcomes") == 3
    assert count(store, "attempts") == 6
    # Without both ids there is nothing to deduplicate on.
    store.record(make_answer("q2"), run_id="run")
    store.record(make_answer("q2"), run_id="run")
    assert count(store, "outcomes") == 5


def test_record_is_one_transaction(store: MemoryStore) -> None:
    # A trigger makes the second attempt's insert fail: nothing of the outcome may remain.
    store.db.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON attempts WHEN new.number = 2 "
        "BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        store.record(repaired_answer("half written?"))
    assert count(store, "questions") == count(store, "outcomes") == count(store, "attempts") == 0
    assert store.search("half written") == []
    assert not store.db.conn.in_transaction


def test_success_column(store: MemoryStore) -> None:
    ok = store.record(make_answer("a", confidence=0.8), success_threshold=0.5)
    low = store.record(make_answer("b", confidence=0.4), success_threshold=0.5)
    refused = store.record(make_answer("c", refused=True, confidence=0.9))
    nothing = store.record(make_answer("d", attempts=(), refused=True, confidence=0.0))
    assert [store.show(i)["success"] for i in (ok, low, refused, nothing)] == [1, 0, 0, None]
    assert store.show(nothing)["first_strategy_key"] is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"success_threshold": 1.5},
        {"success_threshold": -0.1},
        {"run_id": 3},
        {"features": ["not", "a", "dict"]},
    ],
)
def test_record_rejects_bad_arguments(store: MemoryStore, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        store.record(make_answer(), **kwargs)


def test_record_rejects_non_answer(store: MemoryStore) -> None:
    with pytest.raises(ValueError):
        store.record({"question": "x"})  # type: ignore[arg-type]


# ----------------------------------------------------------------- policy counts


def test_strategy_counts_count_first_attempts_per_query_class(store: MemoryStore) -> None:
    store.record(repaired_answer("w1", query_class="who"))  # A fails first
    store.record(make_answer("w2", query_class="who"))  # A succeeds first
    store.record(make_answer("w3", query_class="where"))  # A succeeds first
    c_first = make_attempt(1, strategy=STRATEGY_C, failure="HALLUCINATION_RISK")
    store.record(make_answer("w4", (c_first,), query_class="where"))

    assert store.strategy_counts() == {STRATEGY_A.key: (2, 1), STRATEGY_C.key: (0, 1)}
    assert store.strategy_counts("who") == {STRATEGY_A.key: (1, 1)}
    assert store.strategy_counts("where") == {STRATEGY_A.key: (1, 0), STRATEGY_C.key: (0, 1)}
    assert store.strategy_counts("why") == {}
    # B was only ever a repair, never a first choice.
    assert STRATEGY_B.key not in store.strategy_counts()


def test_strategy_counts_with_labels_count_the_answer_by_its_latest_label(store: MemoryStore) -> None:
    passed_but_wrong = store.record(make_answer("l1", query_class="who"))  # A passes its checks
    passed_and_right = store.record(make_answer("l2", query_class="who"))
    store.record(make_answer("l3", query_class="who"))  # unlabelled: its attribution counts
    store.add_feedback(passed_but_wrong, correct=True, source="gold")
    store.add_feedback(passed_but_wrong, correct=False, source="user")  # the latest label wins
    store.add_feedback(passed_and_right, correct=True, source="gold")
    assert store.strategy_counts("who") == {STRATEGY_A.key: (3, 0)}
    assert store.strategy_counts("who", use_labels=True) == {STRATEGY_A.key: (2, 1)}
    # Only the attempt the outcome answered with takes the label; a failed first attempt stays failed.
    repaired = store.record(repaired_answer("l4", query_class="where"))
    store.add_feedback(repaired, correct=False, source="gold")
    assert store.strategy_counts("where", first_only=False, use_labels=True) == {
        STRATEGY_A.key: (0, 1), STRATEGY_B.key: (0, 1)}
    assert store.strategy_counts("where", first_only=False) == {STRATEGY_A.key: (0, 1), STRATEGY_B.key: (1, 0)}


def test_repair_counts_with_labels(store: MemoryStore) -> None:
    wrong = store.record(repaired_answer("rl1", repair="switch_retriever"))
    store.record(repaired_answer("rl2", repair="switch_retriever"))
    store.add_feedback(wrong, correct=False, source="user")
    assert store.repair_counts("WEAK_RETRIEVAL") == {"switch_retriever": (2, 0)}
    assert store.repair_counts("WEAK_RETRIEVAL", use_labels=True) == {"switch_retriever": (1, 1)}


def test_repair_counts_follow_the_previous_failure(store: MemoryStore) -> None:
    store.record(repaired_answer("r1", repair="switch_retriever"))
    store.record(repaired_answer("r2", repair="switch_retriever", query_class="where"))
    store.record(repaired_answer("r3", repair="raise_top_k"))
    # WEAK_RETRIEVAL -> raise_top_k fails with LOW_CONFIDENCE -> stricter_prompt succeeds.
    chain = (
        make_attempt(1, failure="WEAK_RETRIEVAL"),
        make_attempt(2, strategy=STRATEGY_B, repair="raise_top_k", failure="LOW_CONFIDENCE"),
        make_attempt(3, strategy=STRATEGY_C, repair="stricter_prompt"),
    )
    store.record(make_answer("r4", chain))

    assert store.repair_counts("WEAK_RETRIEVAL") == {"switch_retriever": (2, 0), "raise_top_k": (1, 1)}
    assert store.repair_counts("WEAK_RETRIEVAL", "where") == {"switch_retriever": (1, 0)}
    assert store.repair_counts("LOW_CONFIDENCE") == {"stricter_prompt": (1, 0)}
    assert store.repair_counts("HALLUCINATION_RISK") == {}
    with pytest.raises(ValueError):
        store.repair_counts("")
    # Over every class and repair, per failure type: what the stop rule borrows from.
    assert store.repairs_by_failure() == {"WEAK_RETRIEVAL": (3, 1), "LOW_CONFIDENCE": (1, 0)}


def test_repairs_by_failure_with_labels(store: MemoryStore) -> None:
    assert store.repairs_by_failure() == {}
    wrong = store.record(repaired_answer("rl1", repair="switch_retriever"))
    store.record(repaired_answer("rl2", repair="raise_top_k", query_class="where"))
    store.add_feedback(wrong, correct=False, source="user")
    assert store.repairs_by_failure() == {"WEAK_RETRIEVAL": (2, 0)}
    assert store.repairs_by_failure(use_labels=True) == {"WEAK_RETRIEVAL": (1, 1)}


def _stored_features(answer: str | None) -> dict:
    """The confidence features memory_testkit's attempts are stored with."""
    from self_improving_rag.confidence import answer_words

    return {"coverage": 0.7, "grounding": 0.6, "faithfulness": None, "redundancy": 0.1, "mean_logprob": None,
            "refusal": 1.0 if answer is None else 0.0, "answer_words": answer_words(answer, answer is None)}


def test_counts_rejudge_attempts_by_the_confidence_in_use(store: MemoryStore) -> None:
    """With Verdicts, an attempt counts as a success when its recomputed confidence reaches
    today's bar, whatever was stored; other failures stay failures."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence
    from self_improving_rag.memory.store import Verdicts

    store.record(make_answer("q1", (make_attempt(1, failure="NONE"),)))
    store.record(make_answer("q2", (make_attempt(1, failure="LOW_CONFIDENCE"),), refused=True))
    store.record(make_answer("q3", (make_attempt(1, failure="HALLUCINATION_RISK"),), refused=True))
    store.record(make_answer("q4", (make_attempt(1, failure="WEAK_RETRIEVAL", answer=None),), refused=True))
    key = STRATEGY_A.key
    assert store.strategy_counts() == {key: (1, 3)}  # as diagnosed when they ran
    c = confidence(_stored_features("Sherlock Holmes [1]"))
    assert 0.05 < c < 0.95
    # Below today's bar both pass their other checks; above it neither does.
    assert store.strategy_counts(verdicts=Verdicts(None, answer_threshold=c - 0.01)) == {key: (2, 2)}
    assert store.strategy_counts(verdicts=Verdicts(None, answer_threshold=c + 0.01)) == {key: (0, 4)}
    assert store.strategy_counts(verdicts=Verdicts(None, answer_threshold=0.0, confidence_floor=c + 0.01)) == {key: (0, 4)}
    # The weights in use decide: a fit that trusts every answer, one that trusts none.
    trusting, doubting = {**DEFAULT_WEIGHTS, "bias": 10.0}, {**DEFAULT_WEIGHTS, "bias": -10.0}
    assert store.strategy_counts(verdicts=Verdicts(trusting, answer_threshold=0.5)) == {key: (2, 2)}
    assert store.strategy_counts(verdicts=Verdicts(doubting, answer_threshold=0.5)) == {key: (0, 4)}
    # A bar of 1 is out of reach; a fit stored before answer_words existed still counts.
    assert store.strategy_counts(verdicts=Verdicts(trusting, answer_threshold=1.0)) == {key: (0, 4)}
    old_fit = {k: v for k, v in DEFAULT_WEIGHTS.items() if k != "answer_words"}
    c_old = confidence(_stored_features("Sherlock Holmes [1]"), old_fit)
    assert store.strategy_counts(verdicts=Verdicts(old_fit, answer_threshold=c_old - 0.01)) == {key: (2, 2)}


@pytest.mark.parametrize("mean_logprob", [-9.0, -2.0, 0.3])
def test_rejudged_confidence_equals_the_scorers_for_stored_features(store: MemoryStore, mean_logprob) -> None:
    """The SQL confidence imputes, clips and reads answer_words as calibration.confidence does:
    the bar just below it passes the attempt, the bar just above fails it."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence
    from self_improving_rag.memory.store import Verdicts

    store.record(make_answer("q1", (make_attempt(1, mean_logprob=mean_logprob),)))
    features = {**_stored_features("Sherlock Holmes [1]"), "mean_logprob": mean_logprob}
    weights = {**DEFAULT_WEIGHTS, "mean_logprob": 3.0}
    c = confidence(features, weights)
    for bar, ok in ((c - 1e-6, 1), (c + 1e-6, 0)):
        assert store.strategy_counts(verdicts=Verdicts(weights, answer_threshold=bar)) == {STRATEGY_A.key: (ok, 1 - ok)}


def test_rejudged_answer_words_are_the_scorers_not_the_shown_answers(store: MemoryStore) -> None:
    """answer_words comes from the features the scorer stored (the raw answer's), not from the
    answer text kept for display."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory.store import Verdicts

    attempt = make_attempt(1, answer="Paris [1]")
    sig = attempt.signals
    detail = {**sig.confidence.detail, "features": {"answer_words": 3.0}}  # what the scorer saw
    attempt = dataclasses.replace(attempt, signals=dataclasses.replace(
        sig, confidence=dataclasses.replace(sig.confidence, detail=detail)))
    store.record(make_answer("q1", (attempt,), answer="Paris [1]"))
    # Only answer_words and the bias count: σ(bias - 0.5 · 3.0) against σ(bias - 0.5 · log 2).
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": 1.0, "answer_words": -0.5}
    bar = 0.45  # σ(1 - 1.5) = 0.38 < bar < σ(1 - 0.35) = 0.66
    assert store.strategy_counts(verdicts=Verdicts(weights, answer_threshold=bar)) == {STRATEGY_A.key: (0, 1)}


def _record_with_detail(store: MemoryStore, question: str, detail: dict, correct: bool) -> str:
    """Record a one-attempt answer whose confidence detail has ``detail`` merged in (e.g. stored
    features), with a gold label; its outcome id."""
    attempt = make_attempt(1, answer="Paris [1]")
    sig = attempt.signals
    attempt = dataclasses.replace(attempt, signals=dataclasses.replace(
        sig, confidence=dataclasses.replace(sig.confidence, detail={**sig.confidence.detail, **detail})))
    oid = store.record(make_answer(question, (attempt,), answer="Paris [1]"))
    store.add_feedback(oid, correct=correct, source="gold")
    return oid


def _passing(store: MemoryStore, weights: dict, bar: float) -> int:
    """Attempts of STRATEGY_A that pass ``bar`` under ``weights``, as the SQL confidence judges them."""
    from self_improving_rag.memory.store import Verdicts

    return store.strategy_counts(verdicts=Verdicts(weights, answer_threshold=bar))[STRATEGY_A.key][0]


def test_rejudged_confidence_reads_question_fit_clipped_and_calibration_gets_it(store: MemoryStore) -> None:
    """question_fit lives only in the stored features: the SQL confidence reads it from there,
    clips it at QUESTION_FIT_FLOOR as the scorer does, takes the neutral value when it is missing,
    and labelled_attempts hands it to calibration."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, NEUTRAL_VALUES, QUESTION_FIT_FLOOR, sigmoid

    def with_fit(q: str, value, tokens: bool = True) -> str:
        detail = {"features": {} if value is None else {"question_fit": value}}
        if value is not None and tokens:
            detail["question_tokens"] = [["Where", -0.1], [" Paris", value]]
        return _record_with_detail(store, q, detail, correct=True)

    expected = {with_fit("q1", -2.0): -2.0,
                with_fit("q2", -500.0): -500.0,  # clipped to -20
                with_fit("q3", None): None}  # recorded before the feature: neutral
    # An older version read it from another prompt and kept no tokens: not this feature, neutral.
    expected[with_fit("q4", -1.0, tokens=False)] = None
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": 3.0, "question_fit": 0.25}

    def passing(bar: float) -> int:
        return _passing(store, weights, bar)

    at = {v: sigmoid(3.0 + 0.25 * v) for v in (-2.0, QUESTION_FIT_FLOOR, NEUTRAL_VALUES["question_fit"])}
    assert passing(at[-2.0] - 1e-6) == 1 and passing(at[NEUTRAL_VALUES["question_fit"]] - 1e-6) == 3
    assert passing(at[QUESTION_FIT_FLOOR] - 1e-6) == 4 and passing(at[QUESTION_FIT_FLOOR] + 1e-6) == 3
    # (outcomes recorded within one clock tick come in id order: compare by outcome)
    assert {r["outcome_id"]: r["question_fit"] for r in store.labelled_attempts()} == expected


def test_rejudged_confidence_reads_question_prior_clipped_and_calibration_gets_it(store: MemoryStore) -> None:
    """question_prior, like question_fit, lives only in the stored features: the SQL confidence
    reads and clips it, a missing value is neutral, and labelled_attempts hands it on."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, NEUTRAL_VALUES, QUESTION_FIT_FLOOR, sigmoid

    def with_prior(q: str, value) -> str:
        features = {} if value is None else {"question_prior": value}
        return _record_with_detail(store, q, {"features": features}, correct=False)

    expected = {with_prior("q1", -2.0): -2.0, with_prior("q2", -500.0): -500.0, with_prior("q3", None): None}
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": 3.0, "question_prior": 0.25}

    def passing(bar: float) -> int:
        return _passing(store, weights, bar)

    at = {v: sigmoid(3.0 + 0.25 * v) for v in (-2.0, QUESTION_FIT_FLOOR, NEUTRAL_VALUES["question_prior"])}
    assert passing(at[-2.0] - 1e-6) == 1 and passing(at[NEUTRAL_VALUES["question_prior"]] - 1e-6) == 2
    assert passing(at[QUESTION_FIT_FLOOR] - 1e-6) == 3 and passing(at[QUESTION_FIT_FLOOR] + 1e-6) == 2
    assert {r["outcome_id"]: r["question_prior"] for r in store.labelled_attempts()} == expected


def test_dates_unstated_and_explanation_reach_the_sql_confidence_and_calibration(store: MemoryStore) -> None:
    """dates_unstated and explanation live in the stored features: the SQL confidence reads them (a
    missing value is the neutral 0.0), and labelled_attempts hands them on (None before they
    existed)."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, sigmoid

    def with_features(q: str, features: dict) -> str:
        return _record_with_detail(store, q, {"features": features}, correct=True)

    rows = {with_features("q1", {"dates_unstated": 1.0, "explanation": 1.0}): (1.0, 1.0),
            with_features("q2", {"dates_unstated": 0.5, "explanation": 0.0}): (0.5, 0.0),
            with_features("q3", {}): (None, None)}
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": 2.0, "dates_unstated": -2.0, "explanation": -1.0}

    def passing(bar: float) -> int:
        return _passing(store, weights, bar)

    # Logits: q1 2 − 2 − 1 = −1; q2 2 − 2·0.5 = 1; q3 neutral 2 − 0 = 2.
    assert passing(sigmoid(-1.0) - 1e-6) == 3 and passing(sigmoid(1.0) - 1e-6) == 2
    assert passing(sigmoid(2.0) - 1e-6) == 1 and passing(sigmoid(2.0) + 1e-6) == 0
    assert {r["outcome_id"]: (r["dates_unstated"], r["explanation"]) for r in store.labelled_attempts()} == rows


def test_rejudged_attempts_fail_by_todays_dates_threshold(store: MemoryStore) -> None:
    """An attempt stored NONE before attribution's dates rule existed (or under another threshold)
    fails today when its stored dates_unstated is above today's thresholds.dates_unstated; one
    without the feature (no date in its question) is judged by its confidence alone."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory.store import Verdicts

    for q, features in (("q1", {"dates_unstated": 1.0}), ("q2", {"dates_unstated": 0.5}),
                        ("q3", {"dates_unstated": 0.0}), ("q4", {})):
        _record_with_detail(store, q, {"features": features}, correct=True)
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": 5.0}  # every confidence clears the bar

    def passing(**kw) -> int:
        return store.strategy_counts(verdicts=Verdicts(weights, answer_threshold=0.5, **kw))[STRATEGY_A.key][0]

    assert passing() == 4  # the default: the rule off, as before it existed
    assert passing(dates_threshold=0.0) == 2  # q3 and q4
    assert passing(dates_threshold=0.5) == 3
    assert store.strategy_counts() == {STRATEGY_A.key: (4, 0)}  # without Verdicts: as stored


def test_rejudged_bar_rises_with_the_attempt_number(store: MemoryStore) -> None:
    """A repair (attempt 2) must clear answer_threshold + retry_margin, as the engine asks."""
    from self_improving_rag.confidence import confidence
    from self_improving_rag.memory.store import Verdicts

    for i in range(3):
        store.record(repaired_answer(f"r{i}", repair="switch_retriever"))
    c = confidence(_stored_features("Sherlock Holmes [1]"))
    assert store.repair_counts("WEAK_RETRIEVAL") == {"switch_retriever": (3, 0)}
    low = Verdicts(None, answer_threshold=c - 0.06, retry_margin=0.05)
    high = Verdicts(None, answer_threshold=c - 0.04, retry_margin=0.05)
    assert store.repair_counts("WEAK_RETRIEVAL", verdicts=low) == {"switch_retriever": (3, 0)}
    assert store.repair_counts("WEAK_RETRIEVAL", verdicts=high) == {"switch_retriever": (0, 3)}
    assert store.repairs_by_failure(verdicts=high) == {"WEAK_RETRIEVAL": (0, 3)}
    # The first attempts (WEAK_RETRIEVAL) fail under any verdict; a label still wins when asked.
    assert store.strategy_counts(verdicts=low) == {STRATEGY_A.key: (0, 3)}
    wrong = store.record(repaired_answer("r9", repair="switch_retriever"))
    store.add_feedback(wrong, correct=False, source="user")
    assert store.repair_counts("WEAK_RETRIEVAL", use_labels=True, verdicts=low) == {"switch_retriever": (3, 1)}


# --------------------------------------------------------- feedback & calibration


def test_feedback_accepts_prefix_and_latest_label_wins(store: MemoryStore) -> None:
    oid = store.record(repaired_answer("labelled", query_class="who"))
    store.record(make_answer("unlabelled"))
    store.add_feedback(oid[:8], False, source="gold")
    store.add_feedback(oid, True, note="looks right")
    rows = store.labelled_attempts()
    assert len(rows) == 1
    row = rows[0]
    assert row["outcome_id"] == oid and row["attempt"] == 2 and row["label"] == 1 and row["source"] == "user"
    assert row["coverage"] == 0.7 and row["confidence"] == 0.85 and row["failure"] == "NONE"
    assert set(row) >= {"redundancy", "grounding", "faithfulness", "refusal", "mean_logprob", "query_class"}
    fb = store.show(oid)["feedback"]
    assert [(f["label"], f["source"], f["note"]) for f in fb] == [(0, "gold", ""), (1, "user", "looks right")]
    # Rows are counted as written; correct/wrong count the outcome once, by its current label.
    assert store.stats()["feedback"] == {
        "total": 2, "correct": 1, "wrong": 0, "user": 1, "gold": 1, "labelled_outcomes": 1
    }
    # A gold label written after a user's (through the API, not keep_settled) does not replace it.
    store.add_feedback(oid, False, source="gold")
    assert store.labelled_attempts()[0]["label"] == 1 and store.stats()["feedback"]["correct"] == 1


def test_gold_label_is_written_only_for_an_unlabelled_outcome(store: MemoryStore) -> None:
    user_labelled = store.record(repaired_answer("user said right", query_class="who"))
    fresh = store.record(make_answer("fresh"))
    store.add_feedback(user_labelled, True, source="user")
    # A re-run of the batch would label both again: the user's label stays the latest one.
    assert store.add_feedback(user_labelled, False, source="gold", keep_settled=True) is False
    assert store.add_feedback(fresh, False, source="gold", keep_settled=True) is True
    assert store.add_feedback(fresh, False, source="gold", keep_settled=True) is False  # same verdict again
    labels = {r["outcome_id"]: (r["label"], r["source"]) for r in store.labelled_attempts()}
    assert labels[user_labelled] == (1, "user")
    assert store.stats()["feedback"] == {
        "total": 2, "correct": 1, "wrong": 1, "user": 1, "gold": 1, "labelled_outcomes": 2
    }
    # A corrected gold answer changes the verdict: that is written.
    assert store.add_feedback(fresh, True, source="gold", keep_settled=True) is True
    assert {r["outcome_id"]: r["label"] for r in store.labelled_attempts()}[fresh] == 1


def test_feedback_unknown_id_and_bad_arguments(store: MemoryStore) -> None:
    store.record(make_answer())
    with pytest.raises(MemoryStoreError, match="ffffffffffff"):
        store.add_feedback("ffffffffffff", True)
    with pytest.raises(MemoryStoreError, match="too short"):
        store.add_feedback("abc", True)  # prefix too short: user input, so a clear store error
    # An argument with a byte the terminal could not decode (Python keeps it as a lone surrogate)
    # is the user's typo, not an internal error.
    with pytest.raises(MemoryStoreError, match="bytes that are not text"):
        store.add_feedback("2e445c\udcff", True)
    oid = store.record(make_answer("x"))
    with pytest.raises(ValueError):
        store.add_feedback(oid, True, source="robot")
    with pytest.raises(ValueError):
        store.add_feedback(oid, 1)  # type: ignore[arg-type]


def test_calibration_roundtrip(store: MemoryStore) -> None:
    first = store.save_calibration({"coverage": 1.0, "bias": -0.5}, 10, {"auroc_before": 0.6, "brier": 0.2})
    second = store.save_calibration({"coverage": 2.0}, 40, {"auroc_before": 0.6, "auroc_after": 0.8,
                                                             "ece_before": 0.2, "ece_after": 0.05})
    assert second > first
    latest = store.latest_calibration()
    assert latest is not None
    assert latest["id"] == second and latest["n"] == 40 and latest["weights"] == {"coverage": 2.0}
    assert latest["metrics"]["auroc_after"] == 0.8 and latest["metrics"]["ece_after"] == 0.05
    with pytest.raises(ValueError):
        store.save_calibration({}, 1, {})
    with pytest.raises(ValueError):
        store.save_calibration({"a": 1.0}, -1, {})


# ---------------------------------------------------------------------- analysis


def populate(store: MemoryStore) -> list[str]:
    ids = [store.record(repaired_answer(f"who {i}")) for i in range(3)]
    ids += [store.record(make_answer(f"where {i}", query_class="where", confidence=0.7)) for i in range(5)]
    ids.append(store.record(make_answer("why", refused=True, confidence=0.1, query_class="why")))
    return ids


def test_stats_strategies_failures(store: MemoryStore) -> None:
    populate(store)
    stats = store.stats()
    assert stats["questions"] == stats["outcomes"] == 9
    assert (stats["answered"], stats["refused"], stats["attempts"]) == (8, 1, 12)
    assert stats["mean_attempts"] == pytest.approx(12 / 9)
    assert stats["first_attempt_success_rate"] == pytest.approx(5 / 9)
    # An outcome recorded without attempts (API use) counts as an outcome, not in the mean.
    store.record(make_answer("no attempts", attempts=(), refused=True))
    stats = store.stats()
    assert stats["outcomes"] == 10 and stats["attempts"] == 12
    assert stats["mean_attempts"] == pytest.approx(12 / 9)

    by_key = {s["strategy_key"]: s for s in store.strategies()}
    assert by_key[STRATEGY_A.key]["attempts"] == 9 and by_key[STRATEGY_A.key]["successes"] == 5
    assert by_key[STRATEGY_B.key]["success_rate"] == 1.0
    assert by_key[STRATEGY_A.key]["mean_total_ms"] == pytest.approx(267.5)
    assert by_key[STRATEGY_A.key]["labelled"] == 0 and by_key[STRATEGY_A.key]["labelled_right_rate"] is None
    # Labels count for the attempt that gave the answer: passed checks but labelled wrong.
    answered = store._rows("SELECT id FROM outcomes WHERE chosen_attempt IS NOT NULL ORDER BY id")
    store.add_feedback(answered[0]["id"], False)
    store.add_feedback(answered[1]["id"], True)
    rows = store.strategies()
    assert sum(r["labelled"] for r in rows) == 2
    labelled = [r for r in rows if r["labelled"]]
    assert sum(r["labelled"] * r["labelled_right_rate"] for r in labelled) == pytest.approx(1)

    failures = {f["failure"]: f for f in store.failures()}
    assert set(failures) == {"WEAK_RETRIEVAL", "LOW_CONFIDENCE"}
    weak = failures["WEAK_RETRIEVAL"]
    assert weak["count"] == 3 and weak["share"] == pytest.approx(3 / 12)
    assert weak["top_repair"] == "switch_retriever" and weak["top_repair_success_rate"] == 1.0
    assert failures["LOW_CONFIDENCE"]["top_repair"] is None


def test_show_by_prefix(store: MemoryStore) -> None:
    oid = populate(store)[0]
    assert store.show(oid[:6])["id"] == oid
    assert store.show(oid.upper())["id"] == oid
    with pytest.raises(MemoryStoreError, match="too short"):
        store.show(oid[:5])
    with pytest.raises(MemoryStoreError, match="zzzzzz"):
        store.show("zzzzzz")


def test_show_ambiguous_prefix(store: MemoryStore) -> None:
    # Forge two ids with a shared 6-char prefix to exercise the ambiguity branch.
    a = store.record(make_answer("one"))
    b = store.record(make_answer("two"))
    store.db.execute("PRAGMA foreign_keys = OFF")
    store.db.execute("UPDATE outcomes SET id = ? WHERE id = ?", ("abcdef01" + a[8:], a))
    store.db.execute("UPDATE outcomes SET id = ? WHERE id = ?", ("abcdef02" + b[8:], b))
    with pytest.raises(MemoryStoreError, match="several"):
        store.show("abcdef")
    assert store.show("abcdef01")["question"] == "one"


def test_learning_curve(store: MemoryStore) -> None:
    populate(store)
    curve = store.learning_curve(window=3)
    assert [p["index"] for p in curve] == list(range(1, 10))
    assert [p["first_success"] for p in curve] == [0, 0, 0, 1, 1, 1, 1, 1, 0]
    assert curve[3]["rolling_first_success"] == pytest.approx(1 / 3)
    assert curve[-1]["rolling_first_success"] == pytest.approx(2 / 3)
    assert curve[0]["rolling_success"] == 1.0
    with pytest.raises(ValueError):
        store.learning_curve(0)


def test_reliability_prefers_feedback_labels(store: MemoryStore) -> None:
    ids = populate(store)
    rel = store.reliability(10)
    # Answered outcomes only: the refusal among the nine with a confidence is left out.
    assert rel["target"] == "self-assessed" and rel["n"] == 8
    assert sum(b["n"] for b in rel["bins"]) == 8
    store.add_feedback(ids[0], False)
    rel = store.reliability(10)
    assert rel["target"] == "feedback" and rel["n"] == 1
    assert rel["ece"] == pytest.approx(0.85)


def test_failure_timeline_and_histogram(store: MemoryStore) -> None:
    populate(store)
    timeline = store.failure_timeline(4)
    assert len(timeline) == 4 and sum(b["n"] for b in timeline) == 12
    assert sum(b["counts"].get("WEAK_RETRIEVAL", 0) for b in timeline) == 3
    hist = store.confidence_histogram(10)
    assert sum(hist["answered"]) == 8 and sum(hist["refused"]) == 1
    assert store.strategy_by_class()[0]["query_class"] in {"who", "where", "why"}


# ------------------------------------------------------------------------ search


HOSTILE = [
    '"foo" OR bar*',
    "'; DROP TABLE outcomes; --",
    'NEAR(a b)', "a AND", "OR", "*", '"', "'", "(", ")", "^holmes", "col:val", "-moor", "+", "a:b:c",
    "\x00", "", "   ", "🙂 émile", "NOT NOT", "{question}: holmes",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_search_never_breaks_on_fts_syntax(store: MemoryStore, text: str) -> None:
    populate(store)
    assert isinstance(store.search(text), list)
    assert count(store, "outcomes") == 9


def test_search_finds_questions_and_answers(store: MemoryStore) -> None:
    store.record(make_answer("Where did Holmes meet Watson?", answer="At St Bartholomew's hospital [1]"))
    store.record(make_answer("Who owned the hounds?", answer="Stapleton [2]"))
    assert [r["question"] for r in store.search("Holmes")] == ["Where did Holmes meet Watson?"]
    assert [r["answer"] for r in store.search("bartholomew")] == ["At St Bartholomew's hospital [1]"]
    # Porter stemming: "hound" finds "hounds"; FTS words in the input are plain words.
    assert len(store.search("hound")) == 1
    # A possessive finds the plain word, in either apostrophe.
    assert [r["answer"] for r in store.search("Stapleton's")] == ["Stapleton [2]"]
    assert [r["answer"] for r in store.search("Stapleton’s hounds")] == ["Stapleton [2]"]
    assert store.search('"hound" OR holmes*') == []
    assert "[" in store.search("stapleton")[0]["snippet"]
    with pytest.raises(ValueError):
        store.search("x", limit=0)


def test_recent_pages_outcomes_newest_first_with_their_current_label(store: MemoryStore) -> None:
    ids = [store.record(make_answer(f"Who kept light {i}?", answer="Tobias Lune [1]")) for i in range(5)]
    store.add_feedback(ids[3], correct=False)
    page = store.recent(limit=2, offset=1)
    assert page["total"] == 5 and [o["id"] for o in page["outcomes"]] == [ids[3], ids[2]]
    assert [o["label"] for o in page["outcomes"]] == [0, None] and page["outcomes"][0]["n_attempts"] == 1
    assert store.recent(limit=10, offset=5)["outcomes"] == []
    for bad in ({"limit": 0}, {"offset": -1}, {"limit": True}):
        with pytest.raises(ValueError):
            store.recent(**bad)


def test_search_counts_a_repeated_word_once_and_refuses_more_words_than_it_reads(store: MemoryStore) -> None:
    """Words past the 64th were dropped without a word: "lighthouse" × 64 + "Martians" found an
    outcome without Martians."""
    store.record(make_answer("Who kept the lighthouse?", answer="Tobias Lune [1]"))
    assert store.search(" ".join(["lighthouse"] * 64 + ["Martians"])) == []
    assert len(store.search(" ".join(["Lighthouse", "LIGHTHOUSE"] * 40 + ["Tobias"]))) == 1
    words = " ".join(f"w{i}" for i in range(65))
    with pytest.raises(InputError, match="65 different words; it reads at most 64"):
        store.search(words)
    assert store.search(" ".join(f"w{i}" for i in range(64))) == []  # the limit itself is fine


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_search_property_any_text_is_safe(store: MemoryStore, text: str) -> None:
    assert isinstance(store.search(text, limit=5), list)


# ------------------------------------------------------------------------ export


def test_export_csv_and_json(store: MemoryStore, tmp_path: Path) -> None:
    populate(store)
    nothing = store.record(make_answer("no attempts", attempts=(), refused=True, confidence=0.0))
    store.add_feedback(nothing, True, source="gold")
    store.add_feedback(nothing, False, source="user")
    n = store.export("csv", tmp_path / "out" / "memory.csv")
    assert n == 10
    with (tmp_path / "out" / "memory.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 13  # 12 attempts + one row for the outcome without attempts
    expected = {"outcome_id", "outcome_question", "attempt_number", "attempt_failure", "attempt_strategy_key",
                "outcome_label", "outcome_label_source"}
    assert expected <= set(rows[0])
    assert [(r["outcome_label"], r["outcome_label_source"]) for r in rows if r["outcome_id"] == nothing] == [("0", "user")]
    assert {r["outcome_label"] for r in rows if r["outcome_id"] != nothing} == {""}

    assert store.export("json", tmp_path / "memory.json") == 10
    data = json.loads((tmp_path / "memory.json").read_text(encoding="utf-8"))
    assert len(data) == 10 and sum(len(o["attempts"]) for o in data) == 12
    by_id = {o["id"]: o for o in data}
    assert by_id[nothing]["attempts"] == [] and (by_id[nothing]["label"], by_id[nothing]["label_source"]) == (0, "user")
    some = next(o for o in data if o["n_attempts"] == 2)
    assert some["attempts"][1]["strategy"]["retriever"] == "bm25"
    assert some["attempts"][0]["signals"]["coverage"]["value"] == 0.7
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    with pytest.raises(ValueError):
        store.export("xml", tmp_path / "x.xml")


# --------------------------------------------------------------------- read-only


def test_read_only_opens_through_uri_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    with MemoryStore(path) as s:
        oid = s.record(make_answer("Who is Holmes?"))
    with MemoryStore(path, read_only=True) as ro:
        assert ro.stats()["outcomes"] == 1
        assert ro.search("holmes")[0]["id"] == oid
        assert ro.strategy_counts() == {STRATEGY_A.key: (1, 0)}
        with pytest.raises(MemoryStoreError, match="read-only"):
            ro.record(make_answer())
        with pytest.raises(MemoryStoreError, match="read-only"):
            ro.add_feedback(oid, True)
        # mode=ro holds even for root, who ignores file permissions.
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.db.execute("DELETE FROM outcomes")
    with MemoryStore(path, read_only=True) as ro:
        assert ro.stats()["outcomes"] == 1


def test_read_only_missing_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "sirag.db"
    with pytest.raises(MemoryStoreError, match="no memory database"):
        MemoryStore(path, read_only=True)
    assert not path.parent.exists()


root = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")


@root
def test_read_only_file_is_a_clear_error_when_writing(tmp_path: Path) -> None:
    path = tmp_path / "sirag.db"
    MemoryStore(path).close()
    path.chmod(0o444)
    try:
        with pytest.raises(MemoryStoreError, match="read-only") as info:
            MemoryStore(path)
        assert str(path) in str(info.value)
        with MemoryStore(path, read_only=True) as ro:
            assert ro.stats()["outcomes"] == 0
    finally:
        path.chmod(0o644)


@root
def test_read_only_directory_is_a_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(MemoryStoreError, match="not writable"):
            MemoryStore(locked / "sirag.db")
        with pytest.raises(MemoryStoreError, match="cannot create directory"):
            MemoryStore(locked / "sub" / "sirag.db")
    finally:
        locked.chmod(0o755)


def test_unwritable_file_detected_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root passes every permission check, so fake the check to cover this branch everywhere.
    import self_improving_rag.memory.store as store_module

    path = tmp_path / "sirag.db"
    MemoryStore(path).close()
    real_access = os.access
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: False if Path(p) == path else real_access(p, mode))
    with pytest.raises(MemoryStoreError, match="read-only") as info:
        MemoryStore(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_write_refused_by_sqlite_becomes_memory_store_error(tmp_path: Path) -> None:
    # The file turning read-only after opening: SQLite refuses the write mid-record.
    path = tmp_path / "sirag.db"
    store = MemoryStore(path)
    store.db.conn.close()
    from sqlite_utils import Database

    ro = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None)
    store.db = Database(ro)
    with pytest.raises(MemoryStoreError, match="cannot write memory database") as info:
        store.record(make_answer())
    assert str(path) in str(info.value)
    assert not ro.in_transaction
    store.close()


def test_strategy_counts_of_all_attempts_include_repairs(store: MemoryStore) -> None:
    store.record(repaired_answer("w1", query_class="who"))  # A fails first, then a repair
    store.record(make_answer("w2", query_class="who"))  # A succeeds first
    first = store.strategy_counts("who")
    every = store.strategy_counts("who", first_only=False)
    assert first == {STRATEGY_A.key: (1, 1)}
    assert every[STRATEGY_A.key] == (1, 1)
    assert every[STRATEGY_B.key] == (1, 0)  # B only ever ran as a repair, and it worked
    assert STRATEGY_B.key not in first
    assert store.strategy_counts("where", first_only=False) == {}


def test_labels_on_refusals_do_not_enter_calibration(store: MemoryStore) -> None:
    refused = store.record(make_answer("declined", refused=True))
    answered = store.record(repaired_answer("answered", query_class="who"))
    store.add_feedback(refused, True)  # "rightly refused"
    store.add_feedback(answered, False)
    assert [r["outcome_id"] for r in store.labelled_attempts()] == [answered]


# ------------------------------------------------------------------ corpora


def test_outcomes_keep_their_corpus_and_calibration_rows_carry_it(store: MemoryStore) -> None:
    a = store.record(make_answer("q1", (make_attempt(1),)), corpus="/data/index/a")
    b = store.record(make_answer("q2", (make_attempt(1),)))
    for oid in (a, b):
        store.add_feedback(oid, correct=True, source="gold")
    assert {r["outcome_id"]: r["corpus"] for r in store.labelled_attempts()} == {a: "/data/index/a", b: None}
    assert store.stats()["corpora"] == {"(not recorded)": 1, "/data/index/a": 1}
    with pytest.raises(ValueError, match="corpus must be a str"):
        store.record(make_answer("q3", (make_attempt(1),)), corpus=3)  # type: ignore[arg-type]


def test_a_fit_keeps_its_corpus_fits(store: MemoryStore) -> None:
    from self_improving_rag.evaluation.calibrate import weights_for
    from self_improving_rag.confidence import DEFAULT_WEIGHTS

    own = {**DEFAULT_WEIGHTS, "bias": 2.0}
    fit_id = store.save_calibration(dict(DEFAULT_WEIGHTS), 40, {}, corpus_fits={"/i/a": {"weights": own, "n": 25,
                                                                                          "l2": 0.3}})
    fit = store.latest_calibration()
    assert fit["id"] == fit_id and fit["corpus_fits"] == {"/i/a": {"weights": own, "n": 25, "l2": 0.3}}
    assert weights_for(fit, "/i/a") == own
    assert weights_for(fit, "/i/b") == weights_for(fit, None) == DEFAULT_WEIGHTS
    assert weights_for(None, "/i/a") is None
    store.save_calibration(dict(DEFAULT_WEIGHTS), 0, {"reset_to_defaults": True})  # a reset drops them all
    assert store.latest_calibration()["corpus_fits"] == {}
    for bad in ({"/i/a": {"n": 3}}, {"/i/a": {"weights": {}}}, {3: {"weights": own}}):
        with pytest.raises(ValueError, match="corpus_fits"):
            store.save_calibration(dict(DEFAULT_WEIGHTS), 1, {}, corpus_fits=bad)


def test_counts_rejudge_each_corpus_by_its_own_weights(store: MemoryStore) -> None:
    """An outcome of a corpus with a fit of its own is judged by that fit, as the engine on that
    corpus would judge it; the others by the fit on all labels."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory.store import Verdicts

    store.record(make_answer("q1", (make_attempt(1),)), corpus="/i/a")
    store.record(make_answer("q2", (make_attempt(1),)), corpus="/i/b")
    store.record(make_answer("q3", (make_attempt(1),)))
    key = STRATEGY_A.key
    trusting, doubting = {**DEFAULT_WEIGHTS, "bias": 10.0}, {**DEFAULT_WEIGHTS, "bias": -10.0}
    assert store.strategy_counts(verdicts=Verdicts(trusting, answer_threshold=0.5)) == {key: (3, 0)}
    assert store.strategy_counts(verdicts=Verdicts(trusting, answer_threshold=0.5,
                                                   corpus_weights={"/i/a": doubting})) == {key: (2, 1)}
    assert store.strategy_counts(verdicts=Verdicts(doubting, answer_threshold=0.5,
                                                   corpus_weights={"/i/a": trusting, "/i/b": trusting})) == {key: (2, 1)}
    # A corpus fit stored before a feature existed lacks its weight: it counts as that fit's 0.
    old = {k: v for k, v in trusting.items() if k != "explanation"}
    assert store.strategy_counts(verdicts=Verdicts(doubting, answer_threshold=0.5,
                                                   corpus_weights={"/i/a": old})) == {key: (1, 2)}
    repaired = store.record(repaired_answer("r1"), corpus="/i/a")
    assert repaired
    assert store.repair_counts("WEAK_RETRIEVAL", verdicts=Verdicts(trusting, answer_threshold=0.5,
                                                                   corpus_weights={"/i/a": doubting})) == {
        "switch_retriever": (0, 1)}
    assert store.repairs_by_failure(verdicts=Verdicts(doubting, answer_threshold=0.5,
                                                      corpus_weights={"/i/a": trusting})) == {"WEAK_RETRIEVAL": (1, 0)}


def test_the_policy_s_counts_can_be_read_for_one_corpus(store: MemoryStore) -> None:
    """A store serving two index folders answers the policy's counts for one of them (its
    outcomes' corpus); without a corpus, every outcome counts, those recorded without one too."""
    store.record(make_answer("q1", (make_attempt(1),)), corpus="/i/a")
    store.record(make_answer("q2", (make_attempt(1, failure="LOW_CONFIDENCE"),)), corpus="/i/b")
    store.record(make_answer("q3", (make_attempt(1),)))
    store.record(repaired_answer("r1"), corpus="/i/b")
    key = STRATEGY_A.key
    assert store.strategy_counts(corpus="/i/a") == {key: (1, 0)}
    assert store.strategy_counts(corpus="/i/b") == {key: (0, 2)}
    assert store.strategy_counts() == {key: (2, 2)}
    assert store.repair_counts("WEAK_RETRIEVAL", corpus="/i/a") == {}
    assert store.repair_counts("WEAK_RETRIEVAL", corpus="/i/b") == {"switch_retriever": (1, 0)}
    assert store.repairs_by_failure(corpus="/i/a") == {}
    assert store.repairs_by_failure(corpus="/i/b") == store.repairs_by_failure() == {"WEAK_RETRIEVAL": (1, 0)}


def test_ctrl_c_inside_a_sql_function_is_an_interrupt_not_a_database_error(tmp_path, monkeypatch) -> None:
    """SQLite reports anything a Python SQL function raises as OperationalError; a Ctrl-C landing
    in one (the counts call them per row) used to reach the user as an internal error."""
    import sqlite3

    from self_improving_rag.memory import store as store_module

    def interrupted(*args):
        raise KeyboardInterrupt

    with MemoryStore(tmp_path / "m.db") as s:
        assert s._one("SELECT sirag_answer_words('three short words', 0) AS w")["w"] > 0
        monkeypatch.setattr(store_module, "answer_words", interrupted)
        with pytest.raises(KeyboardInterrupt):
            s._one("SELECT sirag_answer_words('three short words', 0) AS w")
        monkeypatch.undo()
        # The mark is cleared: a real failure of SQL later is not taken for an interrupt.
        assert not store_module.interrupted_in_sql(sqlite3.OperationalError("no such table: x"))
        assert s._one("SELECT sirag_answer_words('three short words', 0) AS w")["w"] > 0


def test_a_real_ctrl_c_during_a_long_count_is_an_interrupt(tmp_path) -> None:
    """A SIGINT that arrives while SQLite runs C code would be raised at the next Python step, the
    entry of a SQL function, where SQLite reports it as its own failure: reads hold the signal,
    interrupt the statement, and raise KeyboardInterrupt when it has returned."""
    import os
    import signal
    import threading
    import time

    long_count = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000) "
                  "SELECT sum(sirag_sigmoid(x % 7)) AS s FROM c")
    with MemoryStore(tmp_path / "m.db") as s:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                s._one(long_count)
        finally:
            timer.cancel()
        assert time.monotonic() - t0 < 10  # the statement was interrupted, not run to its end
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
        assert s._one("SELECT sirag_sigmoid(0) AS p")["p"] == 0.5  # the store works on


def test_a_ctrl_c_that_lands_as_a_write_takes_the_lock_leaves_no_transaction_open(tmp_path) -> None:
    """A SIGINT that arrives while a write waits for another process's lock is raised the moment
    BEGIN IMMEDIATE returns with the lock. The write must roll back there too: a store left inside
    that transaction kept the lock, and a batch worker that lived on after its Ctrl-C held it
    while the other worker's next write waited out the 120 s retry deadline."""
    import os
    import signal
    import threading

    db = tmp_path / "m.db"
    with MemoryStore(db) as s:
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        # Ctrl-C while the write waits for the lock, then the lock is freed: SQLite takes it and
        # returns, and Python raises the KeyboardInterrupt at its next step.
        ctrl_c = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        freed = threading.Timer(0.5, other.execute, ("ROLLBACK",))
        ctrl_c.start()
        freed.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                s.record(make_answer(), run_id="r", item_id="q1")
        finally:
            ctrl_c.cancel()
            freed.cancel()
            freed.join()
        assert not s.db.conn.in_transaction, "the interrupted write kept its transaction (and the lock)"
        # Another process can write at once, and the interrupted write left nothing behind.
        other.execute("PRAGMA busy_timeout = 0")
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        other.close()
        assert s._one("SELECT COUNT(*) AS n FROM outcomes")["n"] == 0
        s.record(make_answer(), run_id="r", item_id="q1")  # and the store writes on
        assert s._one("SELECT COUNT(*) AS n FROM outcomes")["n"] == 1


def test_agreement_reaches_the_sql_confidence_and_calibration(store: MemoryStore) -> None:
    """agreement lives in the stored features: the SQL confidence reads it (a missing value is the
    neutral 0.5), and labelled_attempts hands it on (None where no replies were sampled)."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS, sigmoid

    def with_agreement(q: str, value) -> str:
        return _record_with_detail(store, q, {"features": {} if value is None else {"agreement": value}}, correct=True)

    rows = {with_agreement("q1", 1.0): 1.0, with_agreement("q2", 0.25): 0.25, with_agreement("q3", None): None}
    weights = {**{k: 0.0 for k in DEFAULT_WEIGHTS}, "bias": -1.0, "agreement": 2.0}

    def passing(bar: float) -> int:
        return _passing(store, weights, bar)

    # Logits: q1 −1 + 2 = 1; q2 −1 + 0.5 = −0.5; q3 neutral −1 + 1 = 0.
    assert passing(sigmoid(-0.5) - 1e-6) == 3 and passing(sigmoid(0.0) - 1e-6) == 2
    assert passing(sigmoid(1.0) - 1e-6) == 1 and passing(sigmoid(1.0) + 1e-6) == 0
    assert {r["outcome_id"]: r["agreement"] for r in store.labelled_attempts()} == rows


def test_current_labels_gives_the_label_in_use_of_the_outcomes_asked_for(store: MemoryStore) -> None:
    a, b, c = (store.record(make_answer(f"Who kept light {i}?", answer="Tobias Lune [1]")) for i in range(3))
    store.add_feedback(a, correct=True, source="gold")
    store.add_feedback(a, correct=False)  # a user's label wins over gold
    store.add_feedback(b, correct=True)
    assert store.current_labels([a, b, c, a]) == {a: 0, b: 1}
    assert store.current_labels([]) == {}
