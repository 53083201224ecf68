"""Reporting runs: the comparison tables (JSON, Markdown, a chart) and the summary lines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


COMPARE_KEYS = ("n", "correct_or_rightly_refused", "answered_accuracy", "em", "f1", "contains",
                "first_attempt_success", "attempts_per_question", "prompt_tokens_per_question", "aurc", "aurc_answered",
                "ece", "confidence_auroc", "ece_answered", "confidence_auroc_answered", "faithfulness_mean",
                "evidence_in_context_first_attempt")


def write_comparison(summaries: list[dict], stem: Path) -> None:
    rows = []
    for s in summaries:
        rows.append({"run": s["run"], **{k: s.get(k) for k in COMPARE_KEYS}})
    # Suffixes appended, not swapped: with_suffix would cut a run name at its dot ("exp.v2-comparison"
    # became "exp.json"), so two batches, or a grid and its loop-vs-noloop table, wrote one file.
    def named(ext: str) -> Path:
        return stem.with_name(stem.name + ext)

    named(".json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    named(".md").write_text(markdown_table(rows), encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3 + 0.3 * len(rows)))
        ax.barh([r["run"] for r in rows], [r["correct_or_rightly_refused"] or 0 for r in rows])
        ax.set_xlabel("answered correctly or rightly refused")
        ax.set_xlim(0, 1)
        fig.tight_layout()
        fig.savefig(named(".png"))
        plt.close(fig)
    except ImportError:
        pass


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])

    def fmt(v: Any) -> str:
        text = f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))
        # A strategy key ("c=section|r=hybrid|...") must not split its cell.
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _figure(v: Any) -> str:
    """A summary figure as the summary line shows it: "n/a" for one that cannot be computed (a
    recall with no unanswerable question, say), as the other commands say it, not Python's None."""
    return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def print_summary(s: dict) -> None:
    keys = ([k for k in COMPARE_KEYS if k in s] + ["refused", "answered"]
            + [k for k in ("answered_right", "answered_wrong") if k in s] + (["errors"] if s.get("errors") else []))
    print(f"run {s['run']}: " + ", ".join(f"{k}={_figure(s.get(k))}" for k in keys))
    if s.get("refusal"):
        r = s["refusal"]
        print("  refusal: " + ", ".join(f"{k}={_figure(v)}" for k, v in r.items()
                                        if k in ("precision", "recall", "f1", "false_refusal_rate")))
    interval = s.get("confidence_auroc_answered_interval")
    if interval:
        print(f"  confidence_auroc_answered 95% interval: {interval['low']:.3f}–{interval['high']:.3f} "
              f"(the answers drawn again with replacement, {interval['resamples']} times)")
    if s.get("latency_ms"):
        print("  latency p50/p95 (s): " + ", ".join(
            f"{k} {v.get('p50', 0) / 1000:.2f}/{v.get('p95', 0) / 1000:.2f}" for k, v in s["latency_ms"].items() if v.get("p50") is not None))


def print_where(out_root: Path, summaries: list[dict], comparisons: list[Path | None] = ()) -> None:
    """Where the runs were written: the batch file's folder (its output_dir:), not the folder
    the command ran in, so the summary lines alone leave a user looking in the wrong place; and
    the comparison tables written there (a grid's, the loop-vs-noloop one)."""
    if not summaries:
        return
    runs = ", ".join(f"{s['run']}/" for s in summaries)
    line = f"results: {out_root}{os.sep} {runs} (results.jsonl, summary.json)"
    written = [f"{c.name}.{{json,md,png}}" for c in comparisons if c is not None]
    if written:
        line += f"; comparison{'s' if len(written) > 1 else ''}: {', '.join(written)}"
    print(line)
