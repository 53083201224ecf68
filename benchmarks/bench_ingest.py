"""Ingest the four Holmes novels from scratch (empty embedding cache), then again unchanged.

Targets (issue 3): all three chunkers and their indexes <= 90 s; unchanged re-ingest <= 5 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import SHARED, need_shared, peak_rss_mb, report


def main() -> None:
    need_shared()
    from self_improving_rag.config import load_config
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.embedder import embedder_from_config

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [f"paths.index_dir={Path(tmp) / 'index'}"])
        emb = embedder_from_config(cfg)
        t = time.perf_counter()
        emb.warm_up()
        load_s = time.perf_counter() - t
        corpus = SHARED / "data" / "corpora" / "sherlock"
        t = time.perf_counter()
        first = ingest([corpus], cfg, emb, progress=False)
        cold_s = time.perf_counter() - t
        t = time.perf_counter()
        again = ingest([corpus], cfg, emb, progress=False)
        warm_s = time.perf_counter() - t
    figures = {
        "embedder_load_s": load_s,
        "cold_ingest_s": cold_s,
        "unchanged_reingest_s": warm_s,
        "embedder": emb.name,
        "texts_embedded": first.embedded_texts,
        "embeddings_per_s": first.embedded_texts / (first.timings_ms.get("embed_and_index", 1) / 1000 + sum(
            v for k, v in first.timings_ms.items() if k.startswith("chunk_semantic")) / 1000),
        "chunks": first.chunks,
        "reingest_embedded": again.embedded_texts,
        "peak_rss_mb": peak_rss_mb(),
    }
    for k, v in first.timings_ms.items():
        figures[f"ms_{k}"] = v
    report("ingest", figures, [
        ("all three chunkers and their indexes from scratch <= 90 s", "cold_ingest_s", "<=", 90.0),
        ("unchanged re-ingest <= 5 s", "unchanged_reingest_s", "<=", 5.0),
    ])


if __name__ == "__main__":
    main()
