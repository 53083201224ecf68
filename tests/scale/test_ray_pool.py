"""Batch runs on a local Ray (``ray.init(num_cpus=2)``) with the fake models: the driver alone
records, so a Ray run (``--ray``, or ``--workers N``) gives the rows and the memory records of a
single-process run; an actor killed mid-run loses and duplicates nothing; a resumed run asks only
what is left."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.conftest import batch_overrides, main_in_process, write_corpus

QUESTIONS = [
    ("q01", "Who built the lighthouse of Marrow Point?", ["Clara Venn"]),
    ("q02", "How many sailors did Tobias Lune save?", ["eleven"]),
    ("q03", "When does the fish market open?", ["at dawn"]),
    ("q04", "Who planted the Grandmother tree?", ["Ansel Brook"]),
    ("q05", "What did Dr. Pim buy for his cat?", ["smoked herring"]),
    ("q06", "Where was the market bell cast?", ["Bristol"]),
    ("q07", "What is pressed in the old barn?", ["cider"]),
    ("q08", "???", ["nothing"]),  # no letters: the engine refuses it (an error row, in both runs alike)
    ("q09", "Who kept the light for forty years?", ["Tobias Lune"]),
    ("q10", "When does the harvest start?", ["late September"]),
]
REPLY = 'generator.replies=["Clara Venn built it in 1852 [1]."]'


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """Documents, and a batch file over them whose index is shared by every run in tmp_path."""
    write_corpus(tmp_path / "docs")
    items = [{"id": i, "question": q, "answers": a} for i, q, a in QUESTIONS]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"name": "t", "corpus": ["docs"], "index": "index",
                                                     "questions": {"inline": items}}), encoding="utf-8")
    return tmp_path


def _run(world: Path, out: str, *extra: str, executor=None, limit=None, on_row=None) -> list[dict]:
    from self_improving_rag.batch import load_batch, run_batch
    from self_improving_rag.config import load_config

    spec, base = load_batch(world / "t.yaml")
    spec = spec.model_copy(update={"output_dir": out})
    config = load_config(None, [*batch_overrides(world), f"paths.memory_db={world / out / 'memory.db'}", REPLY,
                                *extra])
    return run_batch(spec, base, config, progress=False, executor=executor, limit=limit, on_row=on_row)


def _pool(actors: int):
    from self_improving_rag.ray_pool import ExecutorSpec, RayPool

    return RayPool(ExecutorSpec(kind="ray", actors=actors))


def _volatile(value):
    """A row without what differs between two runs of the same answers (times, outcome ids)."""
    if isinstance(value, dict):
        return {k: _volatile(v) for k, v in value.items() if k != "outcome_id" and not k.endswith("_ms")}
    if isinstance(value, list):
        return [_volatile(v) for v in value]
    return value


def _rows(world: Path, out: str) -> dict[str, dict]:
    lines = (world / out / "t" / "results.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert len({r["id"] for r in rows}) == len(rows), "a question has two rows"
    return {r["id"]: _volatile(r) for r in rows}


def _memory(world: Path, out: str) -> list[tuple]:
    """Every outcome and attempt recorded, without ids and times, in question order."""
    conn = sqlite3.connect(world / out / "memory.db")
    try:
        outcomes = conn.execute(
            "SELECT run_id, item_id, question, answer, refused, refusal_reason, confidence, query_class, "
            "chosen_attempt, n_attempts, first_strategy_key, final_strategy_key, success, features_json, corpus "
            "FROM outcomes ORDER BY item_id").fetchall()
        cols = [c[1] for c in conn.execute("PRAGMA table_info(attempts)")
                if c[1] not in ("id", "outcome_id", "timings_json", "total_ms", "created_at")]
        attempts = conn.execute(f"SELECT o.item_id, {', '.join('a.' + c for c in cols)} FROM attempts a "
                                "JOIN outcomes o ON o.id = a.outcome_id ORDER BY o.item_id, a.number").fetchall()
    finally:
        conn.close()
    assert len({o[1] for o in outcomes}) == len(outcomes), "a question is recorded twice"
    return outcomes + attempts


def test_one_actor_gives_the_rows_and_memory_of_the_single_process_run(ray_local, world: Path) -> None:
    # One actor asks one question at a time, each once the one before is recorded, and reads the
    # driver's store: memory's choices (policy.method greedy, learning within the run) are the same.
    _run(world, "single")
    pool = _pool(1)
    _run(world, "ray", executor=pool)
    assert pool.stats["answered"] == len(QUESTIONS) and pool.stats["actors_started"] == 1
    assert _rows(world, "ray") == _rows(world, "single")
    assert _memory(world, "ray") == _memory(world, "single")
    assert "error" in _rows(world, "ray")["q08"]


def test_an_actor_killed_mid_run_loses_and_duplicates_nothing(ray_local, world: Path) -> None:
    fixed = "policy.method=fixed"  # two actors answer in any order: memory must not steer the answers
    _run(world, "single", fixed)
    pool = _pool(2)
    killed: list = []

    def kill_one(row: dict) -> None:
        if not killed:  # as the first answer is kept, the other actor is answering its question
            slot = next(s for s in pool.actors)
            killed.append(slot)
            ray_local.kill(pool.actors[slot], no_restart=True)

    summaries = _run(world, "ray", fixed, executor=pool, on_row=kill_one)
    assert killed and pool.stats["actors_replaced"] >= 1 and pool.stats["asked_again"] >= 1
    assert pool.stats["answered"] == len(QUESTIONS)
    assert summaries[0]["n"] == len(QUESTIONS)
    assert _rows(world, "ray") == _rows(world, "single")
    assert _memory(world, "ray") == _memory(world, "single")


def test_a_resumed_ray_run_asks_only_what_is_left(ray_local, world: Path) -> None:
    fixed = "policy.method=fixed"
    _run(world, "single", fixed)
    first = _pool(2)
    _run(world, "ray", fixed, executor=first, limit=4)
    assert len(_rows(world, "ray")) == 4 and first.stats["answered"] == 4
    second = _pool(2)
    second.memory_copy = True  # as actors on other machines read memory: a copy taken at the start
    _run(world, "ray", fixed, executor=second)
    assert second.stats["answered"] == len(QUESTIONS) - 4
    assert _rows(world, "ray") == _rows(world, "single")
    assert _memory(world, "ray") == _memory(world, "single")


def test_the_command_line_and_the_batch_file_s_executor(ray_local, world: Path, capsys) -> None:
    argv = ["batch", str(world / "t.yaml"), "--ray", "--workers", "2", "--json"]
    sets = [x for o in [*batch_overrides(world), REPLY] for x in ("--set", o)]
    assert main_in_process([*argv, *sets]) == 0
    summary = json.loads(capsys.readouterr().out)[0]
    assert summary["n"] == len(QUESTIONS)
    data = yaml.safe_load((world / "t.yaml").read_text(encoding="utf-8"))
    data.update(name="t2", executor={"kind": "ray", "actors": 1})
    (world / "t2.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main_in_process(["batch", str(world / "t2.yaml"), "--json", "--limit", "3", *sets]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] == 3
    conn = sqlite3.connect(world / "memory" / "memory.db")
    try:
        counts = dict(conn.execute("SELECT run_id, COUNT(*) FROM outcomes GROUP BY run_id").fetchall())
    finally:
        conn.close()
    assert counts == {"t": len(QUESTIONS) - 1, "t2": 3}  # q08 is refused before it is asked: no record


def test_an_actor_that_cannot_load_its_model_stops_the_run_before_any_question(ray_local, world: Path,
                                                                              capsys) -> None:
    sets = [x for o in [*batch_overrides(world), "generator.backend=llama_cpp", "generator.model=no-such-model",
                        "generator.n_threads=1"] for x in ("--set", o)]
    assert main_in_process(["batch", str(world / "t.yaml"), "--ray", *sets]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "Traceback" not in err
    assert not (world / "runs" / "t" / "results.jsonl").exists() or \
        not (world / "runs" / "t" / "results.jsonl").read_text(encoding="utf-8").strip()


def test_workers_n_asks_on_n_local_actors_and_resumes_as_one_process_would(ray_local, world: Path, capsys,
                                                                           monkeypatch) -> None:
    from self_improving_rag.ray_pool import RayPool

    fixed = "policy.method=fixed"  # two actors answer in any order: memory must not steer the answers
    _run(world, "single", fixed)
    pools: list[RayPool] = []
    run = RayPool.run
    monkeypatch.setattr(RayPool, "run", lambda self, *a, **k: (pools.append(self), run(self, *a, **k))[1])
    sets = [x for o in [*batch_overrides(world), REPLY, fixed, f"paths.memory_db={world / 'runs' / 'memory.db'}"]
            for x in ("--set", o)]
    argv = ["batch", str(world / "t.yaml"), "--workers", "2", "--json", *sets]
    assert main_in_process([*argv, "--limit", "4"]) == 0
    assert main_in_process(argv) == 0  # resumed: only the questions left are asked
    assert [json.loads(line)[0]["n"] for line in capsys.readouterr().out.splitlines()] == [4, len(QUESTIONS)]
    assert [p.stats["actors_started"] for p in pools] == [2, 2]
    assert [p.stats["answered"] for p in pools] == [4, len(QUESTIONS) - 4]
    assert _rows(world, "runs") == _rows(world, "single")
    assert _memory(world, "runs") == _memory(world, "single")


@pytest.mark.parametrize("option", [["--ray"], ["--workers", "2"]])
def test_without_ray_the_ray_option_names_the_install(world: Path, capsys, monkeypatch, option) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as when it is not installed
    sets = [x for o in batch_overrides(world) for x in ("--set", o)]
    assert main_in_process(["batch", str(world / "t.yaml"), *option, *sets]) == 2
    err = capsys.readouterr().err
    assert "pip install -e '.[ray]'" in err and option[0] in err and err.count("\n") == 1
    assert not (world / "runs").exists()  # said before anything was written


def test_without_ray_one_worker_answers_in_this_process(world: Path, capsys, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    sets = [x for o in [*batch_overrides(world), REPLY] for x in ("--set", o)]
    assert main_in_process(["batch", str(world / "t.yaml"), "--workers", "1", "--limit", "2", "--json", *sets]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] == 2


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_a_batch_file_right_after_ray_is_the_file_not_the_address(ray_local, world: Path, capsys,
                                                                   command: str) -> None:
    # argparse gives FILE to --ray (its address is optional): it is the batch file, on a local Ray.
    sets = [x for o in [*batch_overrides(world), REPLY] for x in ("--set", o)]
    assert main_in_process([command, "--ray", str(world / "t.yaml"), "--limit", "2", "--json", *sets]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] == 2


def test_batch_without_a_file_says_so_in_one_line(world: Path, capsys) -> None:
    sets = [x for o in batch_overrides(world) for x in ("--set", o)]
    assert main_in_process(["batch", "--ray", *sets]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sirag batch needs a batch YAML file") and err.count("\n") == 1
