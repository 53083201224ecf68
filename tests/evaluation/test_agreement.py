"""The agreement feature: replies sampled from the answer prompt, compared with the answer."""

from __future__ import annotations

import pytest

from self_improving_rag.config import ScoringConfig
from self_improving_rag.errors import GenerationError, GeneratorUnavailableError
from self_improving_rag.evaluation.signals import (AGREEMENT_MAX_TOKENS, AGREEMENT_MIN_TOKENS, SignalScorer,
                                                   replies_agree, sample_agreement)
from self_improving_rag.generation.scripted import ScriptedGenerator
from self_improving_rag.retrieval.embedder import HashEmbedder
from self_improving_rag.types import Chunk, Generation, Hit, Passage, RetrievalResult

Q = "Who built the lighthouse of Marrow Point?"
TEXT = "The lighthouse of Marrow Point was built by Clara Venn."
REFUSE = "I cannot answer this from the documents."


@pytest.mark.parametrize("a, b, same", [
    ("Clara Venn [1]", "Clara Venn, [2]", True),  # citations and punctuation aside
    ("France", "In France; [2]", True),  # one's words run inside the other's
    ("The Book of Life", "book of life", True),  # case and articles aside
    ("Danes, Norwegians, Swedes", "Danes, Norwegians and Icelanders", True),  # token F1 0.57
    ("1016", "1006", False),
    ("Clara Venn", "Tomas Venn", True),  # F1 0.5: half the words
    ("Clara Venn", "Tomas Orr", False),
    ("Clara Venn [1]", "[1]", False),  # a reply of citations alone says nothing
    ("", "", False),
])
def test_replies_agree(a: str, b: str, same: bool) -> None:
    assert replies_agree(a, b) is same and replies_agree(b, a) is same


def test_sample_agreement_is_the_share_that_agree_and_declines_disagree() -> None:
    s = sample_agreement("Clara Venn [1]", ["Clara Venn [1]", "Venn", REFUSE, "Tomas Orr [2]"], refused=False)
    assert s.value == 0.5 and s.detail["agree"] == [True, True, False, False]
    assert s.reason == "2 of 4 sampled replies agree" and s.detail["samples"][2] == REFUSE
    assert sample_agreement(REFUSE, ["Clara Venn"], refused=True).value is None
    assert sample_agreement("Clara Venn", None, refused=False).value is None
    assert sample_agreement("Clara Venn", [], refused=False).value is None


def _retrieval() -> RetrievalResult:
    chunk = Chunk(chunk_id="c0", doc_id="d", strategy="section", text=TEXT, embed_text=TEXT, start=0, end=len(TEXT),
                  section="s", n_tokens=10, position=0)
    passage = Passage(number=1, text=TEXT, chunk_ids=("c0",), doc_id="d", section="s", start=0, end=len(TEXT), score=0.9)
    return RetrievalResult(query=Q, hits=(Hit(chunk=chunk, score=0.9, scores={"relevance": 0.9}, rank=1),),
                           passages=(passage,))


class Recording(ScriptedGenerator):
    """A scripted generator that logs the order of its sampling and judging calls."""

    def __init__(self, samples, **kw) -> None:
        super().__init__(["Clara Venn [1]"], judge=0.9, sampler=lambda m, k, n: samples[:k], **kw)
        self.calls: list[str] = []

    def sample_replies(self, k, max_tokens, temperature=0.7, top=64):
        self.calls.append("sample")
        return super().sample_replies(k, max_tokens, temperature, top)

    def yes_probability(self, messages):
        self.calls.append("judge")
        return super().yes_probability(messages)


def _score(gen, config: ScoringConfig, answer: str = "Clara Venn [1]", refused: bool = False, tokens: int = 3):
    gen.generate([{"role": "user", "content": Q}])
    generation = Generation(text=answer, token_logprobs=(-0.1,) * tokens, prompt_tokens=40, completion_tokens=tokens)
    return SignalScorer(config, HashEmbedder(dim=64).embed, gen).score(Q, _retrieval(), generation, answer,
                                                                        refused=refused, citations=(1,))


def test_the_scorer_samples_first_and_stores_the_feature_with_its_replies() -> None:
    """The draws continue the answer prompt, which the judge's prompts overwrite: they come
    first. The feature, the replies and what they cost are stored; the default weight of 0 leaves
    the confidence as it is with sampling off."""
    gen = Recording(["Clara Venn [1]", "Venn", "Tomas Orr", "Clara Venn"])
    sig = _score(gen, ScoringConfig(judge="llm", agreement_samples=4))
    assert gen.calls[0] == "sample" and "judge" in gen.calls and gen.calls.count("sample") == 1
    detail = sig.confidence.detail
    assert detail["features"]["agreement"] == 0.75
    assert detail["agreement"]["samples"] == ["Clara Venn [1]", "Venn", "Tomas Orr", "Clara Venn"]
    assert detail["agreement"]["reason"] == "3 of 4 sampled replies agree" and detail["agreement"]["ms"] >= 0
    assert "sampled replies agree" in sig.confidence.reason
    off = _score(Recording(["Tomas Orr"] * 4), ScoringConfig(judge="llm"))
    assert off.confidence.detail["features"]["agreement"] is None and "agreement" not in off.confidence.detail
    assert "sampled" not in off.confidence.reason
    assert sig.confidence.value == pytest.approx(off.confidence.value)


