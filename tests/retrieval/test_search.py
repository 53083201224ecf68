"""Retrieval: fusion, the shared retriever contract, reranking, refinement and the Searcher."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from self_improving_rag.config import load_config
from self_improving_rag.errors import InputError
from self_improving_rag.ingestion.pipeline import ingest
from self_improving_rag.retrieval.bm25 import BM25Retriever
from self_improving_rag.retrieval.dense import FaissDenseRetriever
from self_improving_rag.retrieval.embedder import HashEmbedder
from self_improving_rag.retrieval.hybrid import dedupe_overlapping, weighted_fuse
from self_improving_rag.retrieval.index import build_bm25, build_dense
from self_improving_rag.retrieval.refine import _window, join_spans, refine_passage_spans
from self_improving_rag.retrieval.reranker import EmbeddingReranker, SentenceScores, sigmoid
from self_improving_rag.retrieval.searcher import Searcher
from self_improving_rag.types import Strategy
from tests.conftest import fake_overrides, write_corpus

EMBEDDER = HashEmbedder(dim=64)
COUNT = EMBEDDER.tokenizer.count
LIGHTHOUSE_Q = "Who built the lighthouse of Marrow Point?"

# ---------------------------------------------------------------- fusion


def test_weighted_fusion_hand_computed() -> None:
    rankings = {"dense": [(0, 1.0), (1, 0.5), (2, 0.0)], "bm25": [(2, 10.0), (1, 6.0)]}
    fused = weighted_fuse(rankings, {"dense": 0.7, "bm25": 0.3})
    # dense min-max: 1, .5, 0; bm25 min-max: doc2 1, doc1 0.
    assert fused == [(0, pytest.approx(0.7)), (1, pytest.approx(0.35)), (2, pytest.approx(0.3))]
    heavy_bm25 = weighted_fuse(rankings, {"dense": 0.2, "bm25": 0.8})
    assert heavy_bm25[0][0] == 2


def test_weighted_fusion_credits_a_sole_hit() -> None:
    rankings = {"dense": [(0, 0.9), (1, 0.85), (2, 0.1)], "bm25": [(1, 7.0)]}
    fused = weighted_fuse(rankings, {"dense": 0.5, "bm25": 0.5})
    assert fused[0][0] == 1, fused


def test_dedupe_overlapping_keeps_the_better_of_two_overlapping_spans() -> None:
    spans = [("a", 0, 100), ("a", 10, 90), ("a", 80, 200), ("b", 0, 100), ("a", 150, 400)]
    order = [(0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6), (4, 0.5)]
    # 1 lies inside 0; 2 shares 20 of its 100 chars with 0; 3 is another document;
    # 4 shares 50 chars with 2, half of the shorter span, which is not "more than" half.
    assert dedupe_overlapping(order, spans) == [(0, 0.9), (2, 0.7), (3, 0.6), (4, 0.5)]
    assert dedupe_overlapping(order, spans, max_overlap=0.1) == [(0, 0.9), (3, 0.6), (4, 0.5)]
    assert dedupe_overlapping([], spans) == []


# ---------------------------------------------------------------- the retriever contract


TEXTS = [
    "The lighthouse lamp burned whale oil.",
    "Apple trees grow in the orchard behind the mill.",
    "The schooner struck the rocks in the storm.",
    "Fish market opens at dawn on the quay.",
    "Cider is pressed in the old barn.",
    "The keeper rowed out and saved eleven sailors.",
]


def _dense(ann_threshold: int):
    def make(texts: list[str]):
        retriever = FaissDenseRetriever(build_dense(EMBEDDER.embed(texts), ann_threshold))
        return lambda query, k: retriever.retrieve(EMBEDDER.embed([query])[0], k)
    return make


def _bm25(texts: list[str]):
    retriever = BM25Retriever(build_bm25(texts), len(texts))
    return retriever.retrieve


RETRIEVERS = {"dense": _dense(10_000), "dense-hnsw": _dense(1), "bm25": _bm25}


@pytest.fixture(params=sorted(RETRIEVERS))
def search(request):
    return RETRIEVERS[request.param](TEXTS)


@pytest.mark.parametrize("k", [1, 3, 6, 50])
def test_contract_results(search, k: int) -> None:
    for query in [*TEXTS, "lamp oil in the storm", "keeper of the orchard"]:
        results = search(query, k)
        assert len(results) <= min(k, len(TEXTS))
        assert all(isinstance(i, int) and 0 <= i < len(TEXTS) for i, _ in results)
        assert len({i for i, _ in results}) == len(results)
        scores = [s for _, s in results]
        assert scores == sorted(scores, reverse=True)


def test_contract_exact_words_rank_their_chunk_first(search) -> None:
    for i, text in enumerate(TEXTS):
        assert search(text, 3)[0][0] == i


def test_contract_rejects_a_bad_k(search) -> None:
    with pytest.raises(ValueError, match="top_k"):
        search("lamp", 0)


def test_empty_indexes_return_nothing() -> None:
    assert FaissDenseRetriever(build_dense(np.zeros((0, 64), np.float32), 10)).retrieve(
        EMBEDDER.embed(["lamp"])[0], 5) == []
    assert BM25Retriever(build_bm25(TEXTS), 0).retrieve("lamp", 5) == []
    assert _bm25(TEXTS)("the of and", 5) == []  # only stop words


# ---------------------------------------------------------------- reranker


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False))
def test_sigmoid_is_bounded(x: float) -> None:
    y = sigmoid(x)
    assert 0.0 <= y <= 1.0
    assert sigmoid(-x) == pytest.approx(1.0 - y, abs=1e-12)


def test_sigmoid_values() -> None:
    assert sigmoid(0.0) == 0.5
    assert sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert sigmoid(-1e308) > 0.0  # clamped, no overflow
    reranker = EmbeddingReranker(EMBEDDER.embed, slope=10.0, midpoint=0.35)
    assert reranker.activate(0.35) == 0.5
    for cos in np.linspace(-1, 1, 21):
        assert 0.0 < reranker.activate(float(cos)) < 1.0
    assert reranker.activate(0.9) > reranker.activate(0.5) > reranker.activate(0.1)


def test_embedding_reranker_orders_relevant_above_unrelated() -> None:
    reranker = EmbeddingReranker(EMBEDDER.embed, top_sentences=2)
    q = EMBEDDER.embed(["When did the lighthouse lamp burn whale oil?"])[0]
    texts = ["The cider is pressed in the old barn. Children pick apples.",
             "The lighthouse lamp burned whale oil until 1901. The keeper kept it lit."]
    ranked, scores = reranker.rerank(q, texts)
    assert [i for i, _ in ranked] == [1, 0]
    assert all(0.0 < r < 1.0 for _, r in ranked)
    assert len(scores) == 2 and len(scores[1].spans) == len(scores[1].sims) == 2
    assert texts[1][slice(*scores[1].spans[0])] == "The lighthouse lamp burned whale oil until 1901."
    with pytest.raises(ValueError, match="top_sentences"):
        EmbeddingReranker(EMBEDDER.embed, top_sentences=0)


# ---------------------------------------------------------------- refinement


REFINE_TEXTS = [
    "Alpha beta gamma delta epsilon. Zeta eta theta iota kappa. Lambda mu nu xi omicron.",
    "Pi rho sigma tau upsilon. Phi chi psi omega alpha.",
]


def _scores(sims: list[list[float]]) -> list[SentenceScores]:
    out = []
    for text, s in zip(REFINE_TEXTS, sims):
        spans = tuple((a, b) for a, b in _sentence_spans(text))
        out.append(SentenceScores(spans, tuple(s)))
    return out


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    from self_improving_rag.ingestion.sentences import split_sentences

    return split_sentences(text)


def _kept_tokens(keep: list[list[tuple[int, int]]]) -> int:
    return sum(COUNT(t[s:e]) for t, spans in zip(REFINE_TEXTS, keep) for s, e in spans)


@pytest.mark.parametrize("budget", [6, 12, 18, 24, 100])
@pytest.mark.parametrize("context", [0, 1])
def test_refine_respects_the_budget(budget: int, context: int) -> None:
    sims = [[0.9, 0.2, 0.1], [0.5, 0.3]]
    keep = refine_passage_spans("alpha", REFINE_TEXTS, _scores(sims), budget, COUNT, context)
    assert _kept_tokens(keep) <= budget  # every sentence here is 6 tokens
    assert keep[0], "the first text keeps a sentence"
    assert keep[0][0] == _sentence_spans(REFINE_TEXTS[0])[0]
    for spans in keep:
        assert spans == sorted(spans)
    if budget >= 30:
        assert keep == [_sentence_spans(t) for t in REFINE_TEXTS]


def test_refine_brings_context_sentences() -> None:
    sims = [[0.1, 0.9, 0.1], [0.0, 0.0]]
    keep = refine_passage_spans("zeta", REFINE_TEXTS, _scores(sims), 18, COUNT, 1, every_passage=False)
    assert keep[0] == _sentence_spans(REFINE_TEXTS[0])
    assert keep[1] == []


def test_refine_every_passage_keeps_its_best_sentence_first() -> None:
    sims = [[0.5, 0.9, 0.5], [0.0, 0.2]]
    spans0, spans1 = _sentence_spans(REFINE_TEXTS[0]), _sentence_spans(REFINE_TEXTS[1])
    # 12 tokens = two sentences: the first passage's second-best sentence outscores anything in
    # the second passage, but every passage keeps its best sentence first.
    keep = refine_passage_spans("zeta", REFINE_TEXTS, _scores(sims), 12, COUNT, 0, rank_weight=0.0)
    assert keep == [[spans0[1]], [spans1[1]]]
    old = refine_passage_spans("zeta", REFINE_TEXTS, _scores(sims), 12, COUNT, 0, rank_weight=0.0,
                               every_passage=False)
    assert old[1] == [] and len(old[0]) == 2


def test_refine_rank_weight_prefers_sentences_of_higher_ranked_passages() -> None:
    # Equal cosines everywhere: without a rank weight the order falls to ties; with it the
    # first passage's sentences win the budget after every passage's best sentence.
    sims = [[0.5, 0.5, 0.5], [0.5, 0.5]]
    keep = refine_passage_spans("nothing", REFINE_TEXTS, _scores(sims), 24, COUNT, 0, rank_weight=1.0)
    assert len(keep[0]) == 3 and len(keep[1]) == 1
    low = [[0.5, 0.5, 0.5], [0.9, 0.9]]
    keep = refine_passage_spans("nothing", REFINE_TEXTS, _scores(low), 18, COUNT, 0, rank_weight=0.0)
    assert len(keep[1]) == 2  # without the rank weight the second passage's higher cosines win


def test_refine_budget_smaller_than_any_sentence_keeps_one_sentence() -> None:
    sims = [[0.9, 0.2, 0.1], [0.5, 0.3]]
    keep = refine_passage_spans("alpha", REFINE_TEXTS, _scores(sims), 3, COUNT, 0)
    assert keep == [[_sentence_spans(REFINE_TEXTS[0])[0]], []]


def test_refine_first_text_keeps_its_best_sentence_even_when_outranked() -> None:
    sims = [[0.2, 0.1, 0.1], [0.9, 0.3]]
    keep = refine_passage_spans("question", REFINE_TEXTS, _scores(sims), 6, COUNT, 0)
    assert keep[0] == [_sentence_spans(REFINE_TEXTS[0])[0]]


@pytest.mark.parametrize("budget", [6, 12, 13, 18, 19, 20, 24, 30])
def test_refine_counts_the_gap_marks_in_the_budget(budget: int) -> None:
    # Sentences 0 and 2 are the best: keeping both puts a "…" between them, which the model
    # reads too, so the joined text (what the prompt holds) stays within the budget.
    sims = [[0.9, 0.1, 0.8], [0.7, 0.1]]
    keep = refine_passage_spans("nothing", REFINE_TEXTS, _scores(sims), budget, COUNT, 0, rank_weight=0.0)
    joined = [join_spans(t, k) for t, k in zip(REFINE_TEXTS, keep)]
    assert sum(COUNT(j) for j in joined if j) <= budget, joined
    if budget == 12:  # the two best of the first passage no longer fit with their gap
        assert keep[0] == [_sentence_spans(REFINE_TEXTS[0])[0]]


DIALOGUE = ("The workman gave the sign. \u201cYes, for strangers to travel,\u201d the other answered. "
            "\u201cThat is good. Now go!\u201d A long sentence follows here with many more words in it than "
            "the budget allows.")
QUESTION_REPLY = ("Holmes looked up from the letter. \u201cInto his own hands?\u201d I asked. "
                  "\u201cNo, sir, he was up in the loft at the time.\u201d The lamp went out.")


def _one(text: str, best: int) -> tuple[list[tuple[int, int]], list[SentenceScores]]:
    spans = _sentence_spans(text)
    return spans, [SentenceScores(tuple(spans), tuple(0.9 if j == best else 0.1 for j in range(len(spans))))]


def _sizes(text: str, spans: list[tuple[int, int]]) -> list[int]:
    return [COUNT(text[a:b]) for a, b in spans]


def _cost(text: str, spans: list[tuple[int, int]]) -> int:
    """The tokens of a contiguous run of sentences: a budget that fits it and nothing more."""
    return sum(COUNT(text[a:b]) for a, b in spans)


def test_refine_after_tokens_bring_the_short_sentences_that_close_a_line() -> None:
    spans = _sentence_spans(DIALOGUE)
    short = _cost(DIALOGUE, spans[2:4])
    assert COUNT(DIALOGUE[spans[4][0]:spans[4][1]]) > short

    def window(after: int, context: int = 1) -> list[int]:
        return _window(DIALOGUE, spans, 1, context, after, False, _sizes(DIALOGUE, spans))

    assert window(0) == [0, 1, 2]  # by sentences: one neighbour each side, "Now go!" is cut
    assert window(short) == [0, 1, 2, 3]  # by tokens after it: the short ones join, the long one not
    assert window(1) == [0, 1, 2]  # never fewer than context_sentences after it
    assert window(short, context=0) == [1, 2, 3]
    assert window(10_000) == [0, 1, 2, 3, 4]
    # Through the public function: a budget that fits the four sentences keeps them whole.
    sc = _one(DIALOGUE, 1)[1]
    keep = refine_passage_spans("yes", [DIALOGUE], sc, _cost(DIALOGUE, spans[0:4]), COUNT, 1, every_passage=False, context_after_tokens=short)
    assert keep == [spans[0:4]]


@pytest.mark.parametrize("best", [0, 1])
def test_refine_replies_keep_the_answer_to_a_question(best: int) -> None:
    spans = _sentence_spans(QUESTION_REPLY)
    # best 0: the window ends on the question; best 1: on the attribution "I asked." after it.
    sizes = _sizes(QUESTION_REPLY, spans)
    plain = _window(QUESTION_REPLY, spans, best, 1, 0, False, sizes)
    assert plain == list(range(max(0, best - 1), best + 2))
    with_reply = _window(QUESTION_REPLY, spans, best, 1, 0, True, sizes)
    assert with_reply == list(range(plain[0], 4))  # through the attribution to the reply
    assert "loft" in QUESTION_REPLY[spans[3][0]:spans[3][1]]
    # A window that does not end on a question takes no extra sentence.
    assert _window(QUESTION_REPLY, spans, 3, 1, 0, True, sizes) == [2, 3, 4]
    sc = _one(QUESTION_REPLY, best)[1]
    budget = _cost(QUESTION_REPLY, [spans[j] for j in with_reply])
    keep = refine_passage_spans("hands", [QUESTION_REPLY], sc, budget, COUNT, 1, every_passage=False, replies=True)
    assert keep == [[spans[j] for j in with_reply]]


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(1, 60), after=st.integers(0, 30), context=st.integers(0, 2), replies=st.booleans(),
       best=st.integers(0, 4))
def test_refine_by_tokens_respects_the_budget(budget: int, after: int, context: int, replies: bool,
                                                      best: int) -> None:
    texts = [DIALOGUE, QUESTION_REPLY]
    scores = [_one(DIALOGUE, best)[1][0], _one(QUESTION_REPLY, best)[1][0]]
    keep = refine_passage_spans("hands", texts, scores, budget, COUNT, context,
                                context_after_tokens=after, replies=replies)
    gaps = sum(max(0, sum(1 for j, sp in enumerate(k) if j == 0 or sp != _next(t, k[j - 1])) - 1)
               for t, k in zip(texts, keep))
    kept = sum(COUNT(t[a:b]) for t, k in zip(texts, keep) for a, b in k) + gaps * COUNT(" … ")
    first = min(COUNT(DIALOGUE[a:b]) for a, b in keep[0]) if keep[0] else 0
    assert keep[0], "the first text keeps a sentence"
    assert kept <= budget or (len(keep[0]) == 1 and not keep[1] and kept == first)


def _next(text: str, span: tuple[int, int]) -> tuple[int, int] | None:
    spans = _sentence_spans(text)
    i = spans.index(span)
    return spans[i + 1] if i + 1 < len(spans) else None


def test_join_spans_marks_gaps_with_an_ellipsis() -> None:
    text = "One two. Three four. Five six. Seven eight."
    spans = _sentence_spans(text)
    assert join_spans(text, [spans[0], spans[2]]) == "One two. … Five six."
    assert join_spans(text, spans[:2]) == "One two. Three four."
    assert join_spans(text, [spans[0], spans[3]]) == "One two. … Seven eight."
    assert join_spans(text, []) == ""
    assert join_spans(text, spans) == text


# ---------------------------------------------------------------- the Searcher


@pytest.fixture(scope="module")
def index_tmp(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("search")
    config = load_config(None, fake_overrides(tmp))
    ingest([write_corpus(tmp / "docs")], config, EMBEDDER, progress=False)
    return tmp


@pytest.fixture(scope="module")
def searcher(index_tmp: Path):
    s = Searcher(load_config(None, fake_overrides(index_tmp)), EMBEDDER)
    yield s
    s.close()


def _searcher(index_tmp: Path, *extra: str) -> Searcher:
    return Searcher(load_config(None, [*fake_overrides(index_tmp), *extra]), EMBEDDER)


@pytest.mark.parametrize("retriever", ["dense", "bm25", "hybrid"])
@pytest.mark.parametrize("chunker", ["fixed", "section", "semantic"])
def test_searcher_finds_the_lighthouse_builder(searcher: Searcher, chunker: str, retriever: str) -> None:
    result = searcher.search(LIGHTHOUSE_Q, Strategy(chunker=chunker, retriever=retriever, top_k=3))
    assert result.query == LIGHTHOUSE_Q
    assert 1 <= len(result.hits) <= 3
    assert "Clara Venn" in result.hits[0].chunk.text
    assert all(h.chunk.strategy == chunker for h in result.hits)
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert [p.number for p in result.passages] == list(range(1, len(result.passages) + 1))
    assert "Clara Venn" in result.passages[0].text
    for h in result.hits:
        assert 0.0 < h.scores["relevance"] < 1.0
        assert h.score == h.scores["reranked"]  # reranked: fused score blended with relevance
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    for p in result.passages:
        assert 0.0 < p.score < 1.0
        assert p.chunk_ids and p.doc_id in {"harbour", "orchard"}


@pytest.mark.parametrize("retriever", ["dense", "bm25", "hybrid"])
def test_searcher_without_rerank_keeps_fusion_order(searcher: Searcher, retriever: str) -> None:
    result = searcher.search(LIGHTHOUSE_Q, Strategy(chunker="section", retriever=retriever, rerank=False))
    assert "Clara Venn" in result.hits[0].chunk.text
    fused = [h.scores["fused"] for h in result.hits]
    assert fused == sorted(fused, reverse=True)
    assert all(0.0 < h.scores["relevance"] < 1.0 for h in result.hits)


def test_searcher_with_weighted_fusion(index_tmp: Path) -> None:
    s = _searcher(index_tmp, "retrieval.dense_weight=0.5")
    try:
        result = s.search(LIGHTHOUSE_Q, Strategy(chunker="fixed", retriever="hybrid"))
        assert "Clara Venn" in result.hits[0].chunk.text
    finally:
        s.close()





def test_bm25_stems_query_and_documents() -> None:
    retrieve = _bm25(["The keepers were rowing to the wrecks.", "Apples ripen in autumn."])
    assert [i for i, _ in retrieve("keeper rowed wreck", 2)] == [0]
    assert [i for i, _ in retrieve("apple ripening", 2)] == [1]


def test_searcher_rejects_an_empty_question(searcher: Searcher) -> None:
    with pytest.raises(InputError):
        searcher.search("   ", Strategy())


@pytest.mark.parametrize("chunker", ["fixed", "section", "semantic"])
def test_small_budget_refines_passages(searcher: Searcher, chunker: str) -> None:
    budget = 30  # more than any single sentence of the corpus, less than its chunks
    result = searcher.search(LIGHTHOUSE_Q, Strategy(chunker=chunker, top_k=3, context_budget=budget))
    raw = sum(COUNT(h.chunk.text) for h in result.hits)
    refined = sum(COUNT(p.text) for p in result.passages)
    ellipses = sum(p.text.count("…") for p in result.passages)
    assert refined < raw
    assert refined - ellipses <= budget
    assert "Clara Venn" in result.passages[0].text


@pytest.mark.parametrize("after,replies", [(12, False), (0, True)])
def test_searcher_refines_with_its_module_settings(index_tmp: Path, monkeypatch, after: int, replies: bool) -> None:
    from self_improving_rag.retrieval import searcher as searcher_module

    seen = []
    real = searcher_module.refine_passage_spans

    def spy(*args):
        seen.append(args[-2:])
        return real(*args)

    monkeypatch.setattr(searcher_module, "refine_passage_spans", spy)
    monkeypatch.setattr(searcher_module, "CONTEXT_AFTER_TOKENS", after)
    monkeypatch.setattr(searcher_module, "KEEP_REPLIES", replies)
    s = _searcher(index_tmp)
    try:
        s.search(LIGHTHOUSE_Q, Strategy(chunker="section", top_k=3, context_budget=30))
    finally:
        s.close()
    assert seen == [(after, replies)]


def test_without_refinement_passages_are_the_chunks(index_tmp: Path) -> None:
    s = _searcher(index_tmp, "retrieval.refine=false")
    try:
        result = s.search(LIGHTHOUSE_Q, Strategy(chunker="section", top_k=3, context_budget=10))
        assert [p.text for p in result.passages] == [h.chunk.text for h in result.hits]
        assert [(p.start, p.end) for p in result.passages] == [(h.chunk.start, h.chunk.end) for h in result.hits]
    finally:
        s.close()


def test_neighbours_add_adjacent_text_of_the_same_section(index_tmp: Path) -> None:
    s = _searcher(index_tmp, "retrieval.refine=false")
    try:
        chunks = s.chunker("semantic").chunks
        market = sorted((c for c in chunks if c.section.endswith("Chapter 3: The Market")), key=lambda c: c.position)
        assert len(market) >= 3, "the semantic chunker should split the market chapter"
        middle = market[1]
        q = "Mrs. Alder sells smoked herring and Dr. Pim buys two pounds for his cat"
        alone = s.search(q, Strategy(chunker="semantic", top_k=1, neighbors=0))
        assert alone.hits[0].chunk.chunk_id == middle.chunk_id
        assert alone.passages[0].text == middle.text
        wide = s.search(q, Strategy(chunker="semantic", top_k=1, neighbors=1))
        p = wide.passages[0]
        assert p.chunk_ids == (market[0].chunk_id, middle.chunk_id, market[2].chunk_id)
        assert (p.start, p.end) == (market[0].start, market[2].end)
        for c in market[:3]:
            assert c.text in p.text
        # The first chunk of a section has no neighbour before it: the storm chapter stays out.
        first = s.search("Every Thursday the fish market opens at dawn on the north quay",
                         Strategy(chunker="semantic", top_k=1, neighbors=1))
        assert first.hits[0].chunk.chunk_id == market[0].chunk_id
        assert first.passages[0].chunk_ids == (market[0].chunk_id, middle.chunk_id)
        assert "storm" not in first.passages[0].text
    finally:
        s.close()


def test_neighbours_never_repeat_a_chunk_across_passages(index_tmp: Path) -> None:
    s = _searcher(index_tmp, "retrieval.refine=false")
    try:
        queries = ["Mrs. Alder sells smoked herring and Dr. Pim buys two pounds for his cat",
                   "Every Thursday the fish market opens at dawn on the north quay", LIGHTHOUSE_Q,
                   "market herring quay fish cat"]
        for chunker in ("semantic", "fixed", "section"):
            for q in queries:
                res = s.search(q, Strategy(chunker=chunker, top_k=4, neighbors=2))
                ids = [cid for p in res.passages for cid in p.chunk_ids]
                assert len(ids) == len(set(ids)), (chunker, q, [p.chunk_ids for p in res.passages])
                # Every hit still leads its own passage.
                assert [p.chunk_ids.count(h.chunk.chunk_id) for p, h in zip(res.passages, res.hits)] == [1] * len(res.hits)
    finally:
        s.close()


def test_searcher_loads_each_chunker_once(searcher: Searcher) -> None:
    assert searcher.chunker("section") is searcher.chunker("section")
    assert set(searcher.available_chunkers()) == {"fixed", "section", "semantic"}
