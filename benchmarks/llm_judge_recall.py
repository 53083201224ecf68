"""Does the generator as a relevance judge (retrieval.llm_judge_top) improve evidence recall?

Runs the default strategy with top_k 10 on sherlock_dev twice, without and with the judge on
the top N hits, and prints evidence recall@1/3/5 and MRR@10 (a hit counts when it contains an
evidence quote) and the search time per question. Needs the packaged generator (~3 s per
judged passage on 2 CPU cores).

    python benchmarks/llm_judge_recall.py --top 8 --weight 0.5
"""

from __future__ import annotations

import argparse
import time

from common import SHARED, ensure_sherlock_index, need_shared, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=8, help="hits judged (retrieval.llm_judge_top)")
    ap.add_argument("--weight", type=float, default=0.5, help="retrieval.llm_judge_weight")
    ap.add_argument("--limit", type=int, default=None, help="first N questions with evidence")
    args = ap.parse_args()
    need_shared()
    from self_improving_rag.config import load_config
    from self_improving_rag.evaluation.datasets import load_qa
    from self_improving_rag.evaluation.metrics import evidence_hit, mrr, recall_at_k
    from self_improving_rag.generation.factory import make_generator
    from self_improving_rag.retrieval.embedder import embedder_from_config
    from self_improving_rag.retrieval.searcher import Searcher

    index = ensure_sherlock_index()
    items = [it for it in load_qa(SHARED / "data" / "qa" / "sherlock_dev.jsonl") if it.evidence][: args.limit]
    figures: dict = {"questions": len(items), "judged_top": args.top, "judge_weight": args.weight}
    generator = None
    embedder = None
    for label, top in (("no_judge", 0), ("judge", args.top)):
        cfg = load_config(None, [f"paths.index_dir={index}", f"retrieval.llm_judge_top={top}",
                                 f"retrieval.llm_judge_weight={args.weight}", "strategy.top_k=10"])
        embedder = embedder or embedder_from_config(cfg)
        searcher = Searcher(cfg, embedder, str(index))
        if top:
            generator = generator or make_generator(cfg)
            generator.warm_up()
            searcher.judge = generator.yes_probability
        flags, secs = [], []
        for it in items:
            t = time.perf_counter()
            res = searcher.search(it.question, cfg.strategy.to_strategy())
            secs.append(time.perf_counter() - t)
            flags.append([any(evidence_hit(h.chunk.text, q) for q in it.evidence) for h in res.hits])
        searcher.close()
        figures[label] = {
            **{f"recall@{k}": recall_at_k(flags, k) for k in (1, 3, 5, 10)}, "mrr@10": mrr(flags, 10),
            "seconds_per_question": sum(secs) / len(secs),
        }
    report("llm_judge_recall", figures)


if __name__ == "__main__":
    main()
