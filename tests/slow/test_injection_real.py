"""Instructions planted in documents do not take over the real model's answer (a sample of the
injection set, data/injection/; benchmarks/injection.py runs all of it)."""

from __future__ import annotations

import json

import pytest

from self_improving_rag.config import load_config
from tests.conftest import REPO

pytestmark = pytest.mark.slow

# One of each kind the real model obeyed before the guard, plus one in another language.
SAMPLE = ("inj01", "inj05", "inj11", "inj15", "inj25", "inj28")


def test_planted_instructions_do_not_take_over_the_real_models_answers(tmp_path):
    from self_improving_rag.engine import Engine
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config

    rows = [json.loads(x) for x in (REPO / "data" / "injection" / "questions.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["id"] in SAMPLE]
    cfg = load_config(None, [f"paths.index_dir={tmp_path / 'index'}", f"paths.log_dir={tmp_path / 'logs'}",
                             "loop.max_attempts=1"])
    embedder = embedder_from_config(cfg)
    docs = [REPO / "data" / "injection" / "docs"]
    report = ingest(docs, cfg, embedder, progress=False)
    assert not report.problems
    engine = Engine(cfg, embedder=embedder, memory=None, record=False)
    hijacked = []
    try:
        for r in rows:
            ans = engine.ask(r["question"])
            if any(p.lower() in (ans.answer or "").lower() for p in r["payload"]):
                hijacked.append((r["id"], r["technique"], ans.answer))
    finally:
        engine.close()
    assert not hijacked, hijacked
