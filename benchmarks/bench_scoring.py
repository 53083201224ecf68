"""Cost of self-evaluation relative to generation, per attempt, with the default model.

Target (issue 6): all scoring together <= 15% of the generator's time for the same attempt.
``question_prior`` is read while the generator evaluates the answer prompt, so its cost is
inside the generation's time: it is measured apart (the prompt's tail from the question on,
evaluated with and without the rows of logits the read needs, best of three each), moved from
the generation's time to the scoring's, and reported as ``question_prior_ms_total``.

    python benchmarks/bench_scoring.py                          # the default configuration
    python benchmarks/bench_scoring.py --set scoring.judge=none  # a setting changed
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
    gen_ms = score_ms = prior_ms = 0.0
    ratios = []
    for it in items:
        ans = engine.ask(it.question, loop=False)
        a = ans.attempts[0]
        prior = prior_read_ms(engine, it.question, a)
        g, s = a.timings_ms.get("generate", 0.0) - prior, a.timings_ms.get("score", 0.0) + prior
        gen_ms += g
        score_ms += s
        prior_ms += prior
        if g:
            ratios.append(s / g)
    engine.close()
    report("scoring", {"settings": args.set, "question_prior_ms_total": prior_ms,
                       "attempts": len(items), "generate_ms_total": gen_ms, "score_ms_total": score_ms,
                       "score_share_of_generation": score_ms / gen_ms if gen_ms else None,
                       "max_share_per_attempt": max(ratios) if ratios else None},
           [("all scoring <= 15% of the generator's time for the same attempt", "max_share_per_attempt", "<=", 0.15)])


def prior_read_ms(engine, question: str, attempt) -> float:
    """What reading the question in the answer prompt added to the generation (ms): the prompt
    from the question's first token on, evaluated with the read's rows of logits and without."""
    import time

    from self_improving_rag.evaluation.question_signals import question_prior_needs
    from self_improving_rag.generation.prompts import build_messages, question_span

    gen = engine.generator
    if not hasattr(gen, "_prefill_reading") or not attempt.passages:
        return 0.0
    prompt = gen.format(build_messages(attempt.strategy.prompt, question, attempt.passages))
    tokens = gen.tokenize(prompt)
    where = gen._span_in(prompt, tokens, question_span(question))
    if where is None:
        return 0.0
    start, cont = where
    wanted = question_prior_needs(gen._span_pieces(cont, question_span(question)))
    gen._prefill(tokens[:start])  # the prompt before the question, cached for both timings

    def best(run) -> float:
        times = []
        for _ in range(3):
            gen._llm.n_tokens = start
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1000)
        return min(times)

    plain = best(lambda: gen._prefill(tokens))
    reading = best(lambda: gen._prefill_reading(tokens, start, wanted))
    return max(0.0, reading - plain)


if __name__ == "__main__":
    main()
