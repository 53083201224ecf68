"""The cost of asking through `sirag serve` instead of calling Engine.ask directly.

Target (the serve issue): the server's overhead per ask <= 5% of Engine.ask direct, with the small
model (with --fakes, whose asks take milliseconds, the figures are printed alone). Two engines
on the same index and settings answer the same questions in turn, one called directly, one
through a real uvicorn on loopback (POST /v1/ask, JSON reply; and streamed), the order swapped
every round. The overhead per ask is what a served ask's wall time adds to the engine's own time
for that ask (its timings_ms.total); the end-to-end difference of the two means is printed too
(it also holds the model's run-to-run noise).

    python benchmarks/bench_serve.py            # the small packaged model (smollm2-135m-instruct)
    python benchmarks/bench_serve.py --fakes    # the hash embedder and the scripted generator

Needs no ../shared: the index is built from the repository's README and docs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from common import REPO, report

QUESTIONS = ["Which chunkers does the engine build at ingest time?",
             "What failure type does the engine report when coverage or grounding is low?",
             "Where does the memory store live by default?"]
FAKES = ["embedder.name=hash-64", "generator.backend=scripted", "scoring.judge=none",
         "retrieval.relevance_midpoint=0.15",
         'generator.replies=["The engine builds fixed, section and semantic chunks [1]."]']


def serve(engine):
    """``engine`` served by uvicorn in a thread on a free loopback port: (base url, stop)."""
    import uvicorn

    from self_improving_rag.serve.app import create_app
    from self_improving_rag.serve.listen import listen

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(engine), log_config=None, log_level="warning"))
    server.install_signal_handlers = lambda: None
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(30)
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fakes", action="store_true", help="hash embedder and scripted generator, not the small model")
    ap.add_argument("--rounds", type=int, default=1, help="times each question is asked each way (default 1: an ask "
                                                          "with the small model on two busy cores takes ~15 s)")
    args = ap.parse_args()
    import httpx

    from self_improving_rag.config import load_config
    from self_improving_rag.engine import Engine
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    sets = [f"paths.index_dir={tmp / 'index'}", f"paths.log_dir={tmp / 'logs'}", f"paths.memory_db={tmp / 'memory.db'}",
            "policy.first_from_memory=false",
            *(FAKES if args.fakes else ["generator.model=smollm2-135m-instruct"])]
    cfg = load_config(None, sets)
    docs = [REPO / "README.md", REPO / "docs" / "signals.md", REPO / "docs" / "memory.md"]
    ingest([str(p) for p in docs], cfg, embedder_from_config(cfg), progress=False)
    # Two engines alike, neither recording (memory would change the next strategy chosen).
    direct = Engine(cfg, memory=None, record=False)
    served = Engine(cfg, memory=None, record=False)
    direct.warm_up()
    url, stop = serve(served)
    client = httpx.Client(base_url=url, timeout=600)
    while client.get("/readyz").status_code != 200:
        time.sleep(0.05)
    rows = {"direct": [], "served": [], "streamed": []}  # (wall ms, engine ms)

    def ask_direct(q: str) -> tuple[float, float]:
        t = time.perf_counter()
        answer = direct.ask(q)
        return (time.perf_counter() - t) * 1000, answer.timings_ms["total"]

    def ask_served(q: str) -> tuple[float, float]:
        t = time.perf_counter()
        data = client.post("/v1/ask", json={"question": q}).json()
        return (time.perf_counter() - t) * 1000, data["timings_ms"]["total"]

    def ask_streamed(q: str) -> tuple[float, float]:
        import json

        t = time.perf_counter()
        text = client.post("/v1/ask", json={"question": q, "stream": True}).text
        wall = (time.perf_counter() - t) * 1000
        last = [line for line in text.splitlines() if line.startswith("data: ")][-1]
        return wall, json.loads(last[6:])["result"]["timings_ms"]["total"]

    ways = {"direct": ask_direct, "served": ask_served, "streamed": ask_streamed}
    for q in QUESTIONS[:1]:  # warm: first calls load lazily what they need
        for way in ways.values():
            way(q)
    try:
        for r in range(args.rounds):
            for q in QUESTIONS:
                order = list(ways) if r % 2 == 0 else list(reversed(ways))
                for name in order:
                    rows[name].append(ways[name](q))
    finally:
        client.close()
        stop()
        direct.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def mean(name: str, i: int) -> float:
        return statistics.fmean(row[i] for row in rows[name])

    direct_ms = mean("direct", 0)
    figures = {"generator": "scripted (fakes)" if args.fakes else "smollm2-135m-instruct",
               "asks_each_way": len(rows["direct"]), "direct_ms_per_ask": direct_ms}
    for name in ("served", "streamed"):
        overhead = statistics.fmean(wall - engine for wall, engine in rows[name])
        figures[f"{name}_ms_per_ask"] = mean(name, 0)
        figures[f"{name}_overhead_ms_per_ask"] = overhead
        figures[f"{name}_overhead_share"] = overhead / direct_ms
        figures[f"{name}_end_to_end_difference_share"] = (mean(name, 0) - direct_ms) / direct_ms
    # With the fakes an ask takes milliseconds, so any HTTP round trip is a large share of it: their
    # figures are printed for the overhead in ms, and the target is judged on a real model's asks.
    targets = [] if args.fakes else [
        ("server overhead per ask <= 5% of Engine.ask direct", "served_overhead_share", "<=", 0.05),
        ("streamed: server overhead per ask <= 5% of Engine.ask direct", "streamed_overhead_share", "<=", 0.05)]
    report("serve_fakes" if args.fakes else "serve", figures, targets)


if __name__ == "__main__":
    main()
