"""What a calibration fit costs: `sirag calibrate`, or the engine's automatic fit at start.

Times `calibrate_from_memory` with the default settings (the cross-fit with the model, scaled or
full, and the full refit's penalty chosen inside each fold, the same choices for the stored fit,
and with several corpora each corpus's own fit) on synthetic labelled answers:
200, 1000 and 3000 of them, from one corpus and from three. No model is loaded; answering
costs nothing more, since the engine reads the stored weights once at start.

    python benchmarks/bench_calibrate.py
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

from self_improving_rag.evaluation.calibrate import calibrate_from_memory  # noqa: E402
from self_improving_rag.confidence import DEFAULT_WEIGHTS, confidence  # noqa: E402


class _Rows:
    """Just what calibrate_from_memory reads from a store: its labelled answers."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def labelled_attempts(self) -> list[dict]:
        return self.rows

    def last_label_id(self) -> int:
        # What the stored fit would remember as the newest label it saw (a dry run stores nothing).
        return len(self.rows)


def synthetic(n: int, corpora: int, seed: int = 0) -> list[dict]:
    """``n`` labelled answers with every feature drawn at random, split evenly among
    ``corpora``, each corpus labelled by weights of its own (so that a fit per corpus has
    something to find)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        c = i % corpora
        features = {
            "coverage": float(rng.uniform()), "grounding": float(rng.uniform()),
            "faithfulness": float(rng.uniform()), "redundancy": float(rng.uniform()),
            "mean_logprob": float(rng.uniform(-2.0, 0.0)), "refusal": 0.0,
            "question_prior": float(rng.uniform(-15.0, -0.5)),
            "dates_unstated": float(rng.uniform() < 0.1), "explanation": float(rng.uniform() < 0.1),
        }
        truth = {**DEFAULT_WEIGHTS, "faithfulness": 4.0 - 3.0 * c, "bias": DEFAULT_WEIGHTS["bias"] + c}
        words = int(rng.integers(1, 30))
        rows.append({**features, "answer": " ".join(["word"] * words), "outcome_id": f"o{i}",
                     "question_id": f"q{i}", "corpus": f"/index/corpus-{c}" if corpora > 1 else "/index/only",
                     "label": int(rng.uniform() < confidence({**features, "answer_words": math.log1p(words)},
                                                              truth))})
    return rows


def main() -> None:
    figures: dict[str, float | int] = {}
    for n in (200, 1000, 3000):
        for corpora in (1, 3):
            store = _Rows(synthetic(n, corpora))
            t = time.perf_counter()
            result = calibrate_from_memory(store, min_labels=20, save=False)  # as `sirag calibrate`: with intervals
            seconds = time.perf_counter() - t
            figures[f"seconds_{n}_labels_{corpora}_corpora"] = seconds
            figures[f"own_fits_{n}_labels_{corpora}_corpora"] = len(result["corpus_fits"])
            print(f"{n} labels, {corpora} corpus(es): {seconds:.2f} s, {len(result['corpus_fits'])} own fit(s), "
                  f"held-out AUROC {result['held_out']['after']['auroc']:.3f}", flush=True)
    report("calibrate", figures)


if __name__ == "__main__":
    main()
