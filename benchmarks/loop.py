"""Loop vs no loop, pooled over evaluation runs (issue 7's proof).

Each question of a loop-on run (``sirag eval ... --compare-no-retry``) is scored three ways,
from the same recorded attempts:

- plain RAG, no loop at all: the first attempt's answer as the model gave it (no checks, no
  refusal but the model's own);
- loop off: the first attempt judged by the engine's acceptance rule (answered when its
  confidence clears ``loop.answer_threshold`` and its checks found neither an unsupported claim
  nor missing evidence, else refused);
- loop on: the run's final answer (checks, strategy-switching retries, refusal).

The engine is deterministic at temperature 0, so the first attempt is what a loop-off or
plain run would have produced. The score is the share of questions answered correctly or
rightly refused (``sirag eval``'s grading). "loop vs no loop" is loop on against plain RAG;
"retries alone" is loop on against loop off, and "refusal alone" loop off against plain RAG.

    python benchmarks/loop.py runs/sherlock-dev-s8 runs/squad-normans-calibH runs/squad-normans-calibI

Written to benchmarks/results/loop.json. The runs take tens of minutes each; this script only
reads them (see docs/results.md for the commands that made them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import report


def score_run(run_dir: Path) -> dict:
    """Right answers or right refusals per condition, and per-question changes, for one run."""
    import yaml

    from self_improving_rag.batch import grade, plain_attempt_row, read_done, single_attempt_row
    from self_improving_rag.config import config_from_dict

    results = run_dir / "results.jsonl"
    if not results.is_file():
        sys.exit(f"error: {results} not found; pass the folder of a `sirag eval` run (e.g. runs/NAME)")
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.is_file():
        sys.exit(f"error: {cfg_file} not found; {run_dir} is not the folder of a `sirag eval` run")
    cfg = config_from_dict(yaml.safe_load(cfg_file.read_text(encoding="utf-8")))
    if not cfg.loop.enabled:
        sys.exit(f"error: {run_dir} ran with the loop off; pass a loop-on run (the others are derived from it)")
    rows = [r for r in read_done(results).values() if "correct" in grade(r)]
    if not rows:
        sys.exit(f"error: {run_dir} has no question with a gold answer or an unanswerable label")

    def right(r: dict) -> bool:
        return bool(grade(r)["correct"])

    plain = [right(plain_attempt_row(r)) for r in rows]
    off = [right(single_attempt_row(r, cfg.loop.answer_threshold)) for r in rows]
    on = [right(r) for r in rows]
    return {
        "run": run_dir.name, "n": len(rows), "plain_right": sum(plain), "loop_off_right": sum(off),
        "loop_on_right": sum(on),
        "retries_gained": sum(1 for a, b in zip(off, on) if b and not a),
        "retries_lost": sum(1 for a, b in zip(off, on) if a and not b),
        # Per question the engine took, as summary.json counts them: error rows have no attempts.
        "attempts_per_question": _per_taken(rows, lambda r: len(r["attempts"])),
        "prompt_tokens_per_question": _per_taken(rows, lambda r: sum(a["prompt_tokens"] for a in r["attempts"])),
    }


def _per_taken(rows: list[dict], value) -> float | None:
    taken = [r for r in rows if "error" not in r]
    return sum(value(r) for r in taken) / len(taken) if taken else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="folders of loop-on `sirag eval` runs")
    args = ap.parse_args()
    per_run = [score_run(d) for d in args.runs]
    n = sum(r["n"] for r in per_run)
    pooled = {k: sum(r[k] for r in per_run) / n for k in ("plain_right", "loop_off_right", "loop_on_right")}
    figures = {
        "runs": per_run, "questions": n,
        "plain_rag": pooled["plain_right"], "loop_off": pooled["loop_off_right"], "loop_on": pooled["loop_on_right"],
        "loop_vs_no_loop_points": 100 * (pooled["loop_on_right"] - pooled["plain_right"]),
        "retries_alone_points": 100 * (pooled["loop_on_right"] - pooled["loop_off_right"]),
        "refusal_alone_points": 100 * (pooled["loop_off_right"] - pooled["plain_right"]),
    }
    report("loop", figures, [
        ("loop (checks, retries, refusal) vs no loop (plain RAG) >= +10 points", "loop_vs_no_loop_points", ">=", 10.0),
        ("retries alone (loop on vs one attempt with the same refusal rule) >= +10 points", "retries_alone_points",
         ">=", 10.0),
    ])


if __name__ == "__main__":
    main()
