"""The first-strategy policy: the class prior, labels, seeding."""

from __future__ import annotations

from dataclasses import replace

import pytest

from self_improving_rag.config import PolicyConfig
from self_improving_rag.feedback import policy as policy_module
from self_improving_rag.feedback.policy import StrategyPolicy
from self_improving_rag.query import query_features
from self_improving_rag.types import Strategy

DEFAULT = Strategy()
OTHER = replace(DEFAULT, chunker="semantic", top_k=8)
QUESTIONS = [f"Who wrote letter number {i}?" for i in range(300)]


class Counts:
    """A memory that answers strategy_counts from fixed tables and records how it was asked."""

    def __init__(self, plain: dict, labelled: dict | None = None) -> None:
        self.plain, self.labelled = plain, labelled if labelled is not None else plain
        self.calls: list[dict] = []

    def strategy_counts(self, qc=None, first_only=True, use_labels=False, verdicts=None, corpus=None):
        self.calls.append({"qc": qc, "first_only": first_only, "use_labels": use_labels})
        return self.labelled if use_labels else self.plain

    def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
        return {}


def share_other(policy: StrategyPolicy) -> float:
    picks = [policy.first(q, query_features(q)) for q in QUESTIONS]
    return sum(p == OTHER for p in picks) / len(picks)


X = replace(DEFAULT, retriever="bm25")
Y = replace(DEFAULT, prompt="strict")


def test_alternatives_prior_keeps_one_lucky_success_from_displacing_a_long_record(monkeypatch) -> None:
    # One lucky success among alternatives that mostly failed.
    counts = {DEFAULT.key: (40, 10), OTHER.key: (1, 0), X.key: (0, 3), Y.key: (1, 4)}
    assert policy_module.PRIOR_STRENGTH == 4
    pooled = share_other(StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, Counts(counts)))
    monkeypatch.setattr(policy_module, "PRIOR_STRENGTH", 0)
    flat = share_other(StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, Counts(counts)))
    # Beta(1 + 1, 1) beats Beta(1 + 41, 1 + 10) about a third of the time; starting it where the
    # alternatives landed (m = 3/11, four pseudo-attempts) makes that rare.
    assert flat > 0.25
    assert pooled < 0.1


def test_alternatives_prior_still_lets_a_proven_strategy_win() -> None:
    counts = {DEFAULT.key: (20, 20), OTHER.key: (18, 2)}
    assert share_other(StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, Counts(counts))) > 0.9


def test_policy_counts_every_attempt_by_its_checks_not_by_labels() -> None:
    """Every attempt of the question's class counts (a strategy that worked as a repair is a
    candidate first choice), by its checks: labels reach the policy through the calibration fit."""
    # The default passes its checks more often, but its answers were labelled wrong more often.
    plain = {DEFAULT.key: (25, 0), OTHER.key: (10, 15)}
    labelled = {DEFAULT.key: (5, 20), OTHER.key: (20, 5)}
    memory = Counts(plain, labelled)
    share = share_other(StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, memory))
    assert all(c == {"qc": "who", "first_only": False, "use_labels": False} for c in memory.calls)
    assert share < 0.1


def test_alternatives_prior_never_favours_an_unproven_alternative_over_an_equal_default() -> None:
    # Alternatives have done well, but the default has done just as well: a newcomer with the
    # same record as the default is not preferred to it.
    counts = {DEFAULT.key: (25, 0), OTHER.key: (25, 0)}
    assert share_other(StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, Counts(counts))) < 0.6


def test_first_strategy_choice_is_seeded() -> None:
    counts = {DEFAULT.key: (10, 10), OTHER.key: (10, 10)}
    a = [StrategyPolicy(PolicyConfig(method="thompson", seed=3), DEFAULT, Counts(counts)).first(q, query_features(q)) for q in QUESTIONS[:40]]
    b = [StrategyPolicy(PolicyConfig(method="thompson", seed=3), DEFAULT, Counts(counts)).first(q, query_features(q)) for q in QUESTIONS[:40]]
    c = [StrategyPolicy(PolicyConfig(method="thompson", seed=4), DEFAULT, Counts(counts)).first(q, query_features(q)) for q in QUESTIONS[:40]]
    assert a == b and a != c


def test_thin_memory_falls_back_to_the_default(monkeypatch) -> None:
    monkeypatch.setattr(policy_module, "MIN_HISTORY", 10)
    policy = StrategyPolicy(PolicyConfig(method="thompson"), DEFAULT, Counts({OTHER.key: (5, 0)}))
    assert share_other(policy) == 0.0


