"""Shared helpers for the benchmarks: paths, peak memory, JSON output."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
OUT = REPO / "benchmarks" / "results"


def need_shared() -> None:
    if not (SHARED / "data").is_dir():
        print(f"skipped: {SHARED} not found (the benchmarks read ../shared/data)")
        sys.exit(0)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, figures: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    figures = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
    (OUT / f"{name}.json").write_text(json.dumps(figures, indent=2))
    print(f"== {name}")
    for k, v in figures.items():
        print(f"  {k}: {round(v, 3) if isinstance(v, float) else v}")


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
