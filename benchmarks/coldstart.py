"""Cold-start, leave-one-corpus-out protocol: what a new user gets on documents never seen.

    python benchmarks/coldstart.py configs/batch-*.yaml --record --out runs/coldstart [--ship]

1. ``--record``: answers each batch file's questions once with ``sirag eval`` (the engine at its
   defaults without the shipped model, ``loop.target_precision`` null, from an empty memory store
   per batch: ``<out>/memory/<name>.db``); a finished run is kept, an unfinished one resumed.
   Without it, the runs must exist.
2. Batch files that share an index are one corpus. For each corpus in turn, a confidence model is
   fitted on the other corpora's labelled attempts, its answer bar chosen on them for
   ``--target`` precision, and the corpus's recorded attempts decided with both. A corpus whose
   unanswerable questions were written to mislead (SQuAD 2.0) is held apart: left out of every
   fit and bar, and decided by the model fitted on all the others
   (self_improving_rag/evaluation/coldstart.py says why the replay is exact).
3. Prints, per corpus and pooled, with 95% bootstrap intervals, the figures before (the runs as
   recorded) and after; writes ``<out>/coldstart.json`` and the risk-coverage curve
   ``<out>/risk_coverage.png``.
4. ``--ship``: fits the model on every corpus and writes the package's shipped confidence model
   (weights, the held-out curve the bar is read from, held-out reliability, provenance).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from self_improving_rag.batch import load_batch  # noqa: E402
from self_improving_rag.config import load_config  # noqa: E402
from self_improving_rag.evaluation import coldstart as cs  # noqa: E402
from self_improving_rag.evaluation import shipped  # noqa: E402


def corpora_of(batch_files: list[Path], out: Path) -> dict[str, list[tuple[Path, Path, bool]]]:
    """corpus name -> [(batch file, run folder, adversarial unanswerables)], grouped by index."""
    groups: dict[str, list[tuple[Path, Path, bool]]] = {}
    for f in batch_files:
        spec, base = load_batch(f)
        index = (base / spec.index).resolve() if spec.index else (out / spec.name / "index")
        run_dir = (base / spec.output_dir / spec.name).resolve()
        squad = (spec.questions.file or "").endswith(".json")
        groups.setdefault(index.name, []).append((f, run_dir, squad))
    return groups


def record(batch_files: list[Path], out: Path, sets: list[str]) -> None:
    for f in batch_files:
        spec, _ = load_batch(f)
        mem = out / "memory" / f"{spec.name}.db"
        mem.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "self_improving_rag.cli", "eval", str(f), "--memory", str(mem),
               "--set", "loop.target_precision=null"]
        for s in sets:
            cmd += ["--set", s]
        print("recording:", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def sources_hold_gold(run_dirs: list[Path]) -> tuple[int, int]:
    """(right answers whose shown sources contain a gold answer, right answers) over the recorded
    runs: whether a user who checks the passages shown finds the answer there."""
    from self_improving_rag.evaluation.answer_metrics import normalize_answer

    hold = right = 0
    for run in run_dirs:
        for line in (run / "results.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("refused", True) or not (row.get("grade") or {}).get("correct") or not row.get("answerable"):
                continue
            shown = normalize_answer(" ".join(s.get("text") or "" for s in row.get("sources") or []))
            right += 1
            hold += any(g and normalize_answer(g) in shown for g in row.get("gold_answers") or [])
    return hold, right


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def plot(path: Path, before: list[dict], held_out_curve: list[dict], chosen: float, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot([p["coverage"] for p in held_out_curve], [1 - p["precision"] for p in held_out_curve], "o-", ms=3,
            label="held-out fits, bar 0.30-0.95")
    at = min(held_out_curve, key=lambda p: abs(p["bar"] - chosen))
    ax.plot([at["coverage"]], [1 - at["precision"]], "s", ms=9, label=f"shipped bar {chosen:.3f}")
    b = before[0]
    ax.plot([b["coverage"]], [1 - b["precision"]], "x", ms=10, mew=2, color="crimson", label="before (as recorded)")
    ax.axhline(1 - target, ls=":", color="grey", label=f"risk {1 - target:.2f} (target precision {target:.2f})")
    ax.set_xlabel("coverage (share of questions answered)")
    ax.set_ylabel("risk (share of returned answers wrong)")
    ax.set_title("Risk-coverage, leave-one-corpus-out, pooled")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("batch", nargs="+", type=Path, help="batch YAML files (configs/batch-*.yaml)")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "coldstart", help="memory stores, report, figure")
    ap.add_argument("--record", action="store_true", help="answer the questions first (resumes unfinished runs)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="setting for --record")
    ap.add_argument("--target", type=float, default=0.8, help="target precision of returned answers")
    ap.add_argument("--ship", type=Path, nargs="?", const=shipped.PATH, default=None,
                    help="write the shipped confidence model (default: the package's)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.record:
        record(args.batch, args.out, args.set)
    groups = corpora_of(args.batch, args.out)
    loaded = {name: [q for _, run, adv in runs for q in cs.load_run(run, name, adversarial=adv)]
              for name, runs in groups.items()}
    loaded = {k: v for k, v in loaded.items() if v}
    # Corpora whose unanswerable questions were written to mislead (SQuAD 2.0) are held apart: the
    # model is fitted and its bar chosen on the others, then they are decided by that model.
    apart = {k: v for k, v in loaded.items() if any(q.kind == "adversarial" for q in v)}
    corpora = {k: v for k, v in loaded.items() if k not in apart}
    if len(corpora) < 2:
        print("need answered questions from at least two corpora", file=sys.stderr)
        return 2
    config = load_config(overrides=[s for s in args.set if s.startswith(("loop.", "thresholds."))])
    margin = config.loop.retry_margin
    loco = cs.leave_one_corpus_out(corpora, args.target, margin)
    chosen = shipped.bar_for(loco["curve"], args.target)
    every = cs.fit([q for qs in corpora.values() for q in qs])
    after = {name: [d for d in loco["decisions"] if d.question.corpus == name] for name in corpora}
    after["pooled"] = loco["decisions"]
    after.update({name: [cs.replay(q, every["weights"], chosen, margin) for q in qs] for name, qs in apart.items()})
    before = {name: [cs.as_recorded(q) for q in qs] for name, qs in corpora.items()}
    before["pooled"] = [d for name in corpora for d in before[name]]
    before.update({name: [cs.as_recorded(q) for q in qs] for name, qs in apart.items()})
    report: dict = {"commit": commit(), "target_precision": args.target, "folds": loco["folds"],
                    "corpora": {name: {"batches": [str(f) for f, _, _ in groups[name]], "questions": len(qs),
                                       "held_apart": name in apart}
                                for name, qs in loaded.items()}}
    for label, table in (("before", before), ("after", after)):
        figs = {name: cs.figures(ds) for name, ds in table.items()}
        ivs = {name: cs.bootstrap(ds) for name, ds in table.items()}
        report[label] = {name: {"figures": figs[name], "intervals": ivs[name]} for name in table}
        print(f"\n## {label}: " + ("as recorded (engine defaults, empty memory)" if label == "before" else
                                   f"leave-one-corpus-out fits, bar chosen for precision {args.target}"
                                   + (f"; {', '.join(apart)} held apart, decided by the fit on all the others"
                                      if apart else "")))
        print(cs.summary_table(figs, ivs))
    hold, right = sources_hold_gold([run for runs in groups.values() for _, run, _ in runs
                                     if (run / "results.jsonl").is_file()])
    report["sources_hold_gold"] = {"right_answers": right, "sources_hold_gold": hold}
    print(f"\nright answers (as recorded) whose shown sources hold a gold answer: {hold} of {right}")
    report["curve"] = loco["curve"]
    report["chosen_bar"] = chosen
    pooled_before = report["before"]["pooled"]["figures"]
    plot(args.out / "risk_coverage.png",
         [{"coverage": pooled_before["n_returned"] / pooled_before["n"], "precision": pooled_before["precision"]}],
         loco["curve"], chosen, args.target)
    (args.out / "coldstart.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print(f"\nheld-out bar for precision {args.target}: {chosen:.3f}; per fold: "
          + ", ".join(f"{k} {v['bar']:.3f}" for k, v in loco["folds"].items()))
    print(f"wrote {args.out / 'coldstart.json'} and {args.out / 'risk_coverage.png'}")
    if args.ship:
        model = {"weights": every["weights"], "model": every["model"], "l2": every["l2"], "curve": loco["curve"],
                 "reliability": cs.held_out_reliability(corpora, loco["held_out_weights"]),
                 "provenance": {"commit": report["commit"], "labelled_attempts": every["n_labels"],
                                "corpora": report["corpora"],
                                "held_out": {k: report["after"]["pooled"]["figures"][k]
                                             for k in ("precision", "answered_right", "unanswerable_refused",
                                                       "ece", "auroc", "n")},
                                "target_precision": args.target, "command": "python benchmarks/coldstart.py "
                                + " ".join(str(b) for b in args.batch) + " --ship"}}
        args.ship.write_text(json.dumps(model, indent=1), encoding="utf-8")
        print(f"wrote the shipped confidence model to {args.ship}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
