"""Generator speed per packaged model, KV-cache reuse on a verification call, and the peak
memory of one `sirag ask` with the default model.

Targets (issue 5): peak resident memory of one ask <= 2.5 GB; report tokens/s, TTFT, load time.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

from common import REPO, ensure_sherlock_index, need_shared, report

PASSAGE = ("The lighthouse of Marrow Point was built in 1852 by the engineer Clara Venn. Its lamp burned whale oil "
           "until 1901, when the town council paid for a paraffin burner. Keeper Tobias Lune kept the light for forty "
           "years and never missed a night. ")


def bench_model(name: str) -> dict:
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator
    from self_improving_rag.generation.prompts import build_judge_messages, build_messages
    from self_improving_rag.generation.registry import resolve_model
    from self_improving_rag.types import Passage

    path = resolve_model(name, "~/.cache/self_improving_rag/models")
    gen = LlamaCppGenerator(str(path), max_tokens=48)
    gen.warm_up()
    passages = [Passage(i + 1, PASSAGE * 2, (str(i),), "doc", "Doc > Chapter", 0, 1, 0.9) for i in range(5)]
    msgs = build_messages("cite_then_answer", "Who built the lighthouse of Marrow Point?", passages)
    out = gen.generate(msgs)
    judge = build_judge_messages("cite_then_answer", "Who built the lighthouse?", passages, "Clara Venn built it.")
    t = time.perf_counter()
    gen.yes_probability(judge)
    reuse_ms = (time.perf_counter() - t) * 1000
    gen._llm.n_tokens = 0  # forget the cache: the same judgement from scratch
    t = time.perf_counter()
    gen.yes_probability(judge)
    cold_ms = (time.perf_counter() - t) * 1000
    return {
        f"{name}_load_ms": gen.load_ms,
        f"{name}_prompt_tokens": out.prompt_tokens,
        f"{name}_prompt_tok_per_s": out.prompt_tokens / (out.timings_ms["prompt"] / 1000),
        f"{name}_gen_tok_per_s": out.completion_tokens / max(1e-9, out.timings_ms["generate"] / 1000),
        f"{name}_ttft_ms": out.timings_ms["first_token"],
        f"{name}_judge_with_kv_reuse_ms": reuse_ms,
        f"{name}_judge_cold_ms": cold_ms,
        f"{name}_kv_reuse_saving": 1 - reuse_ms / cold_ms,
    }


def ask_peak_rss_mb() -> float:
    index = ensure_sherlock_index()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([sys.executable, "-m", "self_improving_rag.cli", "ask", "Who is Sherlock Holmes's friend?",
                    "--index", str(index), "--no-memory", "--no-retry", "--json"], cwd=REPO, capture_output=True,
                   check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(before, after) / 1024


def main() -> None:
    need_shared()
    figures: dict = {}
    for name in ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m"):
        figures.update(bench_model(name))
    figures["ask_peak_rss_mb"] = ask_peak_rss_mb()
    report("generation", figures, [("peak resident memory of one ask <= 2.5 GB", "ask_peak_rss_mb", "<=", 2560.0)])


if __name__ == "__main__":
    main()
