"""Attribution of injected failures with the fakes (>= 40 cases, >= 90% right)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from self_improving_rag.config import ThresholdsConfig
from self_improving_rag.feedback.attribution import attribute
from self_improving_rag.types import Signal, Signals

CASES = [
    # (question, gold passage keyword, correct answer, made-up claim)
    ("Who built the lighthouse of Marrow Point?", "Clara Venn", "Clara Venn built the lighthouse in 1852 [1].",
     "She also painted the royal portrait of Napoleon [1]."),
    ("Who saved the sailors of the Greyling?", "Tobias Lune", "Tobias Lune rowed out and saved eleven sailors [1].",
     "He later became the mayor of Lisbon [1]."),
    ("What did the council give Tobias Lune?", "silver medal", "The council gave him a silver medal [1].",
     "The medal was made of solid platinum from Peru [1]."),
    ("When does the fish market open?", "fish market", "The fish market opens at dawn every Thursday [1].",
     "It is guarded by twelve trained wolves [1]."),
    ("Who planted the Grandmother tree?", "Ansel Brook", "Ansel Brook planted the Grandmother tree in 1790 [1].",
     "He won a chess championship in Vienna [1]."),
    ("When does the orchard harvest start?", "harvest", "The harvest starts in late September [1].",
     "Astronauts from the moon help with the picking [1]."),
    ("Where is the cider pressed?", "cider", "The cider is pressed in the old barn [1].",
     "The barn was designed by a famous Egyptian architect [1]."),
    ("Where was the market bell cast?", "Bristol", "The market bell was cast in Bristol [1].",
     "The bell rings a symphony by Mozart every hour [1]."),
    ("What did Dr. Pim buy each week?", "herring", "Dr. Pim buys two pounds of smoked herring for his cat [1].",
     "His cat speaks fluent Japanese and French [1]."),
    ("What fuel did the lighthouse lamp burn?", "whale oil", "The lamp burned whale oil until 1901 [1].",
     "The lamp was powered by a nuclear reactor [1]."),
]


@pytest.fixture
def engine(make_engine):
    eng, gen, _ = make_engine(["placeholder"])
    eng.warm_up()
    return eng


def _drop_gold(result, keyword):
    kept = tuple(p for p in result.passages if keyword.lower() not in p.text.lower())
    hits = tuple(h for h in result.hits if keyword.lower() not in h.chunk.text.lower())
    # Without the gold passage the context is what remains; irrelevant filler stays irrelevant.
    return replace(result, passages=tuple(replace(p, number=i + 1) for i, p in enumerate(kept)), hits=hits)


def _score(engine, question, result, answer):
    from self_improving_rag.generation.prompts import is_refusal, parse_citations

    refused = is_refusal(answer)
    return engine._scorer.score(question, result, None, answer, refused, parse_citations(answer))


def test_injected_failures_are_attributed(engine):
    strategy = engine.policy.default
    right = total = 0
    misses = []
    for question, keyword, answer, made_up in CASES:
        for top_k in (2, 4):
            res = engine.searcher.search(question, replace(strategy, top_k=top_k))
            assert any(keyword.lower() in p.text.lower() for p in res.passages), (question, top_k)
            # 1. a correct answer with its evidence: NONE (the control: a scorer that rejected every
            #    claim would otherwise pass cases 2 and 3)
            sig = _score(engine, question, res, answer)
            got = attribute(sig, engine.config.thresholds)
            assert got.failure == "NONE", (question, top_k, got.reason)
            assert all(c["supported"] for c in sig.faithfulness.detail["claims"]), (question, top_k)
            # 2. gold passage removed: WEAK_RETRIEVAL
            sig = _score(engine, question, _drop_gold(res, keyword), answer)
            got = attribute(sig, engine.config.thresholds)
            total += 1
            right += got.failure == "WEAK_RETRIEVAL"
            if got.failure != "WEAK_RETRIEVAL":
                misses.append((question, "drop", got.failure, got.reason))
            # 3. a made-up claim added: HALLUCINATION_RISK naming that claim
            sig = _score(engine, question, res, answer + " " + made_up)
            got = attribute(sig, engine.config.thresholds)
            total += 1
            claim_named = any(made_up.split("[")[0].strip(" .")[:20] in u for u in sig.faithfulness.detail.get("unsupported", []))
            first_supported = sig.faithfulness.detail["claims"][0]["supported"]  # the true part still holds
            ok = got.failure == "HALLUCINATION_RISK" and claim_named and first_supported
            right += ok
            if not ok:
                misses.append((question, "made-up", got.failure, got.reason))
    assert total >= 40
    assert right / total >= 0.9, misses


def _signals(**values):
    def s(name):
        return Signal(name, values.get(name), "test")
    return Signals(s("coverage"), s("redundancy"), s("grounding"), s("faithfulness"), s("confidence"),
                   values.get("refusal", False))


@pytest.mark.parametrize("values,expected", [
    ({"coverage": 0.9, "grounding": 0.9, "faithfulness": 1.0, "redundancy": 0.0, "confidence": 0.9}, "NONE"),
    ({"coverage": 0.1, "grounding": 0.9, "faithfulness": 1.0, "redundancy": 0.0, "confidence": 0.9}, "WEAK_RETRIEVAL"),
    # Weak grounding is WEAK_RETRIEVAL whatever the claims: supported or not, checked or not, or a refusal.
    ({"coverage": 0.9, "grounding": 0.0, "faithfulness": 1.0, "redundancy": 0.0, "confidence": 0.9}, "WEAK_RETRIEVAL"),
    ({"coverage": 0.9, "grounding": 0.0, "faithfulness": 0.5, "redundancy": 0.0, "confidence": 0.9}, "WEAK_RETRIEVAL"),
    ({"coverage": 0.9, "grounding": 0.0, "redundancy": 0.0, "confidence": 0.9}, "WEAK_RETRIEVAL"),
    ({"coverage": 0.9, "grounding": 0.0, "confidence": 0.2, "refusal": True}, "WEAK_RETRIEVAL"),
    ({"coverage": 0.1, "grounding": 0.0, "faithfulness": 1.0, "redundancy": 0.0, "confidence": 0.9}, "WEAK_RETRIEVAL"),
    ({"coverage": 0.9, "grounding": 0.9, "faithfulness": 0.3, "redundancy": 0.0, "confidence": 0.9}, "HALLUCINATION_RISK"),
    ({"coverage": 0.9, "grounding": 0.9, "faithfulness": 1.0, "redundancy": 0.9, "confidence": 0.9}, "REDUNDANT_CONTEXT"),
    ({"coverage": 0.9, "grounding": 0.9, "faithfulness": 1.0, "redundancy": 0.0, "confidence": 0.2}, "LOW_CONFIDENCE"),
    ({"coverage": 0.9, "grounding": 0.9, "confidence": 0.2, "refusal": True}, "MISSED_ANSWER"),
    ({"coverage": 0.1, "grounding": 0.9, "confidence": 0.2, "refusal": True}, "WEAK_RETRIEVAL"),
])
def test_attribution_rules(values, expected):
    got = attribute(_signals(**values), ThresholdsConfig())
    assert got.failure == expected
    assert got.reason
    assert (got.repairs == ()) == (expected == "NONE")


@pytest.mark.parametrize("echo, quoted", [
    ("Agnes Tull [1].", "'Agnes Tull [1].'"),
    ("see https://example.org/" + "a" * 90, "'see https://example.org/" + "a" * 54 + " …'"),  # 78 characters
])
def test_a_reply_taken_as_no_answer_is_quoted_even_when_its_next_word_is_long(echo, quoted):
    """textwrap.shorten drops whole words: a reply whose second word is a long URL was quoted as
    'see …', which tells the user nothing of what the model said."""
    got = attribute(_signals(coverage=0.9, grounding=0.9, confidence=0.2, refusal=True), ThresholdsConfig(),
                    echo=echo)
    assert got.failure == "MISSED_ANSWER" and got.reason.startswith(f"the model's reply {quoted} names nothing")


def _with_claims(faith: float, lexicals: list[float]):
    sig = _signals(coverage=0.9, grounding=0.9, redundancy=0.0, confidence=0.9)
    claims = [{"claim": f"claim {i}", "lexical": lx, "supported": False} for i, lx in enumerate(lexicals)]
    fs = Signal("faithfulness", faith, "test", {"claims": claims, "unsupported": [c["claim"] for c in claims]})
    return replace(sig, faithfulness=fs)


@pytest.mark.parametrize("faith,lexicals,expected", [
    (0.0, [0.0], "WEAK_RETRIEVAL"),            # the answer's words are nowhere: evidence missing
    (0.0, [0.2, 0.4], "WEAK_RETRIEVAL"),
    (0.0, [0.2, 0.8], "HALLUCINATION_RISK"),   # one claim's words are there but unsupported
    (0.0, [1.0], "HALLUCINATION_RISK"),        # words present, meaning not: the model twisted them
    (0.5, [0.0], "HALLUCINATION_RISK"),        # some claims supported: the model added to its evidence
])
def test_unsupported_answer_with_absent_words_is_weak_retrieval(faith, lexicals, expected):
    got = attribute(_with_claims(faith, lexicals), ThresholdsConfig())
    assert got.failure == expected, got.reason
    if expected == "WEAK_RETRIEVAL":
        assert "not retrieved" in got.reason and "claim 0" in got.reason



def test_weak_grounding_names_the_best_relevance_and_the_setting():
    sig = _signals(coverage=0.9, faithfulness=1.0, redundancy=0.0, confidence=0.9)
    grd = Signal("grounding", 0.0, "0/5 passages relevant (max relevance 0.40)", {"relevance": [0.4, 0.1]})
    got = attribute(replace(sig, grounding=grd), ThresholdsConfig())
    assert got.failure == "WEAK_RETRIEVAL"
    assert "best relevance 0.40" in got.reason and "retrieval.relevance_midpoint" in got.reason


def _with_dates(value, unstated=(), evidence=()):
    sig = _signals(coverage=0.9, grounding=0.9, faithfulness=1.0, redundancy=0.0)
    detail = {"features": {"dates_unstated": value}}
    if value is not None:
        detail["dates_unstated"] = {"dates": list(unstated), "unstated": list(unstated), "evidence": list(evidence)}
    return replace(sig, confidence=Signal("confidence", 0.9, "test", detail))


@pytest.mark.parametrize("value,threshold,expected", [
    (1.0, 0.0, "WEAK_RETRIEVAL"),   # the evidence tells of another period
    (0.5, 0.0, "WEAK_RETRIEVAL"),   # one of two dates unstated: any counts by default
    (0.5, 0.5, "NONE"),             # the threshold lets one of two go
    (1.0, 1.0, "NONE"),             # 1 turns the rule off
    (0.0, 0.0, "NONE"),             # every date stated
    (None, 0.0, "NONE"),            # a question without a date, or a store from before the feature
])
def test_an_answer_whose_evidence_leaves_the_questions_dates_unstated_is_weak_retrieval(value, threshold, expected):
    sig = _with_dates(value, ["10th century"] if value else [], [2] if value else [])
    got = attribute(sig, ThresholdsConfig(dates_unstated=threshold))
    assert got.failure == expected, got.reason
    if expected == "WEAK_RETRIEVAL":
        assert "'10th century'" in got.reason and "[2]" in got.reason and "not retrieved" in got.reason


def test_the_dates_rule_comes_after_the_evidence_rules_and_before_hallucination():
    base = _with_dates(1.0, ["1185"], [1])
    # Weak coverage keeps its own reason.
    weak = attribute(replace(base, coverage=Signal("coverage", 0.1, "test", {"missing_words": ["Normans"]})),
                     ThresholdsConfig())
    assert weak.failure == "WEAK_RETRIEVAL" and "coverage 0.10" in weak.reason
    # An unsupported claim with the question's date unstated: the evidence is the first fault.
    unsupported = Signal("faithfulness", 0.5, "test", {"claims": [{"claim": "c", "lexical": 0.9, "supported": False}],
                                                       "unsupported": ["c"]})
    got = attribute(replace(base, faithfulness=unsupported), ThresholdsConfig())
    assert got.failure == "WEAK_RETRIEVAL" and "'1185'" in got.reason


def test_the_scorer_and_attribution_flag_an_answer_from_another_period(engine):
    """End to end with the fakes: the scorer's dates_unstated reaches attribution."""
    from self_improving_rag.types import Passage, RetrievalResult

    text = "Dyrrachium fell to the Normans in 1185 after a short siege."
    passage = Passage(number=1, text=text, chunk_ids=("c",), doc_id="d", section="s", start=0, end=len(text), score=1.0)
    result = RetrievalResult(query="q", hits=(), passages=(passage,))
    for question, expected in (("What fell to the Normans in the 10th century?", "WEAK_RETRIEVAL"),
                               ("What fell to the Normans in 1185?", "NONE")):
        sig = _score(engine, question, result, "Dyrrachium fell to the Normans [1].")
        got = attribute(sig, engine.config.thresholds.model_copy(update={"grounding": 0.0, "confidence": 0.0}))
        assert got.failure == expected, (question, got.reason)
        if expected == "WEAK_RETRIEVAL":
            assert got.reason.startswith("the cited passages ([1]) do not state the question's date '10th century'; "
                                         "they name '1185'"), got.reason


