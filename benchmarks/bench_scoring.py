"""Cost of self-evaluation relative to generation, per attempt, with the default model.

Target (issue 6): all scoring together <= 15% of the generator's time for the same attempt.

    python benchmarks/bench_scoring.py                                   # the default configuration
    python benchmarks/bench_scoring.py --set scoring.question_check=false  # a setting changed
"""

from __future__ import annotations

import argparse

from common import SHARED, ensure_sherlock_index, need_shared, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting, as for sirag")
    args = ap.parse_args()
    need_shared()
    from self_improving_rag.config import load_config
    from self_improving_rag.engine import Engine
    from self_improving_rag.evaluation.datasets import load_qa

    cfg = load_config(None, [f"paths.index_dir={ensure_sherlock_index()}", *args.set])
    engine = Engine(cfg, record=False)
    items = [q for q in load_qa(SHARED / "data" / "qa" / "sherlock_dev.jsonl") if q.answerable][:6]
    gen_ms = score_ms = 0.0
    ratios = []
    for it in items:
        ans = engine.ask(it.question, loop=False)
        a = ans.attempts[0]
        g, s = a.timings_ms.get("generate", 0.0), a.timings_ms.get("score", 0.0)
        gen_ms += g
        score_ms += s
        if g:
            ratios.append(s / g)
    engine.close()
    report("scoring", {"settings": args.set, "question_check": cfg.scoring.question_check, "attempts": len(items), "generate_ms_total": gen_ms, "score_ms_total": score_ms,
                       "score_share_of_generation": score_ms / gen_ms if gen_ms else None,
                       "max_share_per_attempt": max(ratios) if ratios else None},
           [("all scoring <= 15% of the generator's time for the same attempt", "max_share_per_attempt", "<=", 0.15)])


if __name__ == "__main__":
    main()
