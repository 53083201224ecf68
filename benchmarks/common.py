"""Shared helpers for the benchmarks: paths, peak memory, JSON output."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# Where figures are written; SIRAG_BENCH_RESULTS moves them (the tests use it to keep real results).
OUT = Path(os.environ.get("SIRAG_BENCH_RESULTS") or REPO / "benchmarks" / "results")


#: Exit codes run_all.py tells apart from a crash (1).
EXIT_TARGET_MISSED = 3
EXIT_SKIPPED = 4


def need_shared() -> None:
    if not (SHARED / "data").is_dir():
        print(f"skipped: {SHARED} not found (the benchmarks read ../shared/data)")
        sys.exit(EXIT_SKIPPED)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, figures: dict, targets: list[tuple[str, str, str, float]] = ()) -> None:
    """Write and print the figures, then each target as PASS or MISS: ``targets`` holds
    (what, figure key, "<=" or ">=", bound). A missed target ends the script with
    EXIT_TARGET_MISSED, after everything is written."""
    OUT.mkdir(parents=True, exist_ok=True)
    checks = []
    for what, key, op, bound in targets:
        value = figures.get(key)
        ok = value is not None and (value <= bound if op == "<=" else value >= bound)
        checks.append({"target": what, "figure": key, "value": value, "op": op, "bound": bound, "met": ok})
    figures = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
    if checks:
        figures["targets"] = checks
    (OUT / f"{name}.json").write_text(json.dumps(figures, indent=2))
    print(f"== {name}")
    for k, v in figures.items():
        if k != "targets":
            print(f"  {k}: {round(v, 3) if isinstance(v, float) else v}")
    for c in checks:
        shown = "not measured" if c["value"] is None else f"{c['value']:.3f}"
        print(f"  {'PASS' if c['met'] else 'MISS'} {c['target']}: {c['figure']} = {shown} (target {c['op']} {c['bound']})")
    if not all(c["met"] for c in checks):
        sys.exit(EXIT_TARGET_MISSED)


def ensure_sherlock_index() -> Path:
    """The four-novel index used by the retrieval and scoring benchmarks (built once, reused)."""
    index = REPO / "index" / "sherlock"
    from self_improving_rag.config import load_config
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config

    cfg = load_config(None, [f"paths.index_dir={index}"])
    # Unchanged files cost well under a second; a missing index is built (a few minutes).
    ingest([SHARED / "data" / "corpora" / "sherlock"], cfg, embedder_from_config(cfg), progress=False)
    return index


def generator_token_counter(cfg):
    """The configured generator's token counter, from its vocabulary alone (no weights, < 1 s),
    or None (with the reason printed) when the model or llama-cpp-python is not available."""
    try:
        from llama_cpp import Llama

        from self_improving_rag.generation.registry import resolve_model

        path = resolve_model(cfg.generator.model, cfg.paths.model_cache)
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    except Exception as exc:  # a figure is left out, the benchmark goes on
        print(f"note: generator tokens not counted ({type(exc).__name__}: {exc})")
        return None
    return lambda text: len(llm.tokenize(text.encode("utf-8"), add_bos=False))

