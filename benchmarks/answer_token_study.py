"""Which token-level features of an answer tell a right answer from a wrong one?

Runs `sirag eval` (any batch file, any `--set`) with the llama.cpp generator instrumented: for
every answer prompt it writes, next to the run's results, what the scorer never sees today:
each generated token's id, text and log-probability, the entropy of each step's distribution,
and the probability that the first token opens the refusal sentence. `--analyse RUN_DIR` then
joins those traces with the graded answers of results.jsonl and prints the AUROC of each
candidate feature for "the answer is correct", alone and added to the confidence model's
features in a cross-validated logistic regression.

  python benchmarks/answer_token_study.py --run configs/batch-squad-normans.yaml \
      --name study-squad --set loop.enabled=false
  python benchmarks/answer_token_study.py --analyse runs/study-squad

Not part of `make bench`: it needs the 1.5B generator for as long as the evaluation takes.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRACE_NAME = "token_traces.jsonl"


def _instrument(trace_path: Path) -> None:
    """Make every LlamaCppGenerator.generate call append its token trace to ``trace_path``."""
    from self_improving_rag.generation import llamacpp

    cls = llamacpp.LlamaCppGenerator
    original_generate = cls.generate
    original_logits = cls._logits

    def _logits(self):
        logits = original_logits(self)
        steps = getattr(self, "_study_steps", None)
        if steps is not None:
            lse = float(np.logaddexp.reduce(logits))
            logp = logits - lse
            p = np.exp(logp)
            top = np.argsort(-logits)[:2]
            step = {"entropy": float(-(p * logp).sum()), "top1": float(logp[top[0]]), "top2": float(logp[top[1]])}
            if not steps:
                refusal_ids = self.tokenize("I")[:1] + self.tokenize(" I")[:1]
                step["p_refusal_start"] = float(p[sorted(set(refusal_ids))].sum())
            steps.append(step)
        return logits

    def generate(self, messages, max_tokens=None, on_token=None, read=None):
        self._study_steps = []
        try:
            # No read while generating: its first step's logits would not pass through _logits
            # (so question_prior is undefined in these runs).
            gen = original_generate(self, messages, max_tokens=max_tokens, on_token=on_token)
        finally:
            steps, self._study_steps = self._study_steps, None
        user = messages[-1]["content"] if messages else ""
        question = user.rsplit("Question:", 1)[-1].split("\n", 1)[0].strip() if "Question:" in user else None
        ids = self.tokenize(gen.text)  # re-tokenised answer: only used for piece boundaries
        row = {"question": question, "system": messages[0]["content"][:60] if messages else "",
               "text": gen.text, "logprobs": list(gen.token_logprobs),
               "pieces": [self._llm.detokenize([i]).decode("utf-8", "replace") for i in ids],
               "steps": steps[: len(gen.token_logprobs) + 1], "prompt_tokens": gen.prompt_tokens}
        with trace_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        return gen

    cls._logits = _logits
    cls.generate = generate


def run(argv: list[str], name: str) -> int:
    from self_improving_rag.cli import main

    out = REPO / "runs" / name
    out.mkdir(parents=True, exist_ok=True)
    _instrument(out / TRACE_NAME)
    return main(["eval", *argv, "--name", name])


# -- analysis ---------------------------------------------------------------------------------

def _answer_part(pieces: list[str], logprobs: list[float]) -> list[float]:
    """Log-probs of the answer's own tokens: up to the first citation bracket."""
    out = []
    for piece, lp in zip(pieces, logprobs):
        if "[" in piece:
            break
        out.append(lp)
    return out or list(logprobs[:1])


def trace_features(trace: dict) -> dict[str, float]:
    lps = trace["logprobs"]
    steps = trace["steps"]
    ans = _answer_part(trace["pieces"], lps) if len(trace["pieces"]) == len(lps) else lps
    f = {
        "all_mean": float(np.mean(lps)) if lps else float("nan"),
        "ans_mean": float(np.mean(ans)) if ans else float("nan"),
        "ans_min": float(np.min(ans)) if ans else float("nan"),
        "ans_sum": float(np.sum(ans)) if ans else float("nan"),
        "first_lp": float(lps[0]) if lps else float("nan"),
        "first_entropy": steps[0]["entropy"] if steps else float("nan"),
        "first_margin": (steps[0]["top1"] - steps[0]["top2"]) if steps else float("nan"),
        "mean_entropy": float(np.mean([s["entropy"] for s in steps[: len(ans)]])) if steps else float("nan"),
        "max_entropy": float(np.max([s["entropy"] for s in steps[: len(ans)]])) if steps else float("nan"),
        "log_p_refusal_start": math.log(max(steps[0].get("p_refusal_start", 0.0), 1e-12)) if steps else float("nan"),
    }
    return f


def _auroc(scores, labels) -> float | None:
    from self_improving_rag.evaluation.confidence_metrics import auroc

    return auroc(list(scores), list(labels))


