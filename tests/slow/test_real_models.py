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
    from self_improving_rag.evaluation.retrieval_metrics import evidence_hit
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
    # The judgement shares the answer prompt's system message and passages: their KV cache is reused.
    n_prompt = gen.count_tokens(gen.format(build_messages("base", "Who built the lighthouse?", passages)))
    assert 20 < gen.last_reused_tokens < n_prompt, (gen.last_reused_tokens, n_prompt)
    assert again.reused_prefix_tokens == n_prompt - 1  # the same prompt again: all but the last token


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "default"])
def test_the_question_read_while_the_prompt_is_evaluated_scores_as_read_token_by_token(model):
    """generate(read=...) reads the question where the answer prompt holds it while evaluating
    that prompt, in one batch: the tokens asked for get the log-probs read one token at a time
    on the same prompt, the others None, and the reply is the one generated without the read. The
    default model's vocabulary joins the question's "?" and the newline after it: the read must
    still be made."""
    import numpy as np

    from self_improving_rag.config import load_config
    from self_improving_rag.evaluation.question_signals import question_prior_needs, question_words
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator
    from self_improving_rag.generation.prompts import build_messages, question_span
    from self_improving_rag.generation.registry import resolve_model
    from self_improving_rag.types import Passage

    cfg = load_config(None)
    name = cfg.generator.model if model == "default" else model
    gen = LlamaCppGenerator(str(resolve_model(name, cfg.paths.model_cache)), n_ctx=2048, max_tokens=12)
    passages = [Passage(1, "The lighthouse of Marrow Point was built in 1852 by Clara Venn.", ("a",), "d", "D", 0, 10, 0.9)]
    question = "Who built the lighthouse of Marrow Point?"
    messages, span = build_messages("base", question, passages), question_span(question)
    plain = gen.generate(messages)
    gen._llm.n_tokens = 0  # nothing cached: the read covers a whole prompt evaluation
    read = gen.generate(messages, read=(span, question_prior_needs))
    assert read.text == plain.text and read.token_logprobs == pytest.approx(plain.token_logprobs, abs=0.2)
    assert read.reused_prefix_tokens == 0 and read.prompt_read is not None
    assert "".join(p for p, _ in read.prompt_read) == span
    scored = [w for w, lp in question_words(list(read.prompt_read)) if lp is not None]
    assert scored == ["built", "lighthouse", "Marrow", "Point"], read.prompt_read
    tokens = gen.tokenize(gen.format(messages))
    start, cont = gen._span_in(gen.format(messages), tokens, span)
    gen._llm.n_tokens = 0  # nothing cached: evaluate from scratch, one token at a time
    gen._prefill(tokens[:start])
    one_by_one = []
    for tok in cont:
        logits = gen._logits()
        one_by_one.append(float(logits[tok] - np.logaddexp.reduce(logits)))
        gen._llm.eval([tok])
    # Batched and one-token kernels round differently: up to 0.12 seen on a 4-bit model, where a
    # row read one position off would differ by nats.
    assert [lp for _, lp in read.prompt_read if lp is not None] == pytest.approx(
        [a for (_, lp), a in zip(read.prompt_read, one_by_one) if lp is not None], abs=0.2)
    # With the prompt cached (the same question again), the rows are still computed.
    again = gen.generate(messages, read=(span, question_prior_needs))
    assert again.text == plain.text and [lp for _, lp in again.prompt_read] == pytest.approx(
        [lp for _, lp in read.prompt_read], abs=0.2)
    assert 0 < again.reused_prefix_tokens < gen.count_tokens(gen.format(messages)) - len(read.prompt_read)
    # A span that is not in the prompt reads nothing; the reply is unchanged.
    missing = gen.generate(messages, read=(" not in this prompt", question_prior_needs))
    assert missing.prompt_read is None and missing.text == plain.text
    assert np.isfinite(plain.token_logprobs).all()


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


MADE_UP = [
    "He had previously served as Governor of Bengal for ten years",
    "The whole affair was later set to music by a Viennese composer",
    "The police paid him a reward of ten thousand guineas in gold",
    "Afterwards he emigrated to New Zealand and farmed sheep there",
    "The house was demolished the following spring to build a railway station",
    "A Russian prince had secretly financed the entire scheme",
    "He learned this from a carrier pigeon sent from Edinburgh",
    "The letter was written in fluent Portuguese on green paper",
    "Three lions escaped from the zoo on the same night",
    "The Queen herself attended the trial wearing a disguise",
]


