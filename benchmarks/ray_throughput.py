"""Questions per minute of a batch run: in this process, and on a local Ray with 1 and 2 actors
(docs/scale.md). Results: benchmarks/results/ray_throughput.json.

    python benchmarks/ray_throughput.py [--model smollm2-135m-instruct] [--questions 20] [--cpus 2]

The corpus is the Sherlock Holmes books of ../shared, its questions sherlock_dev's (repeated
under new ids when more are asked for than it has), asked with the default settings (the loop,
the judge) and the model named. Every run starts from a fresh memory store and the same index, so
each answers the same questions from the same state. For each run: the wall time of the whole
run (actors started and models loaded included), and the steady rate between the first answer
and the last; the CPU time this process and its children (Ray's actors) spent from the start to
the last answer, per question, which a machine shared with other work does not inflate as it
does the wall time; the load average; and from the rows, the median time per stage and of the
driver's memory writes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import OUT, SHARED, need_shared  # noqa: E402


def _questions(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (SHARED / "data" / "qa" / "sherlock_dev.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        r = rows[i % len(rows)]
        out.append({"id": f"{r['id']}-{i // len(rows)}", "question": r["question"], "answers": r["answers"],
                    "answerable": r["answerable"]})
    return out


def _cpu_s() -> dict[int, float]:
    """User + system CPU seconds of this process and of every live descendant (Ray's actors and
    servers), by process id."""
    import psutil

    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def _cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`_cpu_s` readings by the processes alive at the second
    (a process ended in between, such as an earlier run's actor, counts for nothing)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def run_one(root: Path, label: str, model: str, threads: int, questions: list[dict], actors: int | None) -> dict:
    from self_improving_rag.batch import BatchSpec, QuestionsSpec, run_batch
    from self_improving_rag.config import load_config
    from self_improving_rag.ray_pool import ExecutorSpec, RayPool

    spec = BatchSpec(name=label, corpus=[str(SHARED / "data" / "corpora" / "sherlock")], index=str(root / "index"),
                     questions=QuestionsSpec(inline=questions), output_dir=str(root / "runs"))
    config = load_config(None, [f"generator.model={model}", f"generator.n_threads={threads}",
                                f"paths.memory_db={root / 'memory' / (label + '.db')}",
                                f"paths.log_dir={root / 'logs'}"])
    pool = RayPool(ExecutorSpec(actors=actors, cpus_per_actor=threads)) if actors else None
    stamps: list[float] = []
    cpu: list[dict[int, float]] = []

    def seen(row: dict) -> None:
        stamps.append(time.perf_counter())
        if len(stamps) == len(questions):  # the actors are still alive: their CPU time counts
            cpu.append(_cpu_s())

    load0 = os.getloadavg()[0]
    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    run_batch(spec, root, config, progress=False, executor=pool, on_row=seen)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (root / "runs" / label / "results.jsonl").read_text().splitlines()]
    stages: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r["timings_ms"].items():
            stages.setdefault(k, []).append(v)
    n = len(rows)
    steady = (n - 1) / (stamps[-1] - stamps[0]) * 60 if n > 1 and stamps[-1] > stamps[0] else None
    return {"run": label, "model": model, "actors": actors or 0, "threads_per_engine": threads, "questions": n,
            "wall_s": round(wall, 1), "q_per_min": round(n / wall * 60, 2),
            "q_per_min_steady": round(steady, 2) if steady else None,
            "first_answer_s": round(stamps[0] - t0, 1),
            "cpu_s_per_question": round(_cpu_spent(cpu0, cpu[0]) / n, 1) if cpu else None,
            "load_average_1min": [round(load0, 1), round(os.getloadavg()[0], 1)],
            "median_ms": {k: round(statistics.median(v)) for k, v in stages.items()},
            "attempts_per_question": round(sum(len(r["attempts"]) for r in rows) / n, 2),
            "errors": sum(1 for r in rows if "error" in r)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray (this machine's)")
    p.add_argument("--runs", default="single,ray1,ray2", help="which of single, single1, ray1, ray2 to run")
    p.add_argument("--root", type=Path, help="work folder (default: a new temporary one); its index is reused")
    args = p.parse_args()
    need_shared()
    import ray

    root = args.root or Path(tempfile.mkdtemp(prefix="sirag-ray-bench-"))
    questions = _questions(args.questions)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip()
    # The index is built once, outside the timings (a run with no questions left only summarises).
    from self_improving_rag.batch import ensure_index
    from self_improving_rag.config import load_config

    t = time.perf_counter()
    ensure_index(load_config(None, [f"paths.log_dir={root / 'logs'}"]), [SHARED / "data" / "corpora" / "sherlock"],
                 str(root / "index"), progress=False)
    print(f"index ready in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    t = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray_init_s = time.perf_counter() - t
    # single1: one engine of one thread, the control for ray2 (two such engines).
    plans = {"single": (args.cpus, None), "single1": (1, None), "ray1": (args.cpus, 1),
             "ray2": (max(1, args.cpus // 2), 2)}
    results = []
    for name in args.runs.split(","):
        threads, actors = plans[name]
        label = f"{name}-{args.model.split('-')[0]}"
        results.append(run_one(root, label, args.model, threads, questions, actors))
        print(json.dumps(results[-1]), flush=True)
    ray.shutdown()
    OUT.mkdir(parents=True, exist_ok=True)
    out = {"benchmark": "ray_throughput", "commit": commit, "model": args.model, "cpus": args.cpus,
           "ray_init_s": round(ray_init_s, 1), "runs": results}
    name = f"ray_throughput-{args.model}-{args.runs.replace(',', '-')}.json"
    (OUT / name).write_text(json.dumps(out, indent=2))
    print("| run | actors | threads each | questions | wall s | q/min | q/min steady | first answer s | "
          "CPU s/question | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['run']} | {r['actors']} | {r['threads_per_engine']} | {r['questions']} | {r['wall_s']} | "
              f"{r['q_per_min']} | {r['q_per_min_steady']} | {r['first_answer_s']} | {r['cpu_s_per_question']} | "
              f"{r['load_average_1min']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
