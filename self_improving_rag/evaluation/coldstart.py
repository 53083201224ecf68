"""Cold-start, leave-one-corpus-out evaluation of the confidence model and its answer bar.

A new user has an empty memory store and documents the engine never saw. To measure what they
get, each corpus in turn is held out: a confidence model is fitted on the labelled attempts of
the *other* corpora only, its answer bar is chosen on those other corpora for the target
precision, and the held-out corpus's questions are then decided with that model and bar.

Answering hundreds of questions takes hours on a CPU, so each corpus's questions are answered
once (``sirag eval`` with ``loop.target_precision`` null, which records every attempt with the
features the confidence model reads) and each fold's model is applied to the recorded attempts.
The replay is exact, because the confidence model and its bar do not steer the loop: the loop
retries by its own confidence (the hand-set weights, or memory's fit) and bar
(``loop.answer_threshold``), and only the choice of what to return, among the attempts it made,
reads the shipped model (:func:`replay`, the engine's ``Engine._finish``, one rule:
:func:`~self_improving_rag.decision.acceptable`).

Memory's influence on the strategies is as recorded (each corpus was answered from an empty
store); the replay does not recompute it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from self_improving_rag import decision
from self_improving_rag.confidence import confidence
from self_improving_rag.evaluation.confidence_metrics import auroc, expected_calibration_error, reliability_bins
from self_improving_rag.evaluation.crossfit import choose_model_and_l2
from self_improving_rag.evaluation.fitting import fit_model
from self_improving_rag.evaluation.shipped import bar_for

#: The answer bars the curve is traced over.
BAR_GRID: tuple[float, ...] = tuple(round(0.3 + 0.01 * i, 2) for i in range(66))  # 0.30 .. 0.95


@dataclass(frozen=True)
class RecordedAttempt:
    """One attempt as a run recorded it: what the replay needs."""

    number: int
    answer: str | None
    failure: str
    features: dict[str, float | None]
    prompt_tokens: int
    seconds: float
    correct: bool | None  # graded against the gold answers; None for a declined attempt


@dataclass(frozen=True)
class RecordedQuestion:
    """One question of a corpus with its recorded attempts and how the recorded run ended."""

    corpus: str
    id: str
    kind: str  # answerable | unanswerable | adversarial (SQuAD 2.0's written-to-mislead ones)
    attempts: tuple[RecordedAttempt, ...]
    recorded: dict[str, Any] = field(default_factory=dict, compare=False)  # answered, correct, confidence

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


@dataclass(frozen=True)
class Decision:
    """What the engine does with one question under a confidence model and bar."""

    question: RecordedQuestion
    answered: bool
    correct: bool  # a right answer, or a refusal of an unanswerable question
    confidence: float  # of the answer returned; for a refusal, of the refusal
    prompt_tokens: int
    seconds: float


def _grade(answer: str | None, gold: Sequence[str], answerable: bool) -> bool | None:
    from self_improving_rag.batch import grade

    if answer is None:
        return None
    return bool(grade({"answer": answer, "gold_answers": list(gold), "answerable": answerable,
                       "refused": False}).get("correct"))


def load_run(run_dir: Path | str, corpus: str, adversarial: bool = False) -> list[RecordedQuestion]:
    """The questions of a finished ``sirag eval`` run folder (its ``results.jsonl``). Unanswerable
    questions are of kind ``adversarial`` when ``adversarial`` (SQuAD 2.0), else ``unanswerable``.
    Rows that failed with an error are left out."""
    path = Path(run_dir) / "results.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("error") or not row.get("attempts") or row.get("answerable") is None:
            continue
        gold, answerable = row.get("gold_answers") or [], bool(row["answerable"])
        attempts = tuple(
            RecordedAttempt(number=a["number"], answer=a.get("answer"), failure=a["failure"],
                            features=dict((a["signals"]["confidence"].get("detail") or {}).get("features") or {}),
                            prompt_tokens=int(a.get("prompt_tokens") or 0),
                            seconds=float((a.get("timings_ms") or {}).get("total") or 0.0) / 1000,
                            correct=_grade(a.get("answer"), gold, answerable))
            for a in row["attempts"])
        kind = "answerable" if answerable else "adversarial" if adversarial else "unanswerable"
        recorded = {"answered": not row["refused"], "correct": bool((row.get("grade") or {}).get("correct")),
                    "confidence": float(row.get("confidence") or 0.0),
                    "seconds": float((row.get("timings_ms") or {}).get("total") or 0.0) / 1000,
                    "prompt_tokens": sum(a.prompt_tokens for a in attempts)}
        out.append(RecordedQuestion(corpus=corpus, id=str(row["id"]), kind=kind, attempts=attempts, recorded=recorded))
    return out


def training_rows(questions: Iterable[RecordedQuestion]) -> tuple[list[dict], list[bool], list[str]]:
    """Every attempt that gave an answer, its features, whether it was right, and its question
    (attempts of one question are not independent: folds keep them together)."""
    rows, labels, groups = [], [], []
    for q in questions:
        for a in q.attempts:
            if a.answer is not None and a.correct is not None:
                rows.append(a.features)
                labels.append(a.correct)
                groups.append(f"{q.corpus}/{q.id}")
    return rows, labels, groups


def fit(questions: Sequence[RecordedQuestion], folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """A confidence model fitted on the questions' answered attempts: the model (``full`` or
    ``scaled``) and strength chosen by Brier score on corpora left out of the fit (questions left
    out when there is one corpus), as a new user's corpus is one the fit never saw."""
    rows, labels, groups = training_rows(questions)
    corpora = [g.split("/", 1)[0] for g in groups]
    if len(set(corpora)) > 1:
        groups, folds = corpora, min(folds, len(set(corpora)))
    model, l2 = choose_model_and_l2(rows, labels, groups, folds=folds, seed=seed, l2="auto")
    return {"model": model, "l2": l2, "weights": fit_model(rows, labels, model, l2), "n_labels": len(labels)}