def test_real_model_attributes_injected_failures(scarlet_index, shared_dir):
    """Gold passage removed -> WEAK_RETRIEVAL; made-up claim added -> HALLUCINATION_RISK naming it.

    Real embedder, real 1.5B judge, the Study in Scarlet questions of sherlock_dev (>= 40 cases).
    """
    from dataclasses import replace

    from self_improving_rag.engine import Engine
    from self_improving_rag.evaluation.retrieval_metrics import evidence_hit
    from self_improving_rag.feedback.attribution import attribute
    from self_improving_rag.generation.prompts import parse_citations

    cfg, embedder = scarlet_index
    rows = [json.loads(line) for line in
            (shared_dir / "data" / "qa" / "sherlock_dev.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r.get("answerable") and r.get("book") == "pg244" and r.get("evidence")]
    engine = Engine(cfg, embedder=embedder, record=False)
    engine.warm_up()
    right = total = no_baseline = 0
    misses = []
    try:
        for i, row in enumerate(rows):
            for top_k in (3, 5, 8, 10):
                res = engine.searcher.search(row["question"], replace(engine.policy.default, top_k=top_k))
                gold = [p for p in res.passages if any(evidence_hit(p.text, q) for q in row["evidence"])
                        or any(a.lower() in p.text.lower() for a in row["answers"])]
                if not gold:
                    continue
                answer = f"{row['answers'][0]} [{gold[0].number}]."
                # Gold passage(s) removed: the answer has no evidence left.
                kept = [p for p in res.passages if p not in gold]
                dropped = replace(res, passages=tuple(replace(p, number=j + 1) for j, p in enumerate(kept)),
                                  hits=tuple(h for h in res.hits if not any(
                                      evidence_hit(h.chunk.text, q) for q in row["evidence"])))
                ans_dropped = f"{row['answers'][0]} [1]."
                sig = engine._scorer.score(row["question"], dropped, None, ans_dropped, False, parse_citations(ans_dropped))
                got = attribute(sig, cfg.thresholds)
                total += 1
                right += got.failure == "WEAK_RETRIEVAL"
                if got.failure != "WEAK_RETRIEVAL":
                    misses.append((row["id"], top_k, "drop", got.failure, got.reason))
                # A made-up claim added to the correct answer.
                claim = MADE_UP[(i + top_k) % len(MADE_UP)]
                text = f"{answer} {claim} [{gold[0].number}]."
                sig = engine._scorer.score(row["question"], res, None, text, False, parse_citations(text))
                got = attribute(sig, cfg.thresholds)
                claims = sig.faithfulness.detail.get("claims") or []
                if not claims or not claims[0]["supported"]:
                    # The gold answer itself is not supported by these (refined) passages: no
                    # sound baseline to add a made-up claim to.
                    no_baseline += 1
                    continue
                named = any(claim[:25] in u for u in sig.faithfulness.detail.get("unsupported", []))
                total += 1
                ok = got.failure == "HALLUCINATION_RISK" and named
                right += ok
                if not ok:
                    misses.append((row["id"], top_k, "made-up", got.failure, got.reason))
    finally:
        engine.close()
    print(f"injected failures attributed right: {right}/{total} ({no_baseline} made-up cases without a supported baseline)")
    for m in misses:
        print("  miss:", m)
    assert total >= 40, total
    assert no_baseline <= 0.25 * total, no_baseline
    assert right / total >= 0.9, misses


def test_streamed_text_matches_the_answer_when_max_tokens_cuts_a_character():
    """Emoji take several byte tokens: a cut inside one leaves neither a stray "\\ufffd" in the
    answer nor a difference between what was streamed and what is returned."""
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator
    from self_improving_rag.generation.registry import resolve_model

    gen = LlamaCppGenerator(str(resolve_model("smollm2-135m-instruct", "unused")), n_ctx=512, max_tokens=24)
    messages = [{"role": "user", "content": "Repeat exactly this text: \U0001F600\U0001F389\U0001F680 \u65e5\u672c\u8a9e"}]
    for m in range(10, 18):
        seen: list[str] = []
        out = gen.generate(messages, max_tokens=m, on_token=seen.append)
        assert "\ufffd" not in out.text and "".join(seen).strip() == out.text, (m, seen, out.text)
