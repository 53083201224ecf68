"""One real-model ask through the server (marked slow; CI runs it): the packaged embedder and
the default generator, streamed token by token, recorded as `sirag ask` records it."""

from __future__ import annotations

import pytest

from self_improving_rag.config import load_config
from tests.conftest import skip_or_fail, write_corpus
from tests.serve.conftest import parse_sse

pytestmark = pytest.mark.slow


@pytest.fixture
def real_engine(tmp_path):
    from self_improving_rag.engine import Engine
    from self_improving_rag.errors import ModelNotFoundError
    from self_improving_rag.generation.registry import resolve_model
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.memory import MemoryStore
    from self_improving_rag.retrieval.embedder import embedder_from_config

    cfg = load_config(None, [f"paths.index_dir={tmp_path / 'index'}", f"paths.memory_db={tmp_path / 'memory.db'}",
                             f"paths.log_dir={tmp_path / 'logs'}"])
    try:
        resolve_model(cfg.generator.model, cfg.paths.model_cache)
    except ModelNotFoundError as exc:
        skip_or_fail(f"the default generator is not installed ({exc})")
    embedder = embedder_from_config(cfg)
    ingest([write_corpus(tmp_path / "docs")], cfg, embedder, progress=False)
    store = MemoryStore(cfg.paths.memory_db)
    engine = Engine(cfg, embedder=embedder, memory=store)
    yield engine, store
    engine.close()
    store.close()


def test_a_real_model_answers_through_the_server_token_by_token(real_engine):
    import httpx

    from self_improving_rag.serve.app import create_app
    from tests.serve.conftest import LiveServer

    engine, store = real_engine
    server = LiveServer(create_app(engine)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            server.wait_ready(client, timeout=600)
            r = client.post("/v1/ask", json={"question": "Who built the lighthouse of Marrow Point?", "stream": True})
    finally:
        server.stop()
    assert r.status_code == 200
    events = parse_sse(r.text)
    name, final = events[-1]
    assert name in ("answer", "refusal"), events[-1]
    first_attempt = [d for n, d in events if n == "token" and d["attempt"] == 1]
    assert len(first_attempt) > 3  # streamed as the model writes, not at once
    attempt = next(d for n, d in events if n == "attempt")
    said = attempt["answer"] if attempt["answer"] is not None else attempt.get("raw_answer", "")
    assert "".join(t["text"] for t in first_attempt).strip()[:20] == said.strip()[:20]
    result = final["result"]
    assert name == "answer" and "Venn" in result["answer"], result
    assert store.show(result["outcome_id"])["answer"] == result["answer"]
