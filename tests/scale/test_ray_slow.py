"""Ray runs with the real small model (marked slow): two actors each loading SmolLM2-135M, and
two actors sharing generation servers (`llama_cpp.server`, the openai backend)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import fake_overrides, skip_or_fail, write_corpus
from tests.generation.test_openai_http import _free_port, _wait_for_models

pytestmark = pytest.mark.slow

QUESTIONS = ["Who built the lighthouse of Marrow Point?", "How many sailors did Tobias Lune save?",
             "Who planted the Grandmother tree?", "When does the harvest start?"]
SMALL = ["generator.model=smollm2-135m-instruct", "generator.n_threads=1", "generator.n_ctx=2048",
         "generator.max_tokens=48"]


def _batch(root: Path) -> Path:
    write_corpus(root / "docs")
    items = [{"id": f"q{i}", "question": q} for i, q in enumerate(QUESTIONS)]
    path = root / "b.yaml"
    path.write_text(yaml.safe_dump({"name": "b", "corpus": ["docs"], "index": "index",
                                    "questions": {"inline": items}}), encoding="utf-8")
    return path


def _run(root: Path, overrides: list[str], actors: int):
    from self_improving_rag.batch import load_batch, run_batch
    from self_improving_rag.config import load_config
    from self_improving_rag.ray_pool import ExecutorSpec, RayPool

    spec, base = load_batch(_batch(root))
    config = load_config(None, [f"paths.memory_db={root / 'memory.db'}", f"paths.log_dir={root / 'logs'}",
                                *overrides])
    pool = RayPool(ExecutorSpec(actors=actors, cpus_per_actor=1))
    summary = run_batch(spec, base, config, progress=False, executor=pool)[0]
    rows = [json.loads(line) for line in (root / "runs" / "b" / "results.jsonl").read_text().splitlines()]
    conn = sqlite3.connect(root / "memory.db")
    try:
        recorded = conn.execute("SELECT COUNT(*), COUNT(DISTINCT item_id) FROM outcomes WHERE run_id = 'b'").fetchone()
    finally:
        conn.close()
    return pool, summary, rows, recorded


def _check(pool, summary, rows, recorded, actors: int) -> None:
    assert summary["n"] == len(QUESTIONS)
    assert sorted(r["id"] for r in rows) == [f"q{i}" for i in range(len(QUESTIONS))]
    assert not [r for r in rows if "error" in r], [r["error"] for r in rows if "error" in r]
    assert all(r["attempts"] and r["attempts"][0]["prompt_tokens"] > 0 for r in rows)
    assert recorded == (len(QUESTIONS), len(QUESTIONS))  # one record per question, by the driver
    assert pool.stats["actors_started"] == actors and pool.stats["answered"] == len(QUESTIONS)
    assert sum(1 for k in pool.stats if k.startswith("answered_in_slot_")) == actors, pool.stats


def test_two_actors_answer_with_the_small_real_model(ray_local, tmp_path: Path) -> None:
    from self_improving_rag.errors import ModelNotFoundError
    from self_improving_rag.generation.registry import resolve_model

    try:
        resolve_model("smollm2-135m-instruct", str(tmp_path / "cache"))
    except ModelNotFoundError as exc:
        skip_or_fail(str(exc))
    _check(*_run(tmp_path, SMALL, actors=2), actors=2)


@pytest.fixture
def two_llama_servers(tmp_path: Path):
    """Two ``python -m llama_cpp.server`` with the packaged SmolLM2, on free loopback ports."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        skip_or_fail("needs pip install 'llama-cpp-python[server]'")
    from self_improving_rag.errors import ModelNotFoundError
    from self_improving_rag.generation.registry import resolve_model

    try:
        model = resolve_model("smollm2-135m-instruct", str(tmp_path / "cache"))
    except ModelNotFoundError as exc:
        skip_or_fail(str(exc))
    servers = []
    try:
        for i in range(2):
            port, log_path = _free_port(), tmp_path / f"server{i}.log"
            with log_path.open("wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
                                         "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"],
                                        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            servers.append((proc, f"http://127.0.0.1:{port}/v1", log_path))
        for proc, url, log_path in servers:
            _wait_for_models(proc, f"{url}/models", log_path)
        yield [(url, log_path) for _, url, log_path in servers]
    finally:
        for proc, _, _ in servers:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_two_actors_share_two_real_llama_cpp_servers(ray_local, tmp_path: Path, two_llama_servers) -> None:
    urls = [url for url, _ in two_llama_servers]
    # The fake embedder keeps the test to the generation path: the answers come from the servers.
    fakes = [o for o in fake_overrides(tmp_path) if not o.startswith(("paths.", "generator."))]
    pool, summary, rows, recorded = _run(tmp_path, [*fakes, "generator.backend=openai", "generator.max_tokens=48",
                                                    f"generator.base_url={json.dumps(urls)}", "generator.timeout_s=120"],
                                         actors=2)
    _check(pool, summary, rows, recorded, actors=2)
    for _, log_path in two_llama_servers:  # each server was asked (round-robin from each actor)
        assert "POST /v1/chat/completions" in log_path.read_text(errors="replace"), log_path.read_text()[-1500:]