def test_replies_are_cut_at_the_answer_s_length_within_bounds() -> None:
    for tokens, expected in ((1, AGREEMENT_MIN_TOKENS), (9, 9), (200, AGREEMENT_MAX_TOKENS)):
        gen = Recording(["Clara Venn"] * 3)
        _score(gen, ScoringConfig(judge="none", agreement_samples=3), tokens=tokens)
        assert [(k, n) for _, k, n in gen.sample_history] == [(3, expected)]


def test_nothing_is_sampled_for_a_refusal_with_sampling_off_or_from_a_backend_that_cannot() -> None:
    gen = Recording(["Clara Venn"] * 4)
    sig = _score(gen, ScoringConfig(judge="none", agreement_samples=4), answer=REFUSE, refused=True)
    assert gen.calls == [] and sig.confidence.detail["features"]["agreement"] is None
    gen = Recording(["Clara Venn"] * 4)
    _score(gen, ScoringConfig(judge="none"))
    assert gen.calls == []
    plain = ScriptedGenerator(["Clara Venn [1]"])  # no sampler: sample_replies gives None
    sig = _score(plain, ScoringConfig(judge="none", agreement_samples=4))
    assert sig.confidence.detail["features"]["agreement"] is None


def test_a_failed_draw_leaves_the_feature_missing_and_a_lost_generator_stops_the_attempt() -> None:
    class Failing(Recording):
        def __init__(self, error) -> None:
            super().__init__([])
            self.error = error

        def sample_replies(self, k, max_tokens, temperature=0.7, top=64):
            raise self.error

    sig = _score(Failing(GenerationError("llama.cpp failed while sampling replies (decode: -1)")),
                 ScoringConfig(judge="none", agreement_samples=2))
    assert sig.confidence.detail["features"]["agreement"] is None and sig.confidence.value is not None
    with pytest.raises(GeneratorUnavailableError):
        _score(Failing(GeneratorUnavailableError("the model is gone")), ScoringConfig(judge="none", agreement_samples=2))


def test_the_engine_records_agreement_in_memory_for_calibration(fake_config, built_index, hash_embedder, tmp_path) -> None:
    """End to end with the fakes: an attempt's agreement reaches the memory store, where a label
    makes it a calibration row."""
    from self_improving_rag.engine import Engine
    from self_improving_rag.memory import MemoryStore

    config = fake_config.model_copy(update={"scoring": fake_config.scoring.model_copy(update={"agreement_samples": 3})})
    good = "Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."
    gen = ScriptedGenerator([good], sampler=lambda m, k, n: ["Tobias Lune [1]", "Tobias Lune", "the harbour master"])
    with MemoryStore(tmp_path / "memory" / "agree.db") as store:
        engine = Engine(config, embedder=hash_embedder, generator=gen, memory=store)
        try:
            answer = engine.ask("Who saved the sailors of the Greyling in the storm?")
        finally:
            engine.close()
        first = answer.attempts[0]
        assert first.signals.confidence.detail["features"]["agreement"] == pytest.approx(2 / 3)
        assert gen.sample_history and gen.sample_history[0][1] == 3
        from self_improving_rag.cli import _format_answer

        shown = _format_answer(answer.to_json(), verbose=True)
        assert "    agreement: 2 of 3 sampled replies agree: 'Tobias Lune [1]'; 'Tobias Lune'; 'the harbour master'" \
            in shown.splitlines()
        assert "agreement" not in _format_answer(answer.to_json(), verbose=False)
        assert not answer.refused and answer.outcome_id
        store.add_feedback(answer.outcome_id, correct=True, source="user")
        rows = store.labelled_attempts()
    assert [r["agreement"] for r in rows] == [pytest.approx(2 / 3)]


def test_an_engine_told_to_sample_from_a_backend_that_cannot_says_so(fake_config, built_index, hash_embedder,
                                                                        caplog) -> None:
    from self_improving_rag.engine import Engine

    config = fake_config.model_copy(update={"scoring": fake_config.scoring.model_copy(update={"agreement_samples": 2})})
    for sampler, warned in ((None, True), (lambda m, k, n: ["x"] * k, False)):
        caplog.clear()
        engine = Engine(config, embedder=hash_embedder, generator=ScriptedGenerator(["x"], sampler=sampler), record=False)
        try:
            with caplog.at_level("WARNING", logger="self_improving_rag.engine"):
                engine.warm_up()
        finally:
            engine.close()
        said = [r.getMessage() for r in caplog.records if "agreement_samples" in r.getMessage()]
        assert said == (["scoring.agreement_samples is 2, but this generator (backend scripted) cannot draw that many "
                         "replies from its prompt: the agreement feature stays undefined (the llama_cpp backend, "
                         "made from this config, can)"] if warned else [])
