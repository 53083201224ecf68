"""Retrieval latency on the four novels (question embedding included) and context refinement.

Targets (issue 4): hybrid p50 <= 20 ms; refined context >= 50% fewer tokens than raw top-k.
Builds index/sherlock first when it is missing.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from common import SHARED, ensure_sherlock_index, need_shared, report


def main() -> None:
    need_shared()
    from self_improving_rag.config import load_config
    from self_improving_rag.evaluation.datasets import load_qa
    from self_improving_rag.retrieval.embedder import embedder_from_config
    from self_improving_rag.retrieval.searcher import Searcher

    cfg = load_config(None, [f"paths.index_dir={ensure_sherlock_index()}"])
    emb = embedder_from_config(cfg)
    searcher = Searcher(cfg, emb)
    questions = [q.question for q in load_qa(SHARED / "data" / "qa" / "sherlock_dev.jsonl")]
    base = cfg.strategy.to_strategy()
    searcher.search(questions[0], base)  # load indexes once
    figures = {}
    for label, st in (("hybrid_no_rerank", replace(base, rerank=False)), ("hybrid_rerank", base),
                      ("bm25_no_rerank", replace(base, retriever="bm25", rerank=False)),
                      ("dense_no_rerank", replace(base, retriever="dense", rerank=False))):
        retrieve, total = [], []
        for q in questions * 2:
            t = time.perf_counter()
            res = searcher.search(q, st)
            total.append((time.perf_counter() - t) * 1000)
            retrieve.append(res.timings_ms["retrieve"])
        figures[f"{label}_retrieve_p50_ms"] = float(np.percentile(retrieve, 50))
        figures[f"{label}_retrieve_p95_ms"] = float(np.percentile(retrieve, 95))
        figures[f"{label}_search_total_p50_ms"] = float(np.percentile(total, 50))
    count = emb.tokenizer.count
    raw, refined = [], []
    for q in questions:
        res = searcher.search(q, base)
        raw.append(sum(count(h.chunk.text) for h in res.hits))
        refined.append(sum(count(p.text) for p in res.passages))
    figures["raw_topk_tokens_mean"] = float(np.mean(raw))
    figures["refined_tokens_mean"] = float(np.mean(refined))
    figures["token_reduction"] = 1 - float(np.sum(refined) / np.sum(raw))
    searcher.close()
    report("retrieval", figures)


if __name__ == "__main__":
    main()
