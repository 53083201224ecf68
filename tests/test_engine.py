"""The engine's loop with the scripted generator: retry, recovery, refusal, budget, memory."""

from __future__ import annotations

import pytest

from self_improving_rag.config import load_config
from self_improving_rag.errors import InputError
from self_improving_rag.feedback import policy as policy_module
from tests.conftest import fake_overrides

REFUSE = "I cannot answer this from the documents."
GOOD = "Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."


def test_fail_then_recover(make_engine):
    engine, gen, store = make_engine([REFUSE, GOOD])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert not ans.refused
    assert "Tobias Lune" in ans.answer
    assert len(ans.attempts) == 2
    assert ans.attempts[0].attribution.failure != "NONE"
    assert ans.attempts[1].repair is not None
    assert ans.attempts[1].strategy.key != ans.attempts[0].strategy.key
    assert ans.chosen_attempt == 2
    assert store.stats()["outcomes"] == 1
    assert len(gen.history) == 2


def test_refuses_after_budget_and_shows_closest_passages(make_engine):
    engine, gen, _ = make_engine([REFUSE])
    ans = engine.ask("What colour was the harbour master's umbrella?")
    assert ans.refused and ans.answer is None
    assert len(ans.attempts) == engine.config.loop.max_attempts
    assert ans.refusal_reason and "attempt" in ans.refusal_reason
    assert 0 < len(ans.sources) <= engine.config.loop.show_passages_on_refusal
    keys = [a.strategy.key for a in ans.attempts]
    assert len(set(keys)) == len(keys), "a repair never repeats a tried strategy"


def test_no_retry_runs_one_attempt(make_engine):
    engine, gen, _ = make_engine([REFUSE, GOOD])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    assert len(ans.attempts) == 1 and ans.refused