@pytest.mark.parametrize("info, words", [
    ({"source": "passages holding the answer", "evidence": [2, 3], "evidence_dates": ["1185", "1190"]},
     "the passages holding the answer ([2][3]) do not state the question's date '10th century'; they name '1185', '1190'"),
    ({"source": "passages given to the generator", "evidence": [1], "evidence_dates": []},
     "the passages given to the generator ([1]) do not state the question's date '10th century'; they name no date"),
])
def test_the_dates_reason_says_where_it_looked_and_what_it_found(info, words):
    sig = _with_dates(1.0, ["10th century"], [])
    detail = {**sig.confidence.detail, "dates_unstated": {"unstated": ["10th century"], **info}}
    got = attribute(replace(sig, confidence=Signal("confidence", 0.9, "test", detail)), ThresholdsConfig())
    assert got.failure == "WEAK_RETRIEVAL" and got.reason.startswith(words), got.reason


def test_the_failure_names_are_the_enum_s_and_are_recorded_as_plain_strings():
    """Every diagnosis is a Failure with a catalogue entry; an attribution carries its name as a
    plain str, as memory, JSON and YAML have always held it."""
    from self_improving_rag.decision import CONFIDENCE_FAILURES, VETO_FAILURES, rediagnose
    from self_improving_rag.feedback.attribution import FAILURES
    from self_improving_rag.feedback.repairs import CATALOGUE
    from self_improving_rag.types import Failure

    assert FAILURES == ("NONE", "WEAK_RETRIEVAL", "HALLUCINATION_RISK", "LOW_CONFIDENCE", "REDUNDANT_CONTEXT",
                        "MISSED_ANSWER")
    assert set(CATALOGUE) == set(Failure) and VETO_FAILURES | CONFIDENCE_FAILURES <= set(Failure)
    for values in ({"confidence": 0.9}, {"confidence": 0.2}, {"coverage": 0.1}):
        got = attribute(_signals(**values), ThresholdsConfig())
        assert type(got.failure) is str and got.failure in FAILURES
    assert type(rediagnose("LOW_CONFIDENCE", 0.9, 0.5, 0.0)) is str and rediagnose("LOW_CONFIDENCE", 0.9, 0.5, 0.0) == "NONE"
    assert type(rediagnose("NONE", 0.1, 0.5, 0.0)) is str and rediagnose("NONE", 0.1, 0.5, 0.0) == "LOW_CONFIDENCE"
