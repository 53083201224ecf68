"""End to end with the real packaged models (marked slow; CI runs them too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from self_improving_rag.config import load_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def scarlet_index(tmp_path_factory, shared_dir):
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config

    root = tmp_path_factory.mktemp("real")
    cfg = load_config(None, [f"paths.index_dir={root / 'index'}", f"paths.memory_db={root / 'memory.db'}",
                             f"paths.log_dir={root / 'logs'}"])
    book = shared_dir / "data" / "corpora" / "sherlock" / "pg244_a_study_in_scarlet.txt"
    embedder = embedder_from_config(cfg)
    report = ingest([book], cfg, embedder, progress=False)
    assert report.chunks["section"] > 100 and not report.problems
    return cfg, embedder


def _question(shared_dir: Path, qid: str) -> dict:
    for line in (shared_dir / "data" / "qa" / "sherlock_dev.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["id"] == qid:
            return row
    raise AssertionError(f"{qid} not in sherlock_dev.jsonl")


def test_real_embedder_retrieves_the_evidence(scarlet_index, shared_dir):
    from self_improving_rag.evaluation.metrics import evidence_hit
    from self_improving_rag.retrieval.searcher import Searcher

    cfg, embedder = scarlet_index
    row = _question(shared_dir, "d002")
    searcher = Searcher(cfg, embedder)
    try:
        res = searcher.search(row["question"], cfg.strategy.to_strategy())
    finally:
        searcher.close()
    assert any(evidence_hit(h.chunk.text, q) for h in res.hits for q in row["evidence"])


def test_real_model_answers_with_the_gold_answer(scarlet_index, shared_dir):
    from self_improving_rag.engine import Engine
    from self_improving_rag.memory import MemoryStore

    cfg, embedder = scarlet_index
    row = _question(shared_dir, "d002")
    store = MemoryStore(cfg.paths.memory_db)
    engine = Engine(cfg, embedder=embedder, memory=store)
    try:
        ans = engine.ask(row["question"])
    finally:
        engine.close()
        store.close()
    assert not ans.refused, ans.refusal_reason
    assert any(g.lower() in ans.answer.lower() for g in row["answers"]), ans.answer
    assert ans.sources and ans.sources[0].doc_id.startswith("pg244")
    assert ans.attempts[0].prompt_tokens > 0 and ans.attempts[0].signals.confidence.value is not None


def test_small_packaged_model_generates_with_logprobs_and_prefix_reuse():
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator
    from self_improving_rag.generation.prompts import build_judge_messages, build_messages
    from self_improving_rag.generation.registry import resolve_model
    from self_improving_rag.types import Passage

    path = resolve_model("smollm2-135m-instruct", "unused")
    gen = LlamaCppGenerator(str(path), n_ctx=2048, max_tokens=24)
    passages = [Passage(1, "The lighthouse of Marrow Point was built in 1852 by Clara Venn.", ("a",), "d", "D", 0, 10, 0.9)]
    out = gen.generate(build_messages("base", "Who built the lighthouse?", passages))
    assert out.text and out.completion_tokens == len(out.token_logprobs) > 0
    assert all(lp <= 0 for lp in out.token_logprobs)
    again = gen.generate(build_messages("base", "Who built the lighthouse?", passages))
    assert again.text == out.text, "temperature 0 is deterministic"
    p = gen.yes_probability(build_judge_messages("base", "Who built it?", passages, "Clara Venn built it."))
    assert 0.0 <= p <= 1.0


def test_onnx_int8_embedder_agrees_with_the_float32_model(tmp_path):
    """The int8 ONNX export (default backend) against sentence-transformers in float32."""
    import numpy as np

    from self_improving_rag.retrieval.embedder import OnnxEmbedder, SentenceTransformerEmbedder

    texts = ["Who is the landlady of 221B Baker Street?", "The hound was a huge black beast with glowing eyes.",
             "Holmes took up his violin and played a slow, melancholy air. " * 20,  # longer than 256 word pieces
             "A short one.", "Watson served as an army surgeon in Afghanistan before he met Holmes."]
    onnx = OnnxEmbedder(cache_dir=str(tmp_path / "cache"))
    ref = SentenceTransformerEmbedder()
    a, b = onnx.embed(texts), ref.embed(texts)
    assert a.shape == b.shape == (5, 384) and onnx.name == "all-minilm-l6-v2+onnx-int8"
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.95, cos
    # Same ranking of texts for a question as the float32 model.
    q_a, q_b = onnx.embed([texts[0]]), ref.embed([texts[0]])
    assert np.argsort(-(a[1:] @ q_a[0])).tolist() == np.argsort(-(b[1:] @ q_b[0])).tolist()
    # The export is made once and reused; a corrupt file is rebuilt, not trusted.
    path = onnx.onnx_path
    assert path is not None and path.is_file() and (path.parent / "export.json").is_file()
    mtime = path.stat().st_mtime_ns
    again = OnnxEmbedder(cache_dir=str(tmp_path / "cache"))
    np.testing.assert_allclose(again.embed(texts), a, atol=1e-6)
    assert path.stat().st_mtime_ns == mtime
    path.write_bytes(b"not an onnx model")
    rebuilt = OnnxEmbedder(cache_dir=str(tmp_path / "cache"))
    np.testing.assert_allclose(rebuilt.embed(texts), a, atol=1e-5)