@pytest.mark.parametrize(("question", "cls"), [
    ("Who wrote the letter?", "who"),
    ("Whose boot was stolen?", "who"),
    ("To whom was the telegram sent?", "who"),
    ("What did Holmes find on the moor?", "what"),
    ("Which ship carried the treasure?", "what"),
    ("In what country is Normandy located?", "what"),
    ("Where did the cab stop?", "where"),
    ("When was the will signed?", "when"),
    ("Why did the dog not bark?", "why"),
    ("How many pips were in the envelope?", "how"),
    ("Did Holmes know who killed Drebber?", "yes-no"),
    ("Is that what Watson saw?", "yes-no"),
    ("Was the stone found where the goose fell?", "yes-no"),
    ("Didn't Holmes know who killed Drebber?", "yes-no"),
    ("Isn’t that what Watson saw?", "yes-no"),
    ("Won't the dog bark when the stranger comes?", "yes-no"),
    ("Cannot the lamp be seen from the moor?", "yes-no"),
    ("Must Watson pay the cabman?", "yes-no"),
    ("Island of what name did the convict reach?", "what"),
    ("Mayor of which town signed the will?", "what"),
    ("However late it was, the lamp burned. Name the lamp.", "other"),
    ("Whatever happened to the Agra treasure?", "other"),
    ("Name the ship that carried the treasure.", "other"),
    ("What's the name of the ship?", "what"),
    ("Who’s the man in the cab?", "who"),
    ("Where'd the convict hide?", "where"),
])
def test_query_classes(question: str, cls: str) -> None:
    assert query_features(question).query_class == cls


def test_ucb_tries_an_untried_strategy_then_prefers_the_better_record() -> None:
    # Arms with no record get the exploration bonus; among tried arms the better mean wins
    # once the counts are large enough for the bonus to shrink.
    policy = StrategyPolicy(PolicyConfig(method="ucb"), DEFAULT, Counts({}))
    rng = policy._rng("q", "first")
    untried = policy._score(rng, 0, 0, 100)
    assert untried > policy._score(rng, 60, 40, 100)
    ucb = StrategyPolicy(PolicyConfig(method="ucb"), DEFAULT, Counts({DEFAULT.key: (20, 80), OTHER.key: (80, 20)}))
    picks = {ucb.first(q, query_features(q)) for q in QUESTIONS[:20]}
    assert picks == {OTHER}  # deterministic: UCB does not sample


def test_raise_top_k_never_shrinks_a_large_context_budget() -> None:
    from self_improving_rag.feedback.repairs import apply_repair

    big = replace(DEFAULT, context_budget=4000)
    assert apply_repair("raise_top_k", big, ("section",)) == replace(big, top_k=10)
    assert apply_repair("raise_top_k", DEFAULT, ("section",)).context_budget == int(DEFAULT.context_budget * 1.5)


def test_greedy_keeps_the_default_against_many_thin_alternatives() -> None:
    # Ten alternatives tried twice each, one success apiece, against a default at 6 of 11:
    # Thompson draws make the best of ten thin posteriors beat the default often; the
    # posterior means never do, so greedy explores only its `explore` share of questions.
    alts = [replace(DEFAULT, top_k=k) for k in range(6, 16)]
    counts = {DEFAULT.key: (6, 5), **{a.key: (1, 1) for a in alts}}
    def share_default(cfg):
        policy = StrategyPolicy(cfg, DEFAULT, Counts(counts))
        return sum(policy.first(q, query_features(q)) == DEFAULT for q in QUESTIONS) / len(QUESTIONS)
    thompson = share_default(PolicyConfig(method="thompson"))
    greedy = share_default(PolicyConfig(method="greedy", explore=0.1))
    assert thompson < 0.8
    assert greedy > 0.88
    assert share_default(PolicyConfig(method="greedy", explore=0.0)) == 1.0


def test_greedy_follows_a_proven_record() -> None:
    counts = {DEFAULT.key: (10, 10), OTHER.key: (15, 2)}
    policy = StrategyPolicy(PolicyConfig(method="greedy", explore=0.0), DEFAULT, Counts(counts))
    assert {policy.first(q, query_features(q)) for q in QUESTIONS[:50]} == {OTHER}


def test_greedy_repair_order_follows_the_better_record() -> None:
    class RepairCounts(Counts):
        def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
            return {"switch_chunker": (1, 9), "raise_top_k": (9, 1)}

    policy = StrategyPolicy(PolicyConfig(method="greedy", explore=0.0), DEFAULT, RepairCounts({}))
    order = policy.repair_order("Who?", "WEAK_RETRIEVAL", query_features("Who?"))
    assert order.index("raise_top_k") < order.index("switch_chunker")


