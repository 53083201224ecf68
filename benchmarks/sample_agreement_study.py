"""Does the model's agreement with itself tell a right answer from a wrong one?

`--run` runs `sirag eval` (any batch file, any `--set`) with the llama.cpp generator
instrumented: after the greedy reply to every answer prompt it draws `--samples` more replies at
`--temperature` (from the 64 likeliest tokens at each step; the prompt's KV cache is reused, so
each costs its own tokens only) and appends them to `sample_traces.jsonl` in the run's folder.
The engine never sees them: the run's answers and grades are those of a plain run.

`--analyse RUN_DIR...` grades every attempt that gave an answer (also those the engine withheld)
against gold, joins it with its samples and prints, for each candidate feature, its AUROC for
"the answer is correct" alone and added to the confidence model's features (logistic regression,
5 folds grouped by question, ten seeds), and what the samples cost beside generation.

  python benchmarks/sample_agreement_study.py --run configs/batch-squad-normans.yaml \
      --name study-squad-A --limit 104 --memory runs/mem-study-squad-A.db
  python benchmarks/sample_agreement_study.py --analyse runs/study-squad-A runs/study-squad-B

Features (a reply is compared with citations, punctuation and articles removed; two replies
agree when one's words contain the other's, or their token F1 is at least 0.5):
  agree        share of samples that agree with the greedy answer
  clusters     distinct answers among the greedy one and the samples (refusals and empty
               replies not counted)
  sem_entropy  entropy of the samples' answer groups (refusals one group, empty replies one)
  refuse_share share of samples that decline

`--fit RUN_DIR...` reads runs made with the engine's own feature (`sirag eval ... --set
scoring.agreement_samples=4`; the setting and its sampling were removed since, so such
runs come from an older checkout): every attempt that gave an answer, graded against gold
with its stored features, cross-fitted by the project's `cross_fit` (penalty chosen in each fold,
5 folds grouped by question, five seeds; for the first seed also AUROC's 95% interval over the
questions) with and without `agreement`, and what the draws cost beside the generator. Runs
joined with "+" are pooled, a question's answers from every run in one fold (as `--analyse`
pools its runs). On runs made without the feature the two fits give the same figures:

  python benchmarks/sample_agreement_study.py --fit runs/squad-s29-A+runs/squad-s29-B runs/sherlock-s29

`--transfer TRAIN TEST` fits the confidence weights on one set of runs and measures them on
another (each a RUN_DIR or runs joined with "+"): the penalty chosen on TRAIN's labels alone
(`choose_l2`, folds grouped by question), the fit made on all of them, and TEST's answers scored
by it and by the default weights, with AUROC's 95% interval over TEST's questions. With TRAIN a
run of other questions over the same documents, this is "after calibration, fit on one part,
measured on the other" with no TEST label in the fit:

  python benchmarks/sample_agreement_study.py --transfer runs/holmes-extra runs/sherlock-s30 --exclude xpg3289_08

(`--exclude ID,...` leaves questions out of both sets: xpg3289_08 was taken out of
data/qa/holmes_extra.jsonl after an earlier run for sharing a passage with sherlock_dev's d020.)
Besides the default weights and the full refit it scores the scaled model (the default
score's slope and shift fitted) and names the model `auto` would store.

`--pooled TRAIN TEST` cross-fits TEST by question (5 folds, seeds 0-2), each fold scored by a fit on
all of TRAIN and TEST's other folds, so the fit holds labels of TEST's own kind; it also says how
often a perfectly calibrated confidence would show ECE <= 0.08 on TEST's answers:

  python benchmarks/sample_agreement_study.py --pooled runs/holmes-extra runs/sherlock --exclude xpg3289_08

`--halves RUN_DIR` measures as `--transfer` does, within one run: its questions with an answer, in the order of its
results file and without those `--exclude` names, are dealt into two halves (1st, 3rd, ... and
2nd, 4th, ...); each half is fitted and the other measured:

  python benchmarks/sample_agreement_study.py --halves runs/holmes-extra-s31 --exclude xpg3289_08

Not part of `make bench`: it needs the 1.5B generator for as long as the evaluation takes.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRACE_NAME = "sample_traces.jsonl"
ANSWER_SYSTEMS = ("You answer questions", "You are a careful")  # the answer prompts' system messages
TOP = 64


def _instrument(trace_path: Path, samples: int, temperature: float, limit: int, seed: int) -> None:
    """Make every LlamaCppGenerator.generate call for an answer prompt also draw ``samples``
    replies and append them, with the greedy one, to ``trace_path``."""
    from self_improving_rag.generation import llamacpp

    cls = llamacpp.LlamaCppGenerator
    original_generate = cls.generate
    rng = np.random.default_rng(seed)

    def generate(self, messages, max_tokens=None, on_token=None, read=None):
        gen = original_generate(self, messages, max_tokens=max_tokens, on_token=on_token, read=read)
        system = messages[0]["content"] if messages else ""
        if not system.startswith(ANSWER_SYSTEMS):
            return gen
        user = messages[-1]["content"]
        question = user.rsplit("Question:", 1)[-1].split("\n", 1)[0].strip() if "Question:" in user else None
        llm = self._llm
        tokens = self.tokenize(self.format(messages))
        vocab = llm._model.vocab
        drawn = []
        t0 = time.perf_counter()
        for _ in range(samples):
            self._prefill(tokens)  # the whole prompt but its last token is cached
            ids: list[int] = []
            for _ in range(limit):
                logits = self._logits()
                top = np.argpartition(-logits, TOP)[:TOP]
                z = logits[top] / temperature
                p = np.exp(z - np.logaddexp.reduce(z))
                tok = int(top[rng.choice(TOP, p=p / p.sum())])
                if self._llama_cpp.llama_vocab_is_eog(vocab, tok):
                    break
                ids.append(tok)
                llm.eval([tok])
            drawn.append(codecs.getincrementaldecoder("utf-8")(errors="replace").decode(llm.detokenize(ids)).strip())
        row = {"question": question, "text": gen.text, "samples": drawn,
               "sample_ms": (time.perf_counter() - t0) * 1000,
               "generator_ms": gen.timings_ms["prompt"] + gen.timings_ms["generate"]}
        with trace_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        return gen

    cls.generate = generate


def run(argv: list[str], name: str, samples: int, temperature: float, max_tokens: int, seed: int) -> int:
    from self_improving_rag.cli import main

    out = REPO / "runs" / name
    out.mkdir(parents=True, exist_ok=True)
    _instrument(out / TRACE_NAME, samples, temperature, max_tokens, seed)
    return main(["eval", *argv, "--name", name, "--output-dir", str(REPO / "runs")])


# -- analysis ---------------------------------------------------------------------------------

def _words(text: str) -> list[str]:
    from self_improving_rag.text import strip_citations

    text = re.sub(r"\[[^\]]*\]?", " ", strip_citations(text or "").lower())
    return [w for w in re.findall(r"[a-z0-9]+", text) if w not in {"a", "an", "the"}]


def _declines(text: str) -> bool:
    return "cannot answer" in (text or "").lower()


def _agree(a: list[str], b: list[str]) -> bool:
    from self_improving_rag.evaluation.answer_metrics import token_f1

    if not a or not b:
        return False
    sa, sb = " ".join(a), " ".join(b)
    return sa in sb or sb in sa or token_f1(sa, [sb]) >= 0.5


def sample_features(greedy: str, samples: list[str]) -> dict[str, float]:
    g = _words(greedy)
    replies = [(None if _declines(s) else _words(s)) for s in samples]  # None: declined
    answers = [r for r in replies if r]
    groups: list[list[str]] = [g]
    for r in answers:
        if not any(_agree(r, c) for c in groups):
            groups.append(r)
    counts: list[int] = []  # the samples' own groups, refusals and empty replies one each
    reps: list = []
    for r in replies:
        key = "declined" if r is None else ("empty" if not r else None)
        at = next((j for j, c in enumerate(reps)
                   if (key is not None and c == key) or (key is None and not isinstance(c, str) and _agree(r, c))), None)
        if at is None:
            reps.append(key if key is not None else r)
            counts.append(1)
        else:
            counts[at] += 1
    p = np.array(counts, float) / max(1, len(samples))
    return {"agree": sum(_agree(g, r) for r in answers) / max(1, len(samples)),
            "clusters": float(len(groups)),
            "sem_entropy": float(-(p * np.log(p)).sum()) if len(p) else 0.0,
            "refuse_share": sum(r is None for r in replies) / max(1, len(samples))}


def _graded_attempts(run_dir: Path) -> list[dict]:
    from self_improving_rag.batch import grade
    from self_improving_rag.confidence import answer_words

    from self_improving_rag.text import strip_citations

    traces: dict[tuple, dict] = {}
    rows_read = [json.loads(line) for line in (run_dir / TRACE_NAME).read_text(encoding="utf-8").splitlines()]
    for t in rows_read:
        traces.setdefault((t["question"], t["text"]), t)
    for t in rows_read:  # then the reply without citations, for an answer whose unknown citations were taken out
        traces.setdefault((t["question"], strip_citations(t["text"])), t)
    results = run_dir / "results.jsonl"
    if not results.exists():  # the loop off: the run is <name>-noloop, its traces under <name>
        results = run_dir.with_name(run_dir.name + "-noloop") / "results.jsonl"
    rows, unmatched = [], 0
    for line in results.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("answerable") is None or "error" in r:
            continue
        for att in r["attempts"]:
            answer = att.get("answer")
            if not answer or _declines(answer):
                continue
            y = grade({"answerable": r["answerable"], "gold_answers": r["gold_answers"], "answer": answer,
                       "refused": False}).get("correct")
            trace = traces.get((r["question"], answer))
            if y is None:
                continue
            if trace is None:
                unmatched += 1
                continue
            conf = att["signals"].get("confidence") or {}
            feats = dict((conf.get("detail") or {}).get("features") or {})
            feats["answer_words"] = answer_words(answer)
            rows.append({**feats, **sample_features(answer, trace["samples"]), "y": int(y),
                         "group": r["id"], "confidence": conf.get("value"),
                         "cost": trace["sample_ms"] / max(1.0, trace["generator_ms"]),
                         "returned": att["number"] == r.get("chosen_attempt") and not r["refused"]})
    if unmatched:
        print(f"{run_dir.name}: {unmatched} graded answer(s) without samples, left out", file=sys.stderr)
    return rows


def _grouped_cv_auroc(X: np.ndarray, y: np.ndarray, groups: list[str], seeds: int = 10) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    names = sorted(set(groups))
    out = []
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(names))
        fold_of = {names[i]: k % 5 for k, i in enumerate(order)}
        fold = np.array([fold_of[g] for g in groups])
        p = np.zeros(len(y))
        for f in range(5):
            tr, te = fold != f, fold == f
            sc = StandardScaler().fit(X[tr])
            model = LogisticRegression(max_iter=2000).fit(sc.transform(X[tr]), y[tr])
            p[te] = model.predict_proba(sc.transform(X[te]))[:, 1]
        out.append(roc_auc_score(y, p))
    return float(np.mean(out)), float(np.std(out))


def analyse(run_dirs: list[Path]) -> None:
    from self_improving_rag.confidence import _feature_vector
    from self_improving_rag.evaluation.confidence_metrics import auroc

    rows = [row for d in run_dirs for row in _graded_attempts(d)]
    for label, sel in (("every answer given", rows), ("answers returned", [r for r in rows if r["returned"]])):
        y = np.array([r["y"] for r in sel])
        if len(sel) < 20 or len(set(y)) < 2:
            print(f"{label}: {len(sel)} answers, too few to study")
            continue
        print(f"\n== {label}: {len(sel)} answers, {int(y.sum())} right")
        for name in ("confidence", "agree", "clusters", "sem_entropy", "refuse_share"):
            print(f"  {name:14s} alone: AUROC {auroc([r[name] for r in sel], list(y)):.3f}")
        base = np.vstack([_feature_vector(r)[1:] for r in sel])
        groups = [r["group"] for r in sel]
        m, s = _grouped_cv_auroc(base, y, groups)
        print(f"  the confidence features:        {m:.3f} ± {s:.3f}")
        for extra in (["agree"], ["clusters"], ["sem_entropy"], ["agree", "clusters"]):
            x = np.column_stack([base] + [np.array([r[e] for r in sel], float) for e in extra])
            m, s = _grouped_cv_auroc(x, y, groups)
            print(f"  + {'+'.join(extra):28s} {m:.3f} ± {s:.3f}")
        print(f"  samples' cost: median {100 * float(np.median([r['cost'] for r in sel])):.0f}% of the generator's time")


def _stored_attempts(run_dir: Path) -> list[dict]:
    """Every attempt of a run that gave an answer, graded, with the features the engine stored."""
    from self_improving_rag.batch import grade

    rows = []
    for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("answerable") is None or "error" in r:
            continue
        for att in r["attempts"]:
            answer = att.get("answer")
            if not answer:
                continue
            y = grade({"answerable": r["answerable"], "gold_answers": r["gold_answers"], "answer": answer,
                       "refused": False}).get("correct")
            if y is None:
                continue
            conf = att["signals"].get("confidence") or {}
            detail = conf.get("detail") or {}
            timings = att.get("timings_ms") or {}
            # Grouped by question alone: runs of the same questions pooled ("+") keep a question's
            # answers from every run in one fold, so none is fitted and scored at once.
            rows.append({**(detail.get("features") or {}), "y": int(y), "group": r["id"],
                         "confidence": conf.get("value"), "draws_ms": (detail.get("agreement") or {}).get("ms"),
                         "generate_ms": timings.get("generate"),
                         "returned": att["number"] == r.get("chosen_attempt") and not r["refused"]})
    return rows


def fit(specs: list[str], seeds: int = 5) -> None:
    from self_improving_rag.evaluation.crossfit import cross_fit
    from self_improving_rag.evaluation.confidence_metrics import auroc

    def cross(rows: list[dict], without: bool) -> str:
        use = [{**r, "agreement": None} if without else r for r in rows]
        y, groups = [r["y"] for r in rows], [r["group"] for r in rows]
        res = [cross_fit(use, y, seed=s, l2="auto", folds=5, groups=groups, interval=s == 0)["after"]
               for s in range(seeds)]
        a = [x["auroc"] for x in res]
        iv = res[0]["auroc_interval"] or {}
        return (f"AUROC {np.mean(a):.3f} ± {np.std(a):.3f} (seed 0: {res[0]['auroc']:.3f}, 95% interval over "
                f"questions {iv.get('low', float('nan')):.3f}–{iv.get('high', float('nan')):.3f}), "
                f"ECE {np.mean([x['ece'] for x in res]):.3f} "
                f"(floor {res[0]['ece_floor']:.3f}), Brier {np.mean([x['brier'] for x in res]):.3f}")

    for spec in specs:
        rows = [row for d in spec.split("+") for row in _stored_attempts(Path(d))]
        for label, sel in (("every answer given", rows), ("answers returned", [r for r in rows if r["returned"]])):
            y = [r["y"] for r in sel]
            print(f"\n== {spec}, {label}: {len(sel)} answers, {sum(y)} right, "
                  f"{sum(r.get('agreement') is not None for r in sel)} with agreement")
            if len(sel) < 20 or len(set(y)) < 2:
                print("  too few to fit")
                continue
            alone = [0.5 if r.get("agreement") is None else r["agreement"] for r in sel]  # None: neutral
            print(f"  agreement alone: AUROC {auroc(alone, y):.3f}; "
                  f"the engine's confidence alone: {auroc([r['confidence'] for r in sel], y):.3f}")
            print(f"  fitted without agreement: {cross(sel, True)}")
            print(f"  fitted with agreement:    {cross(sel, False)}")
        share = [r["draws_ms"] / r["generate_ms"] for r in rows if r["draws_ms"] is not None and r["generate_ms"]]
        if share:
            print(f"  draws: median {100 * float(np.median(share)):.1f}% of the generator's time, "
                  f"p90 {100 * float(np.percentile(share, 90)):.1f}%")


def _load_runs(spec: str, exclude: frozenset[str], option: str) -> list[dict]:
    for d in spec.split("+"):
        if not (Path(d) / "results.jsonl").is_file():
            sys.exit(f"{option}: {d} holds no results.jsonl; give run folders (RUN_DIR, or RUN_DIR+RUN_DIR)")
    return [{**row, "agreement": None} for d in spec.split("+") for row in _stored_attempts(Path(d))
            if row["group"] not in exclude]


def _measure(train_all: list[dict], test_all: list[dict], train_name: str, test_name: str) -> None:
    """Fit on ``train_all``'s labels, score ``test_all``: the default weights, the full refit
    (penalty chosen on the training labels), the scaled model, and the one the model
    "auto" would store (chosen on the training labels alone)."""
    from self_improving_rag.evaluation.crossfit import choose_l2, choose_model
    from self_improving_rag.evaluation.fit_scores import evaluate_fit
    from self_improving_rag.evaluation.fitting import fit_scaled, fit_weights, scaled_params

    def line(res: dict) -> str:
        iv = res.get("auroc_interval") or {}
        return (f"AUROC {res['auroc']:.3f} (95% interval over questions {iv.get('low', float('nan')):.3f}–"
                f"{iv.get('high', float('nan')):.3f}), ECE {res['ece']:.3f} (floor {res['ece_floor']:.3f}), "
                f"Brier {res['brier']:.3f}")

    for label, keep in (("every answer given", lambda r: True), ("answers returned", lambda r: r["returned"])):
        train, test = [r for r in train_all if keep(r)], [r for r in test_all if keep(r)]
        y_tr, y_te = [r["y"] for r in train], [r["y"] for r in test]
        print(f"\n== {label}: fit on {train_name} ({len(train)} answers, {sum(y_tr)} right), "
              f"measured on {test_name} ({len(test)} answers, {sum(y_te)} right)")
        if len(train) < 20 or len(set(y_tr)) < 2 or len(set(y_te)) < 2:
            print("  too few to fit or to measure")
            continue
        groups_tr = [r["group"] for r in train]
        l2 = choose_l2(train, y_tr, groups=groups_tr)
        weights = fit_weights(train, y_tr, l2=l2)
        slope, shift = scaled_params(train, y_tr)
        groups_te = [r["group"] for r in test]
        print(f"  default weights:          {line(evaluate_fit(test, y_te, None, groups=groups_te))}")
        print(f"  full refit (l2 {l2:g}):{' ' * max(1, 9 - len(f'{l2:g}'))}"
              f"{line(evaluate_fit(test, y_te, weights, groups=groups_te))}")
        print(f"  scaled ({slope:.2f}, {shift:+.2f}):{' ' * max(1, 8 - len(f'{slope:.2f}{shift:+.2f}') + 5)}"
              f"{line(evaluate_fit(test, y_te, fit_scaled(train, y_tr), groups=groups_te))}")
        print(f"  the model auto (sirag's) stores: {choose_model(train, y_tr, groups_tr)}")
        print("  full refit's weights: " + ", ".join(f"{k} {v:+.2f}" for k, v in weights.items()))


def transfer(train_spec: str, test_spec: str, exclude: frozenset[str] = frozenset()) -> None:
    train_all, test_all = _load_runs(train_spec, exclude, "--transfer"), _load_runs(test_spec, exclude, "--transfer")
    shared = {r["group"] for r in train_all} & {r["group"] for r in test_all}
    if shared:
        sys.exit(f"--transfer: {len(shared)} question id(s) are in both sets (e.g. {sorted(shared)[0]}); "
                 "the test set must be held out")
    _measure(train_all, test_all, train_spec, test_spec)


def halves(spec: str, exclude: frozenset[str] = frozenset()) -> None:
    """Deal a run's questions, in the order its results file holds them, into two halves (1st,
    3rd, ... and 2nd, 4th, ...), fit on each and measure on the other, as :func:`transfer` does."""
    rows = _load_runs(spec, exclude, "--halves")
    order = list(dict.fromkeys(r["group"] for r in rows))
    odd = set(order[1::2])
    first, second = [r for r in rows if r["group"] not in odd], [r for r in rows if r["group"] in odd]
    _measure(first, second, f"{spec}, 1st/3rd/... questions", f"{spec}, 2nd/4th/... questions")
    _measure(second, first, f"{spec}, 2nd/4th/... questions", f"{spec}, 1st/3rd/... questions")


def pooled(train_spec: str, test_spec: str, exclude: frozenset[str] = frozenset(), seeds: int = 3) -> None:
    """TEST's questions dealt into 5 folds (grouped by question, balanced by label, seeded); each
    fold scored by a fit on all of TRAIN's labels and TEST's other folds, so every TEST label is
    held out once and the fit also holds labels of TEST's own kind; the models as ``--transfer``
    names them. Then how low an ECE a perfectly calibrated confidence would show on TEST's answers,
    and TEST alone cross-fitted (``cross_fit``, as ``sirag calibrate`` does)."""
    from self_improving_rag.confidence import _sigmoid, _weight_vector
    from self_improving_rag.evaluation.crossfit import _folds, choose_l2, choose_model_and_l2, cross_fit
    from self_improving_rag.evaluation.fit_scores import _scores
    from self_improving_rag.evaluation.fitting import _design, fit_model
    from self_improving_rag.evaluation.confidence_metrics import expected_calibration_error

    train_all, test_all = _load_runs(train_spec, exclude, "--pooled"), _load_runs(test_spec, exclude, "--pooled")
    shared = {r["group"] for r in train_all} & {r["group"] for r in test_all}
    if shared:
        sys.exit(f"--pooled: {len(shared)} question id(s) are in both sets (e.g. {sorted(shared)[0]})")

    def line(res: dict) -> str:
        iv = res.get("auroc_interval") or {}
        return (f"AUROC {res['auroc']:.3f} ({iv.get('low', float('nan')):.3f}–{iv.get('high', float('nan')):.3f}), "
                f"ECE {res['ece']:.3f} (floor {res['ece_floor']:.3f}), Brier {res['brier']:.3f}")

    for label, keep in (("every answer given", lambda r: True), ("answers returned", lambda r: r["returned"])):
        train, test = [r for r in train_all if keep(r)], [r for r in test_all if keep(r)]
        y_tr, y_te = [r["y"] for r in train], [r["y"] for r in test]
        g_te = [r["group"] for r in test]
        print(f"\n== {label}: {test_spec} ({len(test)} answers, {sum(y_te)} right) held out by fold; "
              f"{train_spec} ({len(train)} answers, {sum(y_tr)} right) always fitted on")
        if len(set(y_tr + y_te)) < 2 or len(set(y_te)) < 2 or len(set(g_te)) < 5:
            print("  too few to fit or to measure")
            continue
        X, y = _design(test, y_te)
        for model in ("auto", "full", "scaled"):
            res, chosen = [], []
            for seed in range(seeds):
                fold = _folds(y, g_te, 5, seed)
                p = np.zeros(len(test))
                for f in range(int(fold.max()) + 1):
                    tr_rows = train + [test[i] for i in np.flatnonzero(fold != f)]
                    tr_y = [r["y"] for r in tr_rows]
                    tr_g = [r["group"] for r in tr_rows]
                    if model == "auto":
                        m, l2 = choose_model_and_l2(tr_rows, tr_y, tr_g, 5, seed, "auto")
                    elif model == "full":
                        m, l2 = "full", choose_l2(tr_rows, tr_y, groups=tr_g, seed=seed)
                    else:
                        m, l2 = "scaled", None
                    chosen.append(m)
                    w = fit_model(tr_rows, tr_y, m, l2)
                    held = fold == f
                    p[held] = _sigmoid(X[held] @ _weight_vector(w))
                res.append(_scores(p, y, g_te if seed == 0 else None))
                if model == "auto" and seed == 0:
                    kept = p.copy()
            print(f"  {model:6s}: AUROC {np.mean([r['auroc'] for r in res]):.3f}, "
                  f"ECE {np.mean([r['ece'] for r in res]):.3f}, Brier {np.mean([r['brier'] for r in res]):.3f} "
                  f"(seed 0: {line(res[0])}); folds scaled {chosen.count('scaled')} of {len(chosen)}")
        # How low an ECE these answers could show: labels drawn as the held-out auto confidences say
        # (a perfectly calibrated confidence), 4000 times.
        rng = np.random.default_rng(0)
        draws = np.array([expected_calibration_error(kept.tolist(), (rng.random(kept.size) < kept).astype(int).tolist())
                          for _ in range(4000)])
        print(f"  a perfectly calibrated confidence at auto's held-out values shows ECE {np.median(draws):.3f} "
              f"(median); ECE <= 0.08 in {np.mean(draws <= 0.08):.1%} of 4000 draws")
        alone = [cross_fit(test, y_te, seed=s, l2="auto", folds=5, groups=g_te, model="auto",
                           interval=s == 0) for s in range(seeds)]
        print(f"  TEST alone, auto: AUROC {np.mean([a['after']['auroc'] for a in alone]):.3f}, "
              f"ECE {np.mean([a['after']['ece'] for a in alone]):.3f}, "
              f"Brier {np.mean([a['after']['brier'] for a in alone]):.3f}; default weights {line(alone[0]['before'])}")


def parse(argv: list[str] | None = None):
    from common import study_parser

    p = study_parser(__doc__, "samples traced")
    p.add_argument("--samples", type=int, default=6, help="replies drawn per answer prompt (default 6)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)")
    p.add_argument("--sample-tokens", type=int, default=32, help="longest sampled reply, in tokens (default 32)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fit", nargs="+", metavar="RUN_DIR", help="runs made with scoring.agreement_samples, a removed setting ('+' pools)")
    p.add_argument("--transfer", nargs=2, metavar=("TRAIN", "TEST"),
                   help="fit on the TRAIN runs, measure on the TEST runs ('+' pools)")
    p.add_argument("--halves", metavar="RUN_DIR",
                   help="fit on every other question of a run, measure on the rest, and the other way round")
    p.add_argument("--pooled", nargs=2, metavar=("TRAIN", "TEST"),
                   help="TEST cross-fitted by question, each fold fitted on all of TRAIN and TEST's other folds")
    p.add_argument("--exclude", default="", metavar="ID,ID",
                   help="with --transfer, --halves or --pooled: question ids left out")
    return p.parse_known_args(argv)


if __name__ == "__main__":
    args, rest = parse()
    if sum(map(bool, (args.transfer, args.halves, args.pooled))) > 1:
        sys.exit("give one of --transfer TRAIN TEST, --halves RUN_DIR and --pooled TRAIN TEST")
    if args.exclude and not (args.transfer or args.halves or args.pooled):
        sys.exit("--exclude goes with --transfer, --halves or --pooled")
    if args.run:
        if not args.name:
            sys.exit("--run needs --name")
        if any(a == "--workers" or a.startswith("--workers=") for a in rest):
            sys.exit("--workers: the samples are drawn in this process only; run the study without it")
        if args.samples < 1 or args.temperature <= 0 or args.sample_tokens < 1:
            sys.exit("--samples and --sample-tokens must be at least 1, --temperature above 0")
        sys.exit(run([args.run, *rest], args.name, args.samples, args.temperature, args.sample_tokens, args.seed))
    if args.analyse:
        analyse(args.analyse)
        sys.exit(0)
    if args.fit:
        fit(args.fit)
        sys.exit(0)
    if args.transfer:
        transfer(*args.transfer, exclude=frozenset(filter(None, args.exclude.split(","))))
        sys.exit(0)
    if args.halves:
        halves(args.halves, exclude=frozenset(filter(None, args.exclude.split(","))))
        sys.exit(0)
    if args.pooled:
        pooled(*args.pooled, exclude=frozenset(filter(None, args.exclude.split(","))))
        sys.exit(0)
    sys.exit("give --run BATCH --name NAME, --analyse RUN_DIR..., --fit RUN_DIR..., --transfer TRAIN TEST, "
             "--halves RUN_DIR or --pooled TRAIN TEST")