def _cv_auroc(X: np.ndarray, y: np.ndarray, seeds: int = 20) -> tuple[float, float]:
    """Mean and spread of held-out AUROC over seeded 2-fold splits (L2 logistic regression)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scores = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(y))
        half = len(y) // 2
        for tr, te in ((idx[:half], idx[half:]), (idx[half:], idx[:half])):
            if len(set(y[tr])) < 2 or len(set(y[te])) < 2:
                continue
            sc = StandardScaler().fit(X[tr])
            m = LogisticRegression(C=1.0).fit(sc.transform(X[tr]), y[tr])
            scores.append(_auroc(m.predict_proba(sc.transform(X[te]))[:, 1], y[te]))
    return float(np.mean(scores)), float(np.std(scores))


def analyse(run_dirs: list[Path]) -> None:
    from self_improving_rag.batch import grade
    from self_improving_rag.confidence import FEATURES, NEUTRAL_VALUES as NEUTRAL

    rows = []
    for run_dir in run_dirs:
        traces: dict[str, dict] = {}  # question -> its first answer prompt's trace
        for line in (run_dir / TRACE_NAME).read_text(encoding="utf-8").splitlines():
            t = json.loads(line)
            if t["system"].startswith("You answer questions"):
                traces.setdefault(t["question"], t)
        results = run_dir / "results.jsonl"
        if not results.exists():  # `--no-retry` writes its results under <name>-noloop
            results = run_dir.with_name(run_dir.name + "-noloop") / "results.jsonl"
        for line in results.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r.get("answerable") is None or "error" in r:
                continue
            att = r["attempts"][(r.get("chosen_attempt") or 1) - 1]
            if att.get("answer") is None:  # the model itself declined: nothing to grade
                continue
            # The model's answer graded as if it were given (the engine may have refused it).
            y = grade({**r, "answer": att["answer"], "refused": False}).get("correct")
            if y is None:
                continue
            sig = att["signals"]
            conf = sig["confidence"]
            feats = (conf.get("detail") or {}).get("features") or {}
            t = traces.get(r["question"])
            if t is None:
                continue
            claims = (sig["faithfulness"].get("detail") or {}).get("claims") or []
            judges = [c["judge"] for c in claims if c.get("judge") is not None]
            base = {k: (feats.get(k) if feats.get(k) is not None else NEUTRAL[k]) for k in FEATURES}
            rows.append({"run": run_dir.name, "y": int(y), "confidence": conf["value"],
                         "judge_mean": float(np.mean(judges)) if judges else float("nan"),
                         "judge_min": float(np.min(judges)) if judges else float("nan"),
                         "lexical_min": float(min(c["lexical"] for c in claims)) if claims else float("nan"),
                         "similarity_max": float(max(c["similarity"] for c in claims)) if claims else float("nan"),
                         **base, **trace_features(t)})
    if not rows:
        print("no graded answers with traces")
        return
    for run in sorted({r["run"] for r in rows}) + ["pooled"]:
        sel = [r for r in rows if run == "pooled" or r["run"] == run]
        y = np.array([r["y"] for r in sel])
        print(f"\n== {run}: {len(sel)} answers, {int(y.sum())} correct")
        names = ["confidence", *FEATURES, "all_mean", "ans_mean", "ans_min", "ans_sum", "first_lp",
                 "first_entropy", "first_margin", "mean_entropy", "max_entropy", "log_p_refusal_start",
                 "judge_mean", "judge_min", "lexical_min", "similarity_max"]
        for n in names:
            v = np.array([r[n] for r in sel], dtype=float)
            ok = ~np.isnan(v)
            a = _auroc(v[ok], y[ok])
            print(f"  {n:22s} AUROC {a if a is None else round(a, 3)}")
        base_x = np.array([[r[k] for k in FEATURES] for r in sel], dtype=float)
        m, s = _cv_auroc(base_x, y)
        print(f"  cv logistic, confidence features         {m:.3f} ± {s:.3f}")
        for extra in (["judge_mean"], ["ans_mean"], ["ans_min"], ["first_lp"], ["first_entropy"], ["log_p_refusal_start"],
                      ["ans_mean", "log_p_refusal_start"], ["ans_min", "first_entropy", "log_p_refusal_start"]):
            x = np.column_stack([base_x] + [np.nan_to_num(np.array([r[e] for r in sel], dtype=float)) for e in extra])
            m, s = _cv_auroc(x, y)
            print(f"  cv logistic, + {'+'.join(extra):26s} {m:.3f} ± {s:.3f}")


def parse(argv: list[str] | None = None):
    from common import study_parser

    return study_parser(__doc__, "traces").parse_known_args(argv)


if __name__ == "__main__":
    args, rest = parse()
    if args.run:
        if not args.name:
            sys.exit("--run needs --name")
        sys.exit(run([args.run, *rest], args.name))
    if args.analyse:
        analyse(args.analyse)
        sys.exit(0)
    sys.exit("give --run BATCH --name NAME, or --analyse RUN_DIR...")