def replay(q: RecordedQuestion, weights: Mapping[str, float] | None, bar: float, retry_margin: float) -> Decision:
    """The engine's decision for ``q`` had the answer to return been chosen with the confidence of
    ``weights`` and the bar ``bar``: the most confident acceptable attempt, or a refusal. Every
    recorded attempt is one the engine makes (see the module's docstring), so this is exact."""
    confs = [confidence(a.features, weights) for a in q.attempts]  # a declined attempt's hold refusal 1.0
    tokens = sum(a.prompt_tokens for a in q.attempts)
    seconds = sum(a.seconds for a in q.attempts)
    chosen = decision.returned([(a.answer, c, a.failure, a.number) for a, c in zip(q.attempts, confs)], bar,
                               retry_margin)
    if chosen is not None:
        return Decision(q, True, bool(q.attempts[chosen].correct) and q.answerable, confs[chosen], tokens, seconds)
    return Decision(q, False, not q.answerable, decision.refusal_confidence(max(confs)), tokens, seconds)


def as_recorded(q: RecordedQuestion) -> Decision:
    """The decision the recording run itself made (the engine as it was: the "before" figures)."""
    r = q.recorded
    return Decision(q, r["answered"], r["correct"], r["confidence"], r["prompt_tokens"], r["seconds"])


def figures(decisions: Sequence[Decision]) -> dict[str, float | None]:
    """The protocol's point figures for a set of decisions (None where undefined)."""
    ans = [d for d in decisions if d.question.answerable]
    unans = [d for d in decisions if d.question.kind == "unanswerable"]
    adv = [d for d in decisions if d.question.kind == "adversarial"]
    ret = [d for d in decisions if d.answered]

    def share(num: int, den: int) -> float | None:
        return num / den if den else None

    conf = [d.confidence for d in ret]
    right = [d.correct for d in ret]
    tokens = [d.prompt_tokens for d in decisions]
    secs = [d.seconds for d in decisions]
    return {
        "n": len(decisions), "n_answerable": len(ans), "n_unanswerable": len(unans), "n_adversarial": len(adv),
        "n_returned": len(ret),
        "precision": share(sum(right), len(ret)),
        "answered_right": share(sum(d.answered and d.correct for d in ans), len(ans)),
        "unanswerable_refused": share(sum(not d.answered for d in unans), len(unans)),
        "adversarial_refused": share(sum(not d.answered for d in adv), len(adv)),
        "false_refusals": share(sum(not d.answered for d in ans), len(ans)),
        "ece": expected_calibration_error(conf, right) if ret else None,
        "auroc": auroc(conf, right) if ret else None,
        "prompt_tokens": float(np.mean(tokens)) if tokens else None,
        "p50_s": float(np.percentile(secs, 50)) if secs else None,
        "p95_s": float(np.percentile(secs, 95)) if secs else None,
    }


def bootstrap(decisions: Sequence[Decision], draws: int = 1000, seed: int = 0) -> dict[str, tuple[float, float]]:
    """95% percentile intervals of :func:`figures`, resampling questions with replacement."""
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {}
    n = len(decisions)
    for _ in range(draws if n else 0):
        pick = [decisions[i] for i in rng.integers(0, n, n)]
        for k, v in figures(pick).items():
            if v is not None and not k.startswith("n"):
                samples.setdefault(k, []).append(float(v))
    return {k: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for k, v in samples.items()}