class TwoCorpora:
    """A memory serving two corpora: each count answers for the corpus asked, or for both."""

    def __init__(self, by_corpus: dict[str | None, dict[str, dict]]) -> None:
        self.by_corpus = by_corpus

    def _table(self, kind: str, corpus) -> dict:
        if corpus is not None:
            return self.by_corpus.get(corpus, {}).get(kind, {})
        pooled: dict = {}
        for tables in self.by_corpus.values():
            for key, (s, f) in tables.get(kind, {}).items():
                a, b = pooled.get(key, (0, 0))
                pooled[key] = (a + s, b + f)
        return pooled

    def strategy_counts(self, qc=None, first_only=True, use_labels=False, verdicts=None, corpus=None):
        return self._table("first", corpus)

    def repair_counts(self, failure, qc=None, use_labels=False, verdicts=None, corpus=None):
        return self._table(failure, corpus)

    def repairs_by_failure(self, use_labels=False, verdicts=None, corpus=None):
        table = self._table("MISSED_ANSWER", corpus)
        return {"MISSED_ANSWER": (sum(s for s, _ in table.values()), sum(f for _, f in table.values()))} if table else {}


def test_a_corpus_learns_from_its_own_record_once_it_has_one_and_borrows_before():
    """Another corpus's record counts as at most STOP_MIN_EVIDENCE (20) attempts per strategy: it
    guides a corpus with little record of its own, and gives way to a long one."""
    assert (policy_module.MIN_HISTORY, policy_module.STOP_MIN_EVIDENCE) == (3, 20)
    cfg = PolicyConfig(method="greedy", explore=0.0)
    memory = TwoCorpora({"A": {"first": {OTHER.key: (280, 20), DEFAULT.key: (100, 200)}},
                         "B": {"first": {DEFAULT.key: (3, 0), OTHER.key: (1, 2)}}})
    q = "Who wrote the letter?"
    # Three of B's own attempts do not outweigh A's 600.
    assert StrategyPolicy(cfg, DEFAULT, memory, corpus="B").first(q, query_features(q)) == OTHER
    memory.by_corpus["B"]["first"] = {DEFAULT.key: (60, 0), OTHER.key: (5, 40)}
    assert StrategyPolicy(cfg, DEFAULT, memory, corpus="B").first(q, query_features(q)) == DEFAULT
    # Without a corpus (a library caller), every outcome counts alike.
    assert StrategyPolicy(cfg, DEFAULT, memory).first(q, query_features(q)) == OTHER


def test_another_corpus_s_failed_repairs_never_stop_this_one_from_retrying(monkeypatch):
    """Repairs after MISSED_ANSWER never worked on corpus A (0 of 24); corpus B has no record.
    Stopping B's retries on A's evidence would refuse B's answerable questions unasked."""
    monkeypatch.setattr(policy_module, "STOP_EXPLORE", 0.0)
    cfg = PolicyConfig(stop_below=0.1)
    memory = TwoCorpora({"A": {"MISSED_ANSWER": {"more_context": (0, 12), "base_prompt": (0, 12)}}})
    q = "What did the keeper write?"
    assert StrategyPolicy(cfg, DEFAULT, memory, corpus="B").futile("MISSED_ANSWER", q, query_features(q)) is None
    assert StrategyPolicy(cfg, DEFAULT, memory, corpus="A").futile("MISSED_ANSWER", q, query_features(q)) is not None


def test_an_untried_repair_does_not_outrank_one_that_works():
    """The catalogue's order only breaks ties: more_context (first for MISSED_ANSWER, never tried)
    must not come before base_prompt, which worked 6 times in 8."""
    cfg = PolicyConfig(method="greedy", explore=0.0)
    memory = TwoCorpora({None: {"MISSED_ANSWER": {"base_prompt": (6, 2), "switch_chunker": (50, 0)}}})
    q = "What did the keeper write?"
    order = StrategyPolicy(cfg, DEFAULT, memory).repair_order(q, "MISSED_ANSWER", query_features(q))
    assert order[:2] == ["switch_chunker", "base_prompt"], order


SECTION = DEFAULT  # the default strategy reads section chunks
SEMANTIC = replace(DEFAULT, chunker="semantic")
FIXED = replace(DEFAULT, chunker="fixed")


