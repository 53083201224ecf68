"""Does memory make the next choices better? Cold memory against memory warmed on other questions.

The question stream is the second part of a dataset (from --split). With --run:

1. warm-up: the first part (disjoint questions) runs with a memory store that starts empty;
   at the end, as after any `sirag eval`, its gold labels are written to that memory;
2. warm: the stream runs with a copy of that memory (outcomes, attempts and labels);
3. cold: the stream runs with a memory store that starts empty.

Warm and cold use the same code and configuration; the engine is deterministic at temperature
0, so the differences come from what memory told the engine: the policy's first strategy per
query class and order of repairs per failure type, and, once the warm store holds enough gold
labels (`calibration.auto_fit`: 50 labelled answers, so SQuAD's halves of 104 questions but
not a split of literaryqa_dev's 86), the confidence weights fitted on them before the warm run,
which decide whether an answer passes or is refused. `--set calibration.auto_fit=false`
measures the strategy choices alone. Both keep learning as the
stream goes on.

    python benchmarks/learning.py --run --batch configs/batch-literaryqa-dev.yaml --split 43
    python benchmarks/learning.py --warm RUN_DIR --cold RUN_DIR     # figures of existing runs
    python benchmarks/learning.py --run --batch ... --split 43 --tag s4   # new code, same warm-up
    python benchmarks/learning.py --run --batch ... --split 43 --tag s5 --new-warmup   # new code throughout

With --two-way the roles are also swapped, so twice as many questions are measured: the first
part runs again with a copy of the cold stream run's memory (memory warmed on the second part),
and its cold counterpart is the warm-up run itself (that part from empty memory). The report
then has the figures of each direction and of both pooled (``pooled``): one direction of 43
questions moves by 2.3 points per question, which is about the size of the target.

    python benchmarks/learning.py --run --two-way --batch configs/batch-literaryqa-dev.yaml --split 43 --tag s13

With --interleave the questions are split alternately (the 1st, 3rd, 5th ... are the first part,
the 2nd, 4th ... the stream) instead of at --split: LiteraryQA's file is ordered by book, so its
first 43 questions ask about two books and the last 43 about two others, one shared; alternate
questions ask about the same documents, as a user's own questions do. The parts are written as
JSONL files under runs/ and the runs get "-il" in their names.

    python benchmarks/learning.py --run --two-way --interleave --batch configs/batch-literaryqa-dev.yaml --tag s14

With --pair WARM_DIR COLD_DIR (repeatable) it compares runs made otherwise, e.g. `sirag eval`
runs of one part with a fresh store and with a copy of another run's store:

    python benchmarks/learning.py --pair runs/squad-s15B-warm runs/squad-s15B --pair runs/squad-s15A-warm runs/squad-s15A

Figures on the stream, per condition: first-attempt success (the first attempt passes every
check), first attempt correct (graded against gold, as the loop-off engine would answer),
attempts per question, final share answered correctly or rightly refused, and which first
strategies were used. Written to benchmarks/results/learning.json.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from common import REPO, need_shared, report


def _rows(run_dir: Path) -> dict[str, dict]:
    from self_improving_rag.batch import read_done

    path = run_dir / "results.jsonl"
    if not path.is_file():
        sys.exit(f"error: {path} not found; run with --run, or pass the run folders with --warm/--cold")
    return read_done(path)


def condition(rows: list[dict], threshold: float) -> dict:
    from self_improving_rag.batch import grade, single_attempt_row

    n = len(rows)
    taken = [r for r in rows if "error" not in r]
    first_ok = sum(1 for r in rows if r["attempts"] and r["attempts"][0]["failure"] == "NONE")
    first_correct = sum(1 for r in rows if grade(single_attempt_row(r, threshold)).get("correct"))
    final_correct = sum(1 for r in rows if grade(r).get("correct"))
    strategies = Counter(r["attempts"][0]["strategy_key"] for r in rows if r["attempts"])
    return {
        "n": n,
        "first_attempt_success": first_ok / len(taken) if taken else None,
        "first_attempt_correct": first_correct / n,
        # Per question the engine took, as summary.json counts them: error rows have no attempts.
        "attempts_per_question": (sum(len(r["attempts"]) for r in taken) / len(taken)) if taken else None,
        "prompt_tokens_per_question": (sum(sum(a["prompt_tokens"] for a in r["attempts"]) for r in taken) / len(taken)
                                       if taken else None),
        "correct_or_rightly_refused": final_correct / n,
        "first_strategies": dict(strategies.most_common()),
    }


def _copy_db(src_path: Path, dst_path: Path) -> None:
    """A consistent copy of a memory store, WAL included."""
    import sqlite3

    src, dst = sqlite3.connect(src_path), sqlite3.connect(dst_path)
    with dst:
        src.backup(dst)
    src.close()
    dst.close()


def _compare(cold_rows: list[dict], warm_rows: list[dict], threshold: float, **extra) -> dict:
    """Cold and warm figures of the same questions, and warm − cold for the main ones."""
    out = {**extra, "stream_questions": len(cold_rows), "cold": condition(cold_rows, threshold),
           "warm": condition(warm_rows, threshold)}
    for k in ("first_attempt_success", "first_attempt_correct", "attempts_per_question", "correct_or_rightly_refused"):
        cold, warm = out["cold"][k], out["warm"][k]
        out[f"delta_{k}"] = None if cold is None or warm is None else warm - cold
    return out


def _interleaved(spec, base: Path, out: Path):
    """Two batch specs over alternate questions of the spec's JSONL file, and their items."""
    from self_improving_rag.batch import load_items
    from self_improving_rag.batch.spec import resolve_path

    if not spec.questions.file or not spec.questions.file.endswith(".jsonl"):
        sys.exit("error: --interleave needs a batch whose questions are a JSONL file")
    lines = [ln for ln in resolve_path(base, spec.questions.file).read_text(encoding="utf-8").splitlines() if ln.strip()]
    specs, parts = [], []
    for k in (0, 1):
        path = out / f"{spec.name}-il-part{k + 1}.jsonl"
        text = "".join(ln + "\n" for ln in lines[k::2])
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        part = spec.model_copy(update={"questions": spec.questions.model_copy(update={"file": str(path)})})
        specs.append(part)
        parts.append(load_items(part, base))
    return specs, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", default=str(REPO / "configs" / "batch-squad-normans.yaml"))
    ap.add_argument("--split", type=int, default=104, help="questions before the stream (the warm-up part)")
    ap.add_argument("--warm", help="run folder of a whole-dataset run that started with empty memory")
    ap.add_argument("--cold", help="run folder of the stream run with empty memory")
    ap.add_argument("--run", action="store_true", help="run both conditions first (resumable)")
    ap.add_argument("--threshold", type=float, default=0.5, help="loop.answer_threshold of the runs")
    ap.add_argument("--tag", default="", help="suffix for the warm and cold runs and their memories, to measure "
                    "new code on the same warm-up (the warm-up run and its memory are reused when complete)")
    ap.add_argument("--new-warmup", action="store_true", help="with --tag: run the warm-up again at the current "
                    "code (its run and memory get the tag too) instead of reusing the untagged one")
    ap.add_argument("--two-way", action="store_true", help="also run the first part warmed on the cold stream's "
                    "memory, and report both directions pooled")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (e.g. policy.method=greedy); use a new --tag with it")
    ap.add_argument("--interleave", action="store_true", help="alternate questions form the two parts "
                    "(a JSONL question file only); --split is ignored")
    ap.add_argument("--pair", nargs=2, action="append", metavar=("WARM_DIR", "COLD_DIR"),
                    help="compare existing runs instead: a warm run and a cold run of the same questions (each "
                    "compared on the questions both hold); repeat for more pairs, which are then also pooled")
    args = ap.parse_args()
    if args.pair:
        if args.run or args.warm or args.cold:
            ap.error("--pair compares existing runs; it does not go with --run, --warm or --cold")
        pairs = []
        for warm_dir, cold_dir in args.pair:
            warm, cold = _rows(Path(warm_dir)), _rows(Path(cold_dir))
            ids = [i for i in cold if i in warm]
            if not ids:
                sys.exit(f"error: {warm_dir} and {cold_dir} share no question")
            pairs.append((warm_dir, cold_dir, [cold[i] for i in ids], [warm[i] for i in ids]))
        figures = {"pairs": [_compare(c, w, args.threshold, warm_run=wd, cold_run=cd) for wd, cd, c, w in pairs]}
        if len(pairs) > 1:
            figures["pooled"] = _compare([r for p in pairs for r in p[2]], [r for p in pairs for r in p[3]],
                                         args.threshold)
        report("learning", figures)
        return
    if args.new_warmup and not args.tag:
        ap.error("--new-warmup needs --tag, so the new warm-up does not overwrite the old one")
    need_shared()
    from self_improving_rag.batch import load_batch, load_items

    spec, base = load_batch(args.batch)
    items = load_items(spec, base)
    out = REPO / "runs"
    if args.interleave:
        specs, parts = _interleaved(spec, base, out)
        spec = spec.model_copy(update={"name": f"{spec.name}-il"})
        args.split = len(parts[0])
        items = parts[0] + parts[1]
    else:
        specs = (spec, spec)
    stream = [it.id for it in items[args.split:]]
    tag = f"-{args.tag}" if args.tag else ""
    warm_dir = Path(args.warm) if args.warm else out / f"{spec.name}-learn-warm{tag}"
    cold_dir = Path(args.cold) if args.cold else out / f"{spec.name}-learn-cold{tag}"
    if args.run:
        from self_improving_rag.batch import run_batch
        from self_improving_rag.config import load_config

        def run(name: str, db: Path, part: int) -> None:
            cfg = load_config(None, [*args.overrides, f"paths.memory_db={db}"])
            offset, limit = ((0, None) if args.interleave else (0, args.split) if part == 0 else (args.split, None))
            run_batch(specs[part].model_copy(update={"name": name, "output_dir": str(out), "limit": limit}), base, cfg,
                      offset=offset, progress=sys.stderr.isatty())

        wtag = tag if args.new_warmup else ""
        warmup_db, warm_db = out / f"mem-{spec.name}-learn-warmup{wtag}.db", out / f"mem-{spec.name}-learn-warm{tag}.db"
        run(f"{spec.name}-learn-warmup{wtag}", warmup_db, 0)
        if not warm_db.exists():  # a resumed run keeps the warm memory it has
            _copy_db(warmup_db, warm_db)
        run(warm_dir.name, warm_db, 1)
        run(cold_dir.name, out / f"mem-{spec.name}-learn-cold{tag}.db", 1)
        if args.two_way:
            back_db = out / f"mem-{spec.name}-learn-warmback{tag}.db"
            if not back_db.exists():
                _copy_db(out / f"mem-{spec.name}-learn-cold{tag}.db", back_db)
            run(f"{spec.name}-learn-warmback{tag}", back_db, 0)
    warm, cold = _rows(warm_dir), _rows(cold_dir)
    ids = [i for i in stream if i in warm and i in cold]
    if not ids:
        sys.exit("error: the two runs share no question of the stream; check --split and the run folders")
    cold_rows, warm_rows = [cold[i] for i in ids], [warm[i] for i in ids]
    figures = {"dataset": spec.questions.file, "split": args.split,
               **_compare(cold_rows, warm_rows, args.threshold, warm_run=str(warm_dir), cold_run=str(cold_dir))}
    if args.two_way:
        wtag = tag if args.new_warmup else ""
        back_dir, front_dir = out / f"{spec.name}-learn-warmback{tag}", out / f"{spec.name}-learn-warmup{wtag}"
        back, front = _rows(back_dir), _rows(front_dir)
        first = [i for i in (it.id for it in items[:args.split]) if i in back and i in front]
        if not first:
            sys.exit(f"error: {back_dir} and {front_dir} share no question of the first part; run with --run --two-way")
        front_rows, back_rows = [front[i] for i in first], [back[i] for i in first]
        figures["back"] = _compare(front_rows, back_rows, args.threshold, warm_run=str(back_dir),
                                   cold_run=str(front_dir))
        figures["pooled"] = _compare(cold_rows + front_rows, warm_rows + back_rows, args.threshold)
    report("learning", figures)


if __name__ == "__main__":
    main()