def curve(questions: Sequence[RecordedQuestion], weights_of: Mapping[str, Mapping[str, float] | None],
          retry_margin: float, grid: Sequence[float] = BAR_GRID) -> list[dict[str, float]]:
    """Precision of the answers returned and coverage (share of questions answered) at each bar
    of ``grid``; each question decided with its own corpus's weights (``weights_of[corpus]``)."""
    out = []
    for t in grid:
        ds = [replay(q, weights_of[q.corpus], t, retry_margin) for q in questions]
        ret = [d for d in ds if d.answered]
        out.append({"bar": t, "coverage": len(ret) / len(ds) if ds else 0.0,
                    "precision": (sum(d.correct for d in ret) / len(ret)) if ret else 1.0,
                    "answered_right": sum(d.correct for d in ret if d.question.answerable)
                    / max(1, sum(q.answerable for q in questions))})
    return out


def held_out_curve(corpora: Mapping[str, Sequence[RecordedQuestion]], retry_margin: float, folds: int = 5,
                   seed: int = 0) -> tuple[list[dict[str, float]], dict[str, dict[str, float]]]:
    """The curve of :func:`curve` with every corpus decided by a fit on the other corpora only, and
    those fits' weights by held-out corpus."""
    weights = {name: fit([q for other, qs in corpora.items() if other != name for q in qs],
                         folds=folds, seed=seed)["weights"] for name in corpora}
    return curve([q for qs in corpora.values() for q in qs], weights, retry_margin), weights


def leave_one_corpus_out(corpora: Mapping[str, Sequence[RecordedQuestion]], target: float, retry_margin: float,
                         folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """For each corpus: fit on the others, choose the bar for ``target`` on the others' own
    held-out curve (each scored by a fit without it, as the shipped bar is chosen), decide the
    corpus's questions. Returns each fold's fit, bar and decisions, and the held-out curve (every
    corpus decided by the fit that did not see it)."""
    out: dict[str, Any] = {"folds": {}, "decisions": []}
    for name, questions in corpora.items():
        train = {other: qs for other, qs in corpora.items() if other != name}
        f = fit([q for qs in train.values() for q in qs], folds=folds, seed=seed)
        bar = bar_for(held_out_curve(train, retry_margin, folds, seed)[0], target) if len(train) > 1 else 0.5
        out["decisions"].extend(replay(q, f["weights"], bar, retry_margin) for q in questions)
        out["folds"][name] = {"model": f["model"], "l2": f["l2"], "n_labels": f["n_labels"], "bar": bar}
    out["curve"], out["held_out_weights"] = held_out_curve(corpora, retry_margin, folds, seed)
    return out


def held_out_reliability(corpora: Mapping[str, Sequence[RecordedQuestion]],
                         held_out_weights: Mapping[str, Mapping[str, float]], n_bins: int = 10) -> list[dict]:
    """How often answered attempts were right, by confidence bin, each scored by the fit that did
    not see its corpus: what a confidence means on documents the model never saw."""
    conf, right = [], []
    for name, questions in corpora.items():
        for q in questions:
            for a in q.attempts:
                if a.answer is not None and a.correct is not None:
                    conf.append(confidence(a.features, held_out_weights[name]))
                    right.append(a.correct)
    return [b for b in reliability_bins(conf, right, n_bins) if b.get("count")]


def summary_table(rows: Mapping[str, Mapping[str, Any]], intervals: Mapping[str, Mapping[str, tuple]] | None = None
                  ) -> str:
    """A Markdown table of :func:`figures` per corpus (with intervals where given)."""
    cols = ("n", "precision", "answered_right", "unanswerable_refused", "adversarial_refused", "false_refusals",
            "ece", "auroc", "prompt_tokens", "p50_s", "p95_s")

    def cell(name: str, k: str) -> str:
        v = rows[name].get(k)
        if v is None:
            return "–"
        if isinstance(v, int) or k in ("prompt_tokens",):
            text = f"{v:.0f}"
        elif k.endswith("_s"):
            text = f"{v:.1f}"
        else:
            text = f"{v:.2f}"
        iv = (intervals or {}).get(name, {}).get(k)
        return f"{text} ({iv[0]:.2f}–{iv[1]:.2f})" if iv and not k.endswith(("_s", "tokens")) else text

    head = "| corpus | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 1) + "\n"
    return head + "\n".join("| " + name + " | " + " | ".join(cell(name, k) for k in cols) + " |" for name in rows)


__all__ = ["BAR_GRID", "Decision", "RecordedAttempt", "RecordedQuestion", "as_recorded", "bootstrap",
           "curve", "figures", "fit", "held_out_curve", "held_out_reliability", "leave_one_corpus_out", "load_run", "replay",
           "summary_table", "training_rows"]