def test_switch_chunker_moves_to_the_chunker_not_yet_tried():
    """Section was tried first, a repair moved to semantic, and semantic failed again. Among the
    failure's own repairs a second switch waits (raise_top_k comes first); once only the general
    repairs are left, the switch goes on to fixed, which was never tried, instead of being skipped
    for landing on section."""
    q = "Who wrote the letter?"
    policy = StrategyPolicy(PolicyConfig(), DEFAULT, None)
    tried = {SECTION.key, SEMANTIC.key}
    name, nxt = policy.repair(q, "WEAK_RETRIEVAL", SEMANTIC, tried, query_features(q))
    assert (name, nxt.chunker) == ("raise_top_k", "semantic")
    # The general repairs, tried when the failure's own are spent (none for NONE).
    assert policy.repair(q, "NONE", SEMANTIC, tried, query_features(q)) == ("switch_chunker", FIXED)
    # Every chunker tried: the switch is skipped for the next repair.
    nxt = policy.repair(q, "NONE", SEMANTIC, tried | {FIXED.key}, query_features(q))
    assert nxt is not None and nxt[0] != "switch_chunker"


def test_two_failures_spend_one_retry_on_a_chunker_and_one_on_the_failures_next_repair():
    """With the default three attempts, section fails and the switch moves to semantic; when
    semantic fails too, the next retry is the failure's next repair, not a second chunker: the
    retries are not all spent on chunkers (WEAK_RETRIEVAL's raise_top_k, REDUNDANT_CONTEXT's
    rerank or fewer_passages)."""
    q = "Who wrote the letter?"
    f = query_features(q)
    policy = StrategyPolicy(PolicyConfig(), DEFAULT, None)
    assert policy.repair(q, "WEAK_RETRIEVAL", SECTION, {SECTION.key}, f) == ("switch_chunker", SEMANTIC)
    for failure in ("WEAK_RETRIEVAL", "REDUNDANT_CONTEXT", "LOW_CONFIDENCE", "MISSED_ANSWER"):
        name, nxt = policy.repair(q, failure, SEMANTIC, {SECTION.key, SEMANTIC.key}, f)
        assert name != "switch_chunker" and nxt.chunker == "semantic", failure


def test_switch_chunker_keeps_the_fixed_order_whatever_memory_holds():
    """Section, semantic, fixed, each skipped once an attempt has read it; memory's record does
    not reorder them (a chunker other than the default is read mostly by repairs, on harder
    questions, so its record would rank it below the default whatever its worth); apply_repair
    stays the fixed order."""
    from self_improving_rag.feedback.repairs import apply_repair

    q = "Who wrote the letter?"
    f = query_features(q)
    favours_fixed = Counts({FIXED.key: (30, 0), SEMANTIC.key: (0, 30), SECTION.key: (10, 10)})
    for policy in (StrategyPolicy(PolicyConfig(), DEFAULT, None),
                   StrategyPolicy(PolicyConfig(method="fixed"), DEFAULT, favours_fixed),
                   StrategyPolicy(PolicyConfig(method="greedy", explore=0.0), DEFAULT, favours_fixed)):
        assert policy.repair(q, "WEAK_RETRIEVAL", SECTION, {SECTION.key}, f) == ("switch_chunker", SEMANTIC)
        assert policy.repair(q, "NONE", SECTION, {SECTION.key, SEMANTIC.key}, f) == ("switch_chunker", FIXED)
        assert policy.repair(q, "WEAK_RETRIEVAL", FIXED, {FIXED.key}, f) == ("switch_chunker", SECTION)
    # Only the chunkers the index holds.
    two = StrategyPolicy(PolicyConfig(), DEFAULT, None, available_chunkers=("section", "fixed"))
    assert two.repair(q, "WEAK_RETRIEVAL", SECTION, {SECTION.key}, f) == ("switch_chunker", FIXED)
    assert apply_repair("switch_chunker", SEMANTIC, ("fixed", "section", "semantic")) == SECTION
    assert apply_repair("switch_chunker", SECTION, ("fixed", "section", "semantic")) == SEMANTIC


def test_switch_chunker_prefers_a_chunker_no_attempt_has_read():
    """Section failed, the switch moved to semantic, semantic failed, raise_top_k kept semantic at
    top_k 10 and failed too: the general repairs' switch goes to fixed, which no attempt has read,
    not back to section at top_k 10 (a new strategy key, but a chunker that already failed for the
    question); section with the new settings stays a later candidate."""
    q = "Who wrote the letter?"
    f = query_features(q)
    sem10 = replace(SEMANTIC, top_k=10, context_budget=660)
    tried = {SECTION.key, SEMANTIC.key, sem10.key}
    policy = StrategyPolicy(PolicyConfig(), DEFAULT, None)
    fixed10 = replace(sem10, chunker="fixed")
    assert policy.repair(q, "NONE", sem10, tried, f) == ("switch_chunker", fixed10)
    assert policy.repair(q, "NONE", sem10, tried | {fixed10.key}, f) == ("switch_chunker",
                                                                        replace(sem10, chunker="section"))