def test_time_budget_stops_the_loop(tmp_path, make_engine):
    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.max_seconds=0.000001", "loop.max_attempts=5"])
    engine, gen, _ = make_engine([REFUSE], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert len(ans.attempts) == 1


def test_a_refusal_cut_short_by_the_time_budget_says_so(tmp_path, make_engine):
    """A refusal after fewer attempts than loop.max_attempts names the time budget that stopped
    the loop, as it names memory's record when that stops it."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.max_seconds=0.000001", "loop.max_attempts=5"])
    engine, _, _ = make_engine([REFUSE], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert ans.refused and len(ans.attempts) == 1
    assert "loop.max_seconds" in ans.refusal_reason and "time budget" in ans.refusal_reason


def test_a_refusal_with_no_repair_left_says_so(make_engine):
    engine, _, _ = make_engine([REFUSE])
    engine.warm_up()
    engine.policy.repair = lambda *a, **k: None  # every repair of the failure already tried
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert ans.refused and len(ans.attempts) == 1
    assert "no repair after" in ans.refusal_reason


@pytest.mark.parametrize("budget,expected", [(0.5, 1), (0.75, 2)])
def test_time_budget_does_not_start_an_attempt_that_would_overrun_it(tmp_path, make_engine, budget, expected):
    """Attempts take ~0.3 s: a retry starts only if the mean attempt still fits the budget;
    loading the models (1 s here) is not counted against the question."""
    import time

    # Sampling (temperature > 0), so that a repair whose prompt repeats an earlier one is still tried.
    cfg = load_config(None, fake_overrides(tmp_path) + [f"loop.max_seconds={budget}", "loop.max_attempts=5",
                                                         "policy.stop_below=0", "generator.temperature=0.5"])
    engine, gen, _ = make_engine([REFUSE], config=cfg)
    engine.warm_up()
    real_attempt = engine._attempt

    def slow_attempt(*a, **k):
        time.sleep(0.3)
        return real_attempt(*a, **k)

    loads = []

    def slow_load():  # the first call stands for loading the models
        if not loads:
            time.sleep(1.0)
        loads.append(1)

    engine._attempt = slow_attempt
    engine.warm_up = slow_load
    t = time.perf_counter()
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert len(ans.attempts) == expected
    assert time.perf_counter() - t - 1.0 < budget + 0.25


def test_json_contract_keys(make_engine):
    engine, _, _ = make_engine([GOOD])
    data = engine.ask("Who saved the sailors of the Greyling?").to_json()
    for key in ("question", "answer", "refused", "refusal_reason", "confidence", "sources", "attempts", "timings_ms"):
        assert key in data
    assert 0.0 <= data["confidence"] <= 1.0
    for s in data["sources"]:
        assert {"doc", "section", "start", "end", "text", "score"} <= set(s)
    for a in data["attempts"]:
        assert {"strategy", "signals", "failure", "prompt_tokens", "completion_tokens", "timings_ms"} <= set(a)
    assert "total" in data["timings_ms"]
    # The answer's confidence is the chosen attempt's, to the last digit (no rounding in one place only).
    chosen = data["attempts"][data["chosen_attempt"] - 1]
    assert data["confidence"] == chosen["signals"]["confidence"]["value"]


def test_made_up_claim_is_flagged(make_engine):
    engine, _, _ = make_engine(["Tobias Lune saved eleven sailors [1]. He was later crowned king of Portugal in Lisbon [1]."])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    att = ans.attempts[0]
    assert att.attribution.failure == "HALLUCINATION_RISK"
    assert any("Portugal" in c for c in att.signals.faithfulness.detail["unsupported"])


@pytest.mark.parametrize("question", ["", "   ", "?!?", "x" * 100_000, "Who is \udce9 Holmes?"])
def test_bad_questions(make_engine, question):
    engine, _, _ = make_engine([GOOD])
    with pytest.raises(InputError):
        engine.ask(question)


def test_policy_prefers_historically_successful_first_strategy(tmp_path, make_engine):
    """After seeded history where the semantic chunker succeeds for 'who' questions, the policy picks it."""
    from dataclasses import replace

    engine, gen, store = make_engine([GOOD])
    default = engine.policy.default
    good = replace(default, chunker="semantic")
    for i in range(12):
        engine.ask(f"Who saved the sailors number {i}?", first_strategy=good, loop=False)
    gen.replies = [REFUSE]
    gen._i = 0
    for i in range(12):
        engine.ask(f"Who rowed the boat number {i}?", first_strategy=default, loop=False)
    picks = [engine.policy.first(f"Who kept the light {i}?", __import__("self_improving_rag.query", fromlist=["x"]).query_features("Who kept the light?")).chunker
             for i in range(20)]
    assert picks.count("semantic") >= 16


def test_policy_orders_repairs_by_history(make_engine):
    from self_improving_rag.query import query_features

    engine, gen, store = make_engine([REFUSE])
    feats = query_features("Who saved the sailors?")
    base = engine.policy.repair_order("Who saved the sailors?", "WEAK_RETRIEVAL", feats)
    assert base[0] == "switch_chunker"

    class Counts:
        def strategy_counts(self, qc=None, first_only=True, use_labels=False, verdicts=None, corpus=None):
            return {}

        def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
            return {"query_rewrite": (30, 1), "switch_chunker": (1, 30)}

    engine.policy.memory = Counts()
    order = engine.policy.repair_order("Who saved the sailors?", "WEAK_RETRIEVAL", feats)
    assert order[0] == "query_rewrite"
    assert order.index("switch_chunker") > order.index("query_rewrite")


def test_policy_learns_a_first_strategy_from_successful_repairs(make_engine):
    """A strategy that only ever succeeded as a repair becomes the first choice for its class."""
    from dataclasses import replace

    from self_improving_rag.query import query_features

    engine, gen, store = make_engine([GOOD])
    default = engine.policy.default
    good = replace(default, chunker="semantic", top_k=8)
    feats = query_features("Who kept the light?")

    class History:
        def __init__(self, first_only_seen):
            self.seen = first_only_seen

        def strategy_counts(self, qc=None, first_only=True, use_labels=False, verdicts=None, corpus=None):
            self.seen.append(first_only)
            if first_only:  # the default was always chosen first, and failed half the time
                return {default.key: (10, 10)}
            return {default.key: (10, 10), good.key: (18, 1)}  # `good` ran as a repair and worked

        def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
            return {}

    seen: list[bool] = []
    engine.policy.memory = History(seen)
    picks = [engine.policy.first(f"Who kept the light {i}?", feats) for i in range(20)]
    assert sum(p.key == good.key for p in picks) >= 16 and set(seen) == {False}


def test_memory_stops_retrying_a_failure_whose_repairs_keep_failing(tmp_path, make_engine, monkeypatch):
    """After enough failed repairs of one failure type, the loop stops at the first attempt."""
    monkeypatch.setattr(policy_module, "STOP_EXPLORE", 0.0)
    cfg = load_config(None, fake_overrides(tmp_path))
    engine, gen, store = make_engine([REFUSE], config=cfg)
    question = "What colour was the harbour master's umbrella?"
    attempts = []
    for _ in range(15):
        ans = engine.ask(question)
        attempts.append(len(ans.attempts))
        assert ans.refused
    assert attempts[0] == engine.config.loop.max_attempts
    assert attempts[-1] == 1, attempts
    first_stop = attempts.index(1)
    # Up to the first stop, every question ran its repairs: at least STOP_MIN_EVIDENCE of them.
    assert sum(a - 1 for a in attempts[:first_stop]) >= policy_module.STOP_MIN_EVIDENCE
    assert all(a == 1 for a in attempts[first_stop:])
    assert "no retry: memory shows repairs after" in ans.refusal_reason


def test_stop_below_zero_keeps_retrying(tmp_path, make_engine):
    cfg = load_config(None, fake_overrides(tmp_path) + ["policy.stop_below=0"])
    engine, gen, store = make_engine([REFUSE], config=cfg)
    lengths = [len(engine.ask("What colour was the harbour master's umbrella?").attempts) for _ in range(12)]
    assert lengths == [engine.config.loop.max_attempts] * 12


class RepairCounts:
    """A memory whose repair record after LOW_CONFIDENCE is one table pooled over classes, plus
    tables per class; ``others`` holds the totals (successes, failures) after other failures."""

    def __init__(self, table, per_class=None, others=None):
        self.table, self.per_class, self.others = table, per_class or {}, others or {}
        self.verdicts_seen: list = []  # the verdicts each count was asked with

    def strategy_counts(self, qc=None, first_only=True, use_labels=False, verdicts=None, corpus=None):
        self.verdicts_seen.append(verdicts)
        return {}

    def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
        self.verdicts_seen.append(verdicts)
        if failure != "LOW_CONFIDENCE":
            return {}
        return self.table if qc is None else self.per_class.get(qc, {})

    def repairs_by_failure(self, use_labels=False, verdicts=None, corpus=None):
        self.verdicts_seen.append(verdicts)
        out = dict(self.others)
        if self.table:
            out["LOW_CONFIDENCE"] = (sum(c[0] for c in self.table.values()), sum(c[1] for c in self.table.values()))
        return out


def evidence(stop):
    return None if stop is None else (stop.successes, stop.repairs)


def test_futile_needs_evidence_and_a_low_rate(tmp_path, make_engine, monkeypatch):
    monkeypatch.setattr(policy_module, "STOP_EXPLORE", 0.0)
    cfg = load_config(None, fake_overrides(tmp_path))
    engine, gen, store = make_engine([GOOD], config=cfg)
    Counts = RepairCounts
    policy = engine.policy
    policy.memory = Counts({"rerank": (0, 10), "more_context": (0, 9)})  # 19 repairs: too few to judge
    assert policy.futile("LOW_CONFIDENCE") is None
    policy.memory = Counts({"rerank": (0, 10), "more_context": (1, 19)})  # (1 + 1) / (30 + 2) < 0.1
    stop = policy.futile("LOW_CONFIDENCE")
    assert evidence(stop) == (1, 30) and stop.pooled is None
    # The engine answers from one index: the record is that index's, and the note says so.
    assert stop.note == "no retry: memory shows repairs after LOW_CONFIDENCE on this index worked 1 time(s) in 30"
    policy.memory = Counts({"rerank": (2, 10), "more_context": (1, 17)})  # (3 + 1) / (30 + 2) >= 0.1
    assert policy.futile("LOW_CONFIDENCE") is None


def test_futile_borrows_other_failures_record_for_a_failure_with_little_of_its_own(tmp_path, make_engine, monkeypatch):
    """A failure type never repaired yet starts from the record of repairs after other failures."""
    monkeypatch.setattr(policy_module, "STOP_EXPLORE", 0.0)
    cfg = load_config(None, fake_overrides(tmp_path))
    engine, gen, store = make_engine([GOOD], config=cfg)
    policy = engine.policy
    # Repairs after WEAK_RETRIEVAL worked 1 time in 27: (1 + 1) / (27 + 2) < 0.1.
    policy.memory = RepairCounts({}, others={"WEAK_RETRIEVAL": (1, 26)})
    stop = policy.futile("LOW_CONFIDENCE")
    assert evidence(stop) == (0, 0) and stop.pooled == (1, 27)
    assert stop.note == ("no retry: memory holds no repair after LOW_CONFIDENCE on this index yet, and repairs "
                         "after any failure worked 1 time(s) in 27")
    # The same record where repairs work a third of the time: retry.
    policy.memory = RepairCounts({}, others={"WEAK_RETRIEVAL": (9, 18)})
    assert policy.futile("LOW_CONFIDENCE") is None
    # Fewer than stop_min_evidence repairs in all of memory: nothing is judged futile.
    policy.memory = RepairCounts({}, others={"WEAK_RETRIEVAL": (0, 19)})
    assert policy.futile("LOW_CONFIDENCE") is None
    # The failure's own few repairs pull it away from the pooled rate: 4 of 6 worked,
    # (4 + 20 * 2/29) / (6 + 20) >= 0.1, while 0 of 6 keep it futile.
    policy.memory = RepairCounts({"rerank": (4, 2)}, others={"WEAK_RETRIEVAL": (1, 26)})
    assert policy.futile("LOW_CONFIDENCE") is None
    policy.memory = RepairCounts({"rerank": (0, 6)}, others={"WEAK_RETRIEVAL": (1, 26)})
    stop = policy.futile("LOW_CONFIDENCE")
    assert evidence(stop) == (0, 6)
    assert stop.note.endswith("worked 0 time(s) in 6, and repairs after any failure 1 time(s) in 33")
    # With stop_min_evidence repairs of its own the failure type is judged by them alone.
    policy.memory = RepairCounts({"rerank": (3, 17)}, others={"WEAK_RETRIEVAL": (0, 200)})
    assert policy.futile("LOW_CONFIDENCE") is None


def test_futile_reads_the_query_class_when_it_has_evidence_of_its_own(tmp_path, make_engine, monkeypatch):
    from self_improving_rag.query import query_features

    monkeypatch.setattr(policy_module, "STOP_EXPLORE", 0.0)
    cfg = load_config(None, fake_overrides(tmp_path))
    engine, gen, store = make_engine([GOOD], config=cfg)
    policy = engine.policy
    who, when = "Who rang the bell?", "When did the bell ring?"
    pooled = {"rerank": (10, 210)}  # futile over all classes
    # `when` repairs work half the time: its own record (20 repairs) overrides the pooled one.
    policy.memory = RepairCounts(pooled, {"when": {"rerank": (10, 10)}, "who": {"rerank": (0, 200)}})
    assert policy.futile("LOW_CONFIDENCE", when, query_features(when)) is None
    assert evidence(policy.futile("LOW_CONFIDENCE", who, query_features(who))) == (0, 200)
    # A class with a full record of its own is judged by it, even where the failure type's
    # record was too short and borrowed: the note names the class's record alone.
    policy.memory = RepairCounts({"rerank": (0, 5)}, {"who": {"rerank": (0, 20)}}, others={"WEAK_RETRIEVAL": (0, 30)})
    stop = policy.futile("LOW_CONFIDENCE", who, query_features(who))
    assert evidence(stop) == (0, 20) and stop.pooled is None
    # A class with too little evidence of its own is shrunk toward the pooled rate (k = 20):
    # 5 of 10 repairs that worked keep it retrying, 0 of 2 do not.
    policy.memory = RepairCounts(pooled, {"when": {"rerank": (5, 5)}, "who": {"rerank": (0, 2)}})
    assert policy.futile("LOW_CONFIDENCE", when, query_features(when)) is None
    assert evidence(policy.futile("LOW_CONFIDENCE", who, query_features(who))) == (10, 220)
    # Without enough evidence in all of memory nothing is futile, whatever one class shows.
    policy.memory = RepairCounts({"rerank": (0, 15)}, {"who": {"rerank": (0, 15)}})
    assert policy.futile("LOW_CONFIDENCE", who, query_features(who)) is None


def test_futile_lets_a_seeded_share_of_questions_retry(tmp_path, make_engine):
    """Exploration keeps the record that stopped the loop changing; a run repeats its choices."""
    from self_improving_rag.query import query_features

    engine, gen, store = make_engine([GOOD])
    policy = engine.policy
    assert policy_module.STOP_EXPLORE == pytest.approx(0.1)
    policy.memory = RepairCounts({"rerank": (0, 100)})
    questions = [f"Who rang bell number {i}?" for i in range(400)]
    stopped = [evidence(policy.futile("LOW_CONFIDENCE", q, query_features(q))) for q in questions]
    share_retry = sum(s is None for s in stopped) / len(stopped)
    assert 0.05 < share_retry < 0.15
    assert stopped == [evidence(policy.futile("LOW_CONFIDENCE", q, query_features(q))) for q in questions]


@pytest.mark.parametrize("question, answer, echo", [
    ("Who killed Enoch Drebber in Brixton?", "Drebber [2]", True),
    ("Who saved the sailors of the Greyling?", "The sailors of the Greyling [1].", True),
    ("Who saved the sailors of the Greyling?", "Tobias Lune [1].", False),
    # A choice offered by the question, or a yes/no question, is answered with its own words.
    ("Was the lighthouse built by Clara Venn or by Tobias Lune?", "Clara Venn built it [1].", False),
    ("Which is older, the lighthouse or the market bell?", "The lighthouse [2].", False),
    ("Did Tobias Lune save the sailors?", "Tobias Lune saved the sailors [1].", False),
    # No content word at all: nothing to check, no answer; but "No" answers a yes/no question.
    ("Who saved the sailors?", "[1]", True),
    ("Who saved the sailors?", "He did [1].", True),
    ("What colour was the keeper's dog?", "x", True),
    ("Did Tobias Lune save the sailors?", "No [1].", False),
    ("Was the lighthouse built by Clara Venn or by Tobias Lune?", "The former [1].", False),
    # Short answers made of common words are answers.
    ("How many daughters did the keeper have?", "One [1].", False),
    ("How many times did the bell ring?", "Once [1].", False),
    ("Who saw the wreck?", "No one [1].", False),
    ("Where did the cat climb?", "Up [1].", False),
    ("Tobias Lune was in Paris, right?", "No [1].", False),
])
def test_an_answer_that_only_echoes_the_question_is_no_answer(question, answer, echo):
    from self_improving_rag.questions import restates_question

    assert restates_question(question, answer) is echo


def test_an_answer_chosen_from_the_question_s_alternatives_is_returned(make_engine):
    engine, gen, _ = make_engine(["Tobias Lune [1]."])
    ans = engine.ask("Was it Tobias Lune or Clara Venn who saved the sailors of the Greyling?")
    assert not ans.refused and ans.answer.startswith("Tobias Lune")
    assert ans.attempts[0].signals.refusal is False


def test_an_attempt_below_the_answer_threshold_is_retried_not_accepted_as_none(tmp_path, make_engine):
    """loop.answer_threshold above thresholds.confidence: an attempt the engine would not return
    is diagnosed LOW_CONFIDENCE and the loop goes on, instead of stopping on it as NONE."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.answer_threshold=0.9999", "policy.stop_below=0"])
    engine, gen, _ = make_engine([GOOD], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    first = ans.attempts[0]
    assert first.signals.confidence.value < 0.9999
    assert first.attribution.failure == "LOW_CONFIDENCE"
    assert len(ans.attempts) == cfg.loop.max_attempts and ans.refused
    assert "NONE" not in ans.refusal_reason


def test_a_retry_must_clear_a_higher_bar(tmp_path, make_engine):
    """loop.retry_margin: attempt n needs answer_threshold + retry_margin * (n - 1). A retry that
    clears the first attempt's bar but not its own is LOW_CONFIDENCE, and the loop goes on."""
    from self_improving_rag.outcome import answer_bar

    question = "Who saved the sailors of the Greyling in the storm?"
    base = fake_overrides(tmp_path) + ["policy.stop_below=0", "loop.retry_margin=0"]
    engine, _, _ = make_engine([REFUSE, GOOD], config=load_config(None, base), memory=False)
    recovered = engine.ask(question)
    conf = recovered.attempts[1].signals.confidence.value
    assert not recovered.refused and recovered.chosen_attempt == 2 and 0.5 <= conf < 0.99

    margin = round(conf - 0.5 + 0.005, 4)  # attempt 2's bar sits just above its confidence
    cfg = load_config(None, fake_overrides(tmp_path) + ["policy.stop_below=0", f"loop.retry_margin={margin}"])
    assert answer_bar(cfg.loop, 1) == 0.5 and answer_bar(cfg.loop, 2) > conf
    assert answer_bar(cfg.loop, 50) == 1.0
    engine, _, _ = make_engine([REFUSE, GOOD, GOOD], config=cfg, memory=False)
    ans = engine.ask(question)
    second = ans.attempts[1]
    assert second.answer is not None and second.signals.confidence.value == pytest.approx(conf)
    assert second.attribution.failure == "LOW_CONFIDENCE"
    assert len(ans.attempts) == 3 and ans.refused
    assert f"{answer_bar(cfg.loop, 2):.2f}" in ans.refusal_reason


def test_an_answer_without_evidence_is_refused_however_confident(make_engine):
    # Nothing in the corpus is about the question: every attempt is WEAK_RETRIEVAL. Even at a
    # confidence above every bar (set here), the engine's own diagnosis vetoes the answer.
    from dataclasses import replace

    engine, _, _ = make_engine(["The moon is red on Mars [1]."] * 3)
    real = engine._attempt

    def confident(*args, **kwargs):
        rec = real(*args, **kwargs)
        sig = replace(rec.signals, confidence=replace(rec.signals.confidence, value=0.95))
        return replace(rec, signals=sig)

    engine._attempt = confident
    ans = engine.ask("What colour is the moon on Mars?")
    assert [a.attribution.failure for a in ans.attempts] == ["WEAK_RETRIEVAL"] * len(ans.attempts)
    assert all(a.answer for a in ans.attempts)
    assert ans.refused and ans.answer is None
    n = len(ans.attempts)
    assert ans.refusal_reason.startswith(f"{n} of {n} attempt(s) reached confidence ")
    assert "but their own checks found WEAK_RETRIEVAL (the question's evidence not found" in ans.refusal_reason
    assert "no answer reached confidence" not in ans.refusal_reason


def _fails(exc):
    def reply(messages):
        raise exc
    return reply


def test_a_retry_that_fails_keeps_the_earlier_attempts(make_engine):
    """A retry whose generation fails (a longer prompt the server refuses, say) ends the loop;
    the question is answered or refused from the attempts already made, and recorded."""
    from self_improving_rag.errors import GenerationError

    engine, gen, store = make_engine([REFUSE, _fails(GenerationError("prompt too long for the server's context"))])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert len(ans.attempts) == 1 and len(gen.history) == 2
    assert ans.refused and "attempt 2" in ans.refusal_reason and "prompt too long" in ans.refusal_reason
    assert ans.outcome_id is not None and store.stats()["outcomes"] == 1


def test_a_failing_first_attempt_or_a_lost_generator_is_raised(make_engine):
    from self_improving_rag.errors import GenerationError, GeneratorUnavailableError

    engine, _, store = make_engine([_fails(GenerationError("the model produced no text"))])
    with pytest.raises(GenerationError, match="no text"):
        engine.ask("Who saved the sailors of the Greyling in the storm?")
    engine, _, store = make_engine([REFUSE, _fails(GeneratorUnavailableError("the server is unreachable"))])
    with pytest.raises(GeneratorUnavailableError):
        engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert store.stats()["outcomes"] == 0


def test_a_failed_warm_up_is_retried_by_the_next_question(make_engine):
    import sqlite3

    engine, _, store = make_engine([GOOD])
    real = store.latest_calibration
    calls = []

    def locked_once():
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        return real()

    store.latest_calibration = locked_once
    with pytest.raises(sqlite3.OperationalError):
        engine.ask("Who saved the sailors of the Greyling in the storm?")
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert not ans.refused and "Tobias Lune" in ans.answer and len(calls) == 2


def test_a_negated_yes_no_question_is_answered_not_echoed(make_engine):
    engine, _, _ = make_engine(["Tobias Lune did [1]."])
    ans = engine.ask("Didn't Tobias Lune save the sailors of the Greyling?")
    assert not ans.refused and ans.answer.startswith("Tobias Lune did")


def _labelled_store(path, n_short=30, n_long=30):
    from self_improving_rag.memory import MemoryStore
    from tests.memory.memory_testkit import add_labelled_answers

    path.parent.mkdir(parents=True, exist_ok=True)
    with MemoryStore(path) as store:
        add_labelled_answers(store, n_short, n_long)


@pytest.mark.parametrize("auto", [True, False])
def test_the_engine_calibrates_its_confidence_from_memorys_labels_when_it_starts(tmp_path, make_engine, auto):
    """With calibration.auto_fit the engine fits the weights on the labels a store holds and
    answers with them; without it the default weights stay."""
    _labelled_store(tmp_path / "memory" / "memory.db")
    cfg = load_config(None, fake_overrides(tmp_path) + [f"calibration.auto_fit={str(auto).lower()}"])
    engine, gen, store = make_engine([GOOD], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    fit = store.latest_calibration()
    if auto:
        assert fit is not None and fit["n"] == 60
        assert engine._scorer.weights == fit["weights"]
        assert "(fitted weights)" in ans.attempts[0].signals.confidence.reason
    else:
        assert fit is None and engine._scorer.weights is None
        assert "(default weights)" in ans.attempts[0].signals.confidence.reason


def test_the_policy_judges_memory_by_the_confidence_in_use(tmp_path, make_engine):
    """Memory's attempts are counted under the weights and bars the engine answers with (here a
    fit made at start), not under the diagnoses stored with them."""
    _labelled_store(tmp_path / "memory" / "memory.db")
    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.retry_margin=0.05"])
    engine, gen, store = make_engine([GOOD], config=cfg)
    engine.warm_up()
    verdicts = engine.policy.verdicts
    fit = store.latest_calibration()
    assert fit is not None and verdicts.weights == fit["weights"] == engine._scorer.weights
    assert (verdicts.answer_threshold, verdicts.retry_margin, verdicts.confidence_floor) == (
        cfg.loop.answer_threshold, 0.05, cfg.thresholds.confidence)
    # Every count the policy reads is asked with these verdicts.
    from self_improving_rag.query import query_features

    real, fake = engine.policy.memory, RepairCounts({"rerank": (0, 30)})
    engine.policy.memory = fake
    q = "Who saved the sailors?"
    engine.policy.first(q, query_features(q))
    engine.policy.futile("LOW_CONFIDENCE", q, query_features(q))
    engine.policy.repair_order(q, "LOW_CONFIDENCE", query_features(q))
    assert len(fake.verdicts_seen) >= 4 and all(v is verdicts for v in fake.verdicts_seen)
    engine.policy.memory = real
    # The long answers (mostly wrong) passed their checks when stored; the fit doubts them.
    stored = store.strategy_counts()
    judged = store.strategy_counts(verdicts=verdicts)
    assert sum(s for s, _ in stored.values()) == 60
    assert sum(s for s, _ in judged.values()) < 60


def test_the_engine_does_not_calibrate_on_too_few_labels_or_when_it_records_nothing(tmp_path, make_engine):
    _labelled_store(tmp_path / "memory" / "memory.db", n_short=20, n_long=20)
    engine, gen, store = make_engine([GOOD])
    engine.warm_up()
    assert store.latest_calibration() is None and engine._scorer.weights is None
    from tests.memory.memory_testkit import add_labelled_answers

    add_labelled_answers(store, 0, 20, start=40)  # 60 labels now: enough, but this engine records nothing
    engine, gen, store = make_engine([GOOD], record=False)  # e.g. `sirag ask --no-memory`
    engine.warm_up()
    assert store.latest_calibration() is None and engine._scorer.weights is None


def test_the_engine_reads_the_question_while_the_answer_prompt_is_evaluated(make_engine, fake_config):
    """The engine asks the generator to read the question as it evaluates the answer prompt
    (question_prior), and the confidence keeps the result."""
    import re

    from self_improving_rag.generation.prompts import question_span

    question = "Who saved the sailors of the Greyling in the storm?"
    def reader(messages, span):
        return [(w, -4.0 if "storm" in w else -0.5) for w in re.findall(r" ?\w+|[^\w\s]", span)]

    engine, gen, _ = make_engine([GOOD])
    gen.reader = reader
    detail = engine.ask(question, loop=False).attempts[0].signals.confidence.detail
    assert gen.prompt_reads == [question_span(question)]
    # "saved", "sailors" and "Greyling" are the answer's own words: "storm" is the one that tells.
    assert detail["features"]["question_prior"] == -4.0 and detail["question_prior_token"] == "storm"


def test_the_engine_records_its_corpus_and_answers_with_that_corpus_fit(tmp_path, make_engine):
    """Every outcome is recorded with the engine's index folder; a stored fit with a fit of its
    own for that corpus gives the engine (and the policy's verdicts) those weights."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory import MemoryStore

    cfg = load_config(None, fake_overrides(tmp_path) + ["calibration.auto_fit=false"])
    corpus = str((tmp_path / "index").resolve())
    pooled, own, other = ({**DEFAULT_WEIGHTS, "bias": b} for b in (0.5, 3.0, -3.0))
    path = tmp_path / "memory" / "memory.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    with MemoryStore(path) as store:
        store.save_calibration(pooled, 40, {}, corpus_fits={corpus: {"weights": own, "n": 30, "l2": 1.0},
                                                            "/elsewhere": {"weights": other, "n": 30, "l2": 1.0}})
    engine, gen, store = make_engine([GOOD], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert engine.corpus == corpus
    assert store.show(ans.outcome_id)["corpus"] == corpus
    verdicts = engine.policy.verdicts
    assert verdicts.weights == pooled
    reason = ans.attempts[0].signals.confidence.reason
    assert engine._scorer.weights == own and reason.endswith("(fitted weights of this corpus)")
    assert verdicts.corpus_weights == {corpus: own, "/elsewhere": other}


def test_after_a_reset_the_confidence_says_it_uses_the_default_weights(tmp_path, make_engine):
    """`sirag calibrate --reset` stores the default weights as the newest fit: the reason names
    them as the defaults, not as fitted ones."""
    from self_improving_rag.evaluation.calibrate import reset_calibration
    from self_improving_rag.memory import MemoryStore

    cfg = load_config(None, fake_overrides(tmp_path) + ["calibration.auto_fit=false"])
    path = tmp_path / "memory" / "memory.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    with MemoryStore(path) as store:
        reset_calibration(store)
    engine, gen, store = make_engine([GOOD], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert ans.attempts[0].signals.confidence.reason.endswith("(default weights)")


def _passages_of(messages) -> dict[int, str]:
    import re

    return {int(n): text for n, text in re.findall(r"^\[(\d+)\] (.*)$", messages[-1]["content"], re.MULTILINE)}


def test_a_claim_cited_to_the_wrong_passage_shows_the_passage_that_states_it(make_engine):
    """The claim check falls back to all passages when the cited one does not hold the claim; the
    answer is then accepted on another passage's words, so that passage is among the sources shown,
    and the faithfulness reason says which claim cites what."""
    seen = {}

    def miscite(messages):
        passages = _passages_of(messages)
        right = next(n for n, text in passages.items() if "eleven sailors" in text)
        wrong = next(n for n, text in passages.items() if "eleven" not in text and "Lune" not in text)
        seen.update(right=right, wrong=wrong)
        return f"Tobias Lune saved eleven sailors from the wreck [{wrong}]."

    engine, _, _ = make_engine([miscite])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    assert not ans.refused, ans.refusal_reason
    shown = {p.number for p in ans.sources}
    assert {seen["right"], seen["wrong"]} <= shown
    reason = ans.attempts[0].signals.faithfulness.reason
    assert f"cites [{seen['wrong']}], stated in [{seen['right']}]" in reason
    claims = ans.attempts[0].signals.faithfulness.detail["claims"]
    assert claims[0]["found_in"] == seen["right"]


def test_a_rightly_cited_answer_shows_only_what_it_cites(make_engine):
    def cite_right(messages):
        right = next(n for n, text in _passages_of(messages).items() if "eleven sailors" in text)
        return f"Tobias Lune saved eleven sailors from the wreck [{right}]."

    engine, _, _ = make_engine([cite_right])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    assert [p.number for p in ans.sources] == list(ans.attempts[0].citations)
    assert "cited elsewhere" not in ans.attempts[0].signals.faithfulness.reason


def test_an_uncited_answer_shows_the_passage_that_states_it(make_engine):
    """README, `sirag ask --json`: the sources are the passages cited and "the passage that states
    each claim that cites none". An answer without any citation is shown with the passage its claim
    was found in, not with every passage retrieved (as an older version did)."""
    seen = {}

    def uncited(messages):
        passages = _passages_of(messages)
        seen["passages"] = set(passages)
        seen["right"] = next(n for n, text in passages.items() if "eleven sailors" in text)
        return "Tobias Lune saved eleven sailors from the wreck."

    engine, _, _ = make_engine([uncited])
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    assert not ans.refused, ans.refusal_reason
    assert ans.attempts[0].citations == ()
    assert len(seen["passages"]) > 1  # otherwise every passage and the stating one are the same
    claims = ans.attempts[0].signals.faithfulness.detail["claims"]
    assert [c["found_in"] for c in claims] == [seen["right"]]
    assert [p.number for p in ans.sources] == [seen["right"]]


def test_a_refusal_shows_passages_when_only_a_later_attempt_found_any(tmp_path, make_engine):
    """BM25 finds no word of the question, so the first attempts have no passages; a later hybrid
    attempt does. The refusal shows the closest passages found, not the empty first attempt's."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["strategy.retriever=bm25", "loop.max_attempts=4"])
    engine, _, _ = make_engine([REFUSE], config=cfg)
    ans = engine.ask("Zebra quantum xylophone?")
    assert ans.refused
    assert not ans.attempts[0].passages and any(a.passages for a in ans.attempts)
    assert ans.sources


def test_a_keyword_rewrite_that_declines_adds_nothing_to_the_query():
    from self_improving_rag.attempt import rewrite_query
    from self_improving_rag.generation.scripted import ScriptedGenerator

    query, _ = rewrite_query(ScriptedGenerator([REFUSE]), "When was the lamp changed?")
    assert query == "When was the lamp changed?"
    query, _ = rewrite_query(ScriptedGenerator(["lamp, paraffin, burner"]), "When was the lamp changed?")
    assert query == "When was the lamp changed? lamp paraffin burner"
    # Keywords may hold words a refusal uses: a list is keywords, not a refusal.
    query, _ = rewrite_query(ScriptedGenerator(["clue, not mentioned, inquest"]), "What was left out?")
    assert query == "What was left out? clue not mentioned inquest"


def test_a_repair_that_repeats_a_prompt_is_skipped_at_temperature_0(tmp_path, make_engine):
    """In the small corpus every passage already fits the first budget, so more_context (the
    first repair of a decline with good evidence) would send the first prompt again: at
    temperature 0 the model would repeat its reply, so the next repair is taken instead, and no
    two attempts send one prompt. Sampling (temperature > 0) may reply otherwise, so it retries."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.max_attempts=3", "policy.stop_below=0"])
    engine, gen, _ = make_engine([REFUSE], config=cfg)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    sent = ["\x00".join(m["content"] for m in messages) for messages in gen.history]
    assert len(sent) == len(ans.attempts) == 3 and len(set(sent)) == 3
    assert "more_context" not in [a.repair for a in ans.attempts]

    # What a skipped repair spent (its search) is counted with the attempt before it.
    assert "skipped_repairs" in ans.attempts[0].timings_ms and "skipped_repairs" in ans.timings_ms

    cfg = load_config(None, fake_overrides(tmp_path) + ["loop.max_attempts=3", "policy.stop_below=0",
                                                         "generator.temperature=0.7"])
    engine, gen, _ = make_engine([REFUSE], config=cfg, memory=False)
    ans = engine.ask("Who saved the sailors of the Greyling in the storm?")
    assert ans.attempts[1].repair == "more_context"


def test_an_engine_that_records_refuses_a_read_only_store_before_answering(tmp_path, make_engine):
    from self_improving_rag.errors import MemoryStoreError
    from self_improving_rag.memory import MemoryStore

    engine, _, store = make_engine([GOOD])
    engine.ask("Who saved the sailors of the Greyling in the storm?")  # the store now exists
    ro_engine, gen, _ = make_engine([GOOD], memory=False)
    ro_engine.memory = MemoryStore(tmp_path / "memory" / "memory.db", read_only=True)
    try:
        with pytest.raises(MemoryStoreError, match="read-only"):
            ro_engine.ask("Who saved the sailors of the Greyling in the storm?")
        assert gen.history == [], "no answer is made that could not be recorded"
        ro_engine.record = False
        assert not ro_engine.ask("Who saved the sailors of the Greyling in the storm?").refused
    finally:
        ro_engine.memory.close()


def test_the_first_strategy_and_its_reason_are_logged(make_engine, caplog):
    import logging

    engine, _, _ = make_engine([GOOD])
    with caplog.at_level(logging.INFO, logger="self_improving_rag.engine"):
        engine.ask("Who saved the sailors of the Greyling in the storm?", loop=False)
    assert any("first attempt with c=" in r.getMessage() and "the configured default" in r.getMessage()
               for r in caplog.records)


def test_an_attempt_that_retrieved_nothing_does_not_say_the_model_declined(tmp_path, make_engine):
    """BM25 finds no passage for a question none of whose words the corpus holds: the model is
    not asked, so the diagnosis, the refusal and the JSON must not report a reply it never gave."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["strategy.retriever=bm25"])
    engine, gen, _ = make_engine([GOOD], config=cfg)
    ans = engine.ask("What colour is the moon on Tuesdays?", loop=False)
    assert ans.refused and len(ans.attempts) == 1 and not gen.history  # the model was not asked
    att = ans.attempts[0]
    assert att.prompt_tokens == 0 and not att.passages
    assert att.attribution.failure == "WEAK_RETRIEVAL"
    assert "no passage" in att.attribution.reason and "declined" not in att.attribution.reason
    assert ans.refusal_reason.startswith("retrieval found no passage")
    assert "declined" not in ans.refusal_reason
    assert "raw_answer" not in ans.to_json()["attempts"][0]


def test_a_refusal_after_attempts_that_retrieved_nothing_counts_only_those_the_model_read(tmp_path, make_engine):
    """BM25 finds nothing for the first attempt; a retry that switches the retriever finds
    passages and the model declines. The refusal says how many attempts the model read and how
    many retrieved nothing, not that the model found nothing "after 2 attempt(s)"."""
    cfg = load_config(None, fake_overrides(tmp_path) + ["strategy.retriever=bm25"])
    engine, gen, _ = make_engine(["I cannot answer this from the documents."] * 6, config=cfg)
    ans = engine.ask("What colour is the moon on Tuesdays?")
    assert ans.refused
    empty = [a for a in ans.attempts if not a.passages]
    read = [a for a in ans.attempts if a.passages]
    assert empty and read, [(a.strategy.key, len(a.passages)) for a in ans.attempts]
    assert ans.refusal_reason.startswith(f"the model found no answer in the passages of {len(read)} attempt(s) "
                                         f"({len(empty)} other(s) retrieved nothing)"), ans.refusal_reason


def test_a_reply_that_only_repeats_the_question_is_quoted_not_called_a_decline(make_engine):
    """A question that quotes its passage ("... Tobias Lune ... Who kept the light?") gets the
    reply "Tobias Lune [1].": taken for no answer, since it names nothing the question does not,
    but the model did not decline, and the text output shows no withheld reply. The diagnosis
    and the refusal quote what it said instead of saying "the model declined"."""
    engine, _, _ = make_engine(["Tobias Lune [1]."])
    ans = engine.ask("Keeper Tobias Lune kept the light for forty years. Who kept the light of Marrow Point?",
                     loop=False)
    assert ans.refused and ans.attempts[0].attribution.failure == "MISSED_ANSWER"
    reason = ans.attempts[0].attribution.reason
    assert "declined" not in reason and "'Tobias Lune [1].' names nothing the question does not" in reason, reason
    assert "declined" not in ans.refusal_reason
    # A reply that declines is still said to decline.
    engine, _, _ = make_engine([REFUSE])
    ans = engine.ask("Who kept the light of Marrow Point?", loop=False)
    assert "the model declined" in ans.attempts[0].attribution.reason


def test_a_yes_to_a_yes_no_question_is_checked_as_the_question_s_statement(make_engine):
    """"Yes [1]." to "Was the lighthouse built in 1852?" (the passage says so) was refused on every
    attempt: its one claim "Yes" has one term, "yes", which no passage holds, so it read as an
    answer from outside the passages (WEAK_RETRIEVAL), while "No [1]." ("no" is a stop word)
    passed unchecked. A "yes" is now checked as the statement the question makes."""
    engine, _, _ = make_engine(["Yes [1]."])
    ans = engine.ask("Was the lighthouse of Marrow Point built in 1852?", loop=False)
    assert not ans.refused and ans.answer == "Yes [1].", ans.refusal_reason
    claim = ans.attempts[0].signals.faithfulness.detail["claims"][0]
    assert claim["claim"] == "Yes" and claim["supported"]
    # A "yes" whose statement the passages do not hold is still not supported.
    engine, _, _ = make_engine(["Yes [1]."])
    ans = engine.ask("Was the lighthouse painted blue by Venetian glassblowers?", loop=False)
    assert ans.refused and ans.attempts[0].signals.faithfulness.value == 0.0


@pytest.mark.parametrize("question, supported", [
    ("Did Tobias Lune save eleven sailors from the wreck?", True),
    ("Did Tobias Lune save twelve sailors from the wreck?", False),  # the passage says eleven
    ("Was the lighthouse of Marrow Point built in 1852?", True),
    ("Was the lighthouse of Marrow Point built in 1858?", False),
    ("Did Dr. Pim buy smoked herring at the fish market?", True),
    ("Did Dr. Alder buy smoked herring at the fish market?", True),  # names present, not linked: a limit
    ("Did Dr. Hobbs buy smoked herring at the fish market?", False),
])
def test_a_yes_needs_the_statements_names_and_numbers_in_one_passage(make_engine, question, supported):
    """Checked as the question's statement, a "yes" to "Did Lune save twelve sailors?" shared four
    of its five words with the passage that says eleven, and passed. A "yes" affirms the whole
    statement: its names and numbers must all be in one passage."""
    engine, _, _ = make_engine(["Yes [1]."])
    ans = engine.ask(question, loop=False)
    claim = ans.attempts[0].signals.faithfulness.detail["claims"][0]
    assert claim["supported"] is supported and ans.refused is not supported, (claim, ans.refusal_reason)


@pytest.mark.parametrize("question", [
    "Did Mr. Tobias Lune save eleven sailors from the wreck?",  # a title the passage leaves out
    "Did T. Lune save eleven sailors from the wreck?",  # an initial: one letter is no claim term
])
def test_a_yes_is_not_refused_for_a_title_or_an_initial_the_passage_cannot_hold(make_engine, question):
    """The names a "yes" must find are claim terms: "T." (one letter) never is one, and "Mr." is
    a title, not a name; both made every right "yes" to such a question a refusal."""
    engine, _, _ = make_engine(["Yes [1]."])
    ans = engine.ask(question, loop=False)
    claim = ans.attempts[0].signals.faithfulness.detail["claims"][0]
    assert claim["supported"] and not ans.refused, (claim, ans.refusal_reason)


@pytest.mark.parametrize("statement, passage", [
    ("Did the U.S. enter the war in 1917", "The U.S. entered the war in 1917."),
    ("Was J. K. Rowling born in 1965", "J. K. Rowling was born in 1965."),
    ("Did the Seven Dwarfs live in the forest", "The Seven Dwarfs lived in the forest."),
    ("Was the Third Reich founded in 1933", "The Third Reich was founded in 1933."),
    ("Did O'Brien win the race", "O'Brien won the race."),
])
def test_a_yes_s_names_and_numbers_can_be_found_in_a_passage_that_says_the_same(statement, passage):
    from self_improving_rag.evaluation.faithfulness import yes_key_terms
    from self_improving_rag.text import claim_terms

    assert yes_key_terms(statement) <= set(claim_terms(passage))


def test_a_yes_to_a_question_that_offers_a_choice_is_not_read_as_its_statement(make_engine):
    """"Yes [1]." to "Was the lighthouse built by Clara Venn or by Tobias Lune?" names neither:
    checked as the question's statement, whose words the passage holds, it was accepted."""
    engine, _, _ = make_engine(["Yes [1]."])
    ans = engine.ask("Was the lighthouse of Marrow Point built by Clara Venn or by Tobias Lune?", loop=False)
    assert ans.refused, ans.answer
    assert not ans.attempts[0].signals.faithfulness.detail["claims"][0]["supported"]


@pytest.mark.parametrize("reply", ["**Yes** [1].", "\"Yes,\" it was [1].", "*Yes.* [1]"])
def test_a_yes_in_quotes_or_emphasis_is_read_as_a_yes(make_engine, reply):
    """A model writes "**Yes** [1]." as often as "Yes [1].": the emphasis hid the "yes", and the
    claim was checked by the one word no passage holds."""
    engine, _, _ = make_engine([reply])
    ans = engine.ask("Was the lighthouse of Marrow Point built in 1852?", loop=False)
    assert not ans.refused, ans.refusal_reason


@pytest.mark.parametrize("reads", [True, False])
def test_a_fitted_question_prior_weight_on_a_backend_that_cannot_read_it_is_warned_of(
        make_engine, monkeypatch, caplog, reads):
    """A fit (made on llama.cpp answers) that weighs question_prior, used with a backend that
    cannot read its prompt (transformers, openai): one warning, not a silently neutral feature."""
    import logging

    from self_improving_rag import engine as engine_module

    engine, gen, _ = make_engine([GOOD])
    monkeypatch.setattr(type(gen), "reads_prompt", reads)
    monkeypatch.setattr(engine_module, "weights_for", lambda fit, corpus: {"bias": 0.0, "question_prior": 0.4})
    with caplog.at_level(logging.WARNING, logger="self_improving_rag"):
        engine.warm_up()
    warned = [r.getMessage() for r in caplog.records if "question_prior" in r.getMessage()]
    assert warned == [] if reads else (len(warned) == 1 and "cannot read its prompt" in warned[0])


@pytest.mark.parametrize("reply, supported", [
    # Each restates the question and adds a name no passage holds: the model's own knowledge.
    ("Tobias Lune rowed out with his brother Morwen [2].", False),
    ("Keeper Tobias Lune kept the light with Morwen [1].", False),
    # What it adds is in the passages: supported as before.
    ("Tobias Lune rowed out alone [2].", True),
    ("Keeper Tobias Lune kept the light for forty years [1].", True),
])
def test_a_claim_whose_every_added_word_is_in_no_passage_is_not_supported(tmp_path, make_engine, reply, supported):
    """A claim that restates the question and adds a name no passage holds (the model's own
    knowledge) had a lexical share of 0.83 from the question's words alone, so the lexical cap
    (below 0.5) never applied, the judge's yes carried it, and the answer was accepted. The judge
    cannot vouch for words the passages lack: when none of the words a claim adds to the question
    is in any passage, the claim is held below the support threshold. (Found while checking
    "Robert Walton writes his letters to Margaret", whose "Margaret" a passage did hold.)"""
    cfg = load_config(None, fake_overrides(tmp_path) + ["scoring.judge=llm"])
    engine, _, _ = make_engine([reply], judge=0.95, config=cfg)
    question = "Who did Keeper Tobias Lune row out with when he kept the light?"
    ans = engine.ask(question, loop=False)
    claim = ans.attempts[0].signals.faithfulness.detail["claims"][0]
    assert claim["supported"] is supported, claim
    assert ans.refused is not supported, ans.refusal_reason


def test_the_passage_that_states_the_answer_is_shown_even_when_another_is_cited(make_engine):
    # The model copied its answer from passage 1 and cited passage 2, and the claim check took the
    # cited passage for its support: passage 1, which states the answer, is shown too.
    from dataclasses import replace

    from self_improving_rag.outcome import _source_numbers
    from self_improving_rag.types import Signal

    eng, _, _ = make_engine(["Clara Venn [2]"])
    attempt = eng.ask("Who built the lighthouse of Marrow Point?").attempts[0]
    stating = {p.number for p in attempt.passages if "Clara Venn" in p.text}
    assert stating and 2 not in stating, "the test needs the answer in a passage other than [2]"
    claims = [{"claim": "Clara Venn", "cited": [2], "supported": True, "found_in": 2}]
    faith = Signal("faithfulness", 1.0, "judged", {"claims": claims})
    attempt = replace(attempt, citations=(2,), signals=replace(attempt.signals, faithfulness=faith))
    assert _source_numbers(attempt) == {2} | stating
