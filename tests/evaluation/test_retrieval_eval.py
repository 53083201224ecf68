"""`sirag eval --retrieval-only`: recall@k and MRR per chunker × retriever × rerank, and refinement."""

from __future__ import annotations

import json

import pytest

from self_improving_rag.batch import BatchSpec, QuestionsSpec
from self_improving_rag.config import load_config
from self_improving_rag.evaluation.retrieval_eval import retrieval_eval
from tests.conftest import fake_overrides

QUESTIONS = [
    {"id": "q1", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"],
     "answerable": True, "evidence": ["built in 1852 by the engineer Clara Venn"]},
    {"id": "q2", "question": "How many sailors did Tobias Lune save from the wreck?", "answers": ["eleven"],
     "answerable": True, "evidence": ["saved eleven sailors from the wreck"]},
    # Evidence that no document holds: it can never be found, so recall stays below 1.
    {"id": "q3", "question": "What colour was the harbour master's boat?", "answers": ["green"],
     "answerable": True, "evidence": ["the harbour master's boat was painted green"]},
    # Unanswerable items are left out of retrieval scoring.
    {"id": "q4", "question": "Who painted the mill?", "answers": [], "answerable": False},
]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict:
    from tests.conftest import write_corpus

    tmp = tmp_path_factory.mktemp("reval")
    corpus = write_corpus(tmp / "docs")
    spec = BatchSpec(name="reval", corpus=[str(corpus)], index=str(tmp / "index"),
                     questions=QuestionsSpec(inline=QUESTIONS), output_dir=str(tmp / "runs"))
    # A budget smaller than the top-5 chunks, so that refinement has something to cut.
    return retrieval_eval(spec, tmp, load_config(None, fake_overrides(tmp) + ["strategy.context_budget=40"]),
                          ks=(1, 3, 5, 10))


def test_one_row_per_chunker_retriever_and_rerank(table: dict) -> None:
    combos = {(r["chunker"], r["retriever"], r["rerank"]) for r in table["rows"]}
    assert combos == {(c, r, rr) for c in ("fixed", "section", "semantic") for r in ("dense", "bm25", "hybrid")
                      for rr in (False, True)}
    assert all(r["n"] == 3 for r in table["rows"])  # the unanswerable question is left out


def test_recall_is_monotone_in_k_and_bounded_by_the_findable_share(table: dict) -> None:
    for r in table["rows"]:
        recalls = [r[f"recall@{k}"] for k in (1, 3, 5, 10)]
        assert recalls == sorted(recalls)
        assert all(0.0 <= x <= 2 / 3 + 1e-9 for x in recalls)
        assert 0.0 <= r["mrr"] <= r["recall@10"] + 1e-9
        assert r["p50_ms"] is not None and r["p50_ms"] >= 0
    best = max(r["recall@5"] for r in table["rows"] if r["retriever"] == "bm25")
    assert best == pytest.approx(2 / 3)  # both findable quotes are found by exact words


def test_refinement_row_and_markdown(table: dict) -> None:
    ref = table["refinement"]
    assert 0 < ref["refined_tokens_mean"] < ref["raw_tokens_mean"] and ref["token_reduction"] > 0.3
    # The lighthouse quote is one sentence, the best one of the top passage: it survives.
    assert ref["evidence_in_refined"] >= 1 / 3
    assert ref["token_reduction"] == pytest.approx(1 - ref["refined_tokens_mean"] / ref["raw_tokens_mean"])
    assert 0.0 <= ref["evidence_in_refined"] <= ref["evidence_in_raw"] <= 2 / 3 + 1e-9
    assert "recall@5" in table["markdown"] and "token_reduction" in table["markdown"]


def test_refinement_counts_prompt_tokens_as_the_prompt_shows_passages(tmp_path) -> None:
    from self_improving_rag.evaluation.datasets import load_qa
    from self_improving_rag.evaluation.retrieval_eval import refinement_eval
    from self_improving_rag.generation.prompts import format_passages, number_texts
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config
    from self_improving_rag.retrieval.searcher import Searcher
    from tests.conftest import write_corpus

    cfg = load_config(None, fake_overrides(tmp_path) + ["strategy.context_budget=40"])
    embedder = embedder_from_config(cfg)
    ingest([write_corpus(tmp_path / "docs")], cfg, embedder, progress=False)
    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps(q) for q in QUESTIONS[:2]), encoding="utf-8")
    items = load_qa(qa)
    seen: list[str] = []

    def count_prompt(text: str) -> int:  # characters stand in for a generator's tokens
        seen.append(text)
        return len(text)

    searcher = Searcher(cfg, embedder)
    try:
        ref = refinement_eval(searcher, items, cfg.strategy.to_strategy(), count_prompt)
        res = searcher.search(items[0].question, cfg.strategy.to_strategy())
    finally:
        searcher.close()
    # The refined text is counted exactly as the prompt numbers it.
    assert format_passages(res.passages) in seen
    assert number_texts(["a  b", "c"]) == "[1] a b\n[2] c"
    assert 0 < ref["refined_prompt_tokens_mean"] < ref["raw_prompt_tokens_mean"]
    assert ref["prompt_token_reduction"] == pytest.approx(
        1 - ref["refined_prompt_tokens_mean"] / ref["raw_prompt_tokens_mean"])


def test_a_question_whose_evidence_no_passage_holds_is_named(table: dict, tmp_path) -> None:
    # Its recall counted as a retrieval miss with no word said: a typo in a quote looked like a bad retriever.
    assert table["evidence_found_nowhere"] == ["q3"]
    from tests.conftest import batch_overrides, write_corpus
    from tests.test_cli import run

    qa = tmp_path / "qa.jsonl"
    rows = [{**QUESTIONS[0], "evidence": ["built in 1852 by the  engineer\nClara Venn"]},  # spacing aside: found
            {**QUESTIONS[1], "evidence": ["saved eleven sailers from the wreck"]}]  # a typo
    qa.write_text("".join(json.dumps(q) + "\n" for q in rows), encoding="utf-8")
    r = run(["eval", "--dataset", str(qa), "--corpus", str(write_corpus(tmp_path / "docs")), "--retrieval-only",
             "--index", str(tmp_path / "index")], tmp_path, batch_overrides(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "note: the evidence of 1 question(s) (q2) is in no passage of the index" in r.stderr, r.stderr
