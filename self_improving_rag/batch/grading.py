"""Grading a run: each result row against its gold answers (:func:`grade`), and the run's
summary figures (:func:`summarise`)."""

from __future__ import annotations

from typing import Any


def grade(row: dict) -> dict:
    """Per-question gold scores for a result row."""
    from ..evaluation.answer_metrics import contains_gold, exact_match, token_f1

    out: dict[str, Any] = {}
    if row.get("answerable") is None:
        return out
    if row["answerable"]:
        from ..generation.prompts import strip_citations

        # Citations are the engine's bookkeeping, not part of the answer text being graded.
        pred = strip_citations(row.get("answer") or "")
        golds = row.get("gold_answers") or []
        if golds:
            out["em"] = exact_match(pred, golds) if pred else 0.0
            out["f1"] = token_f1(pred, golds) if pred else 0.0
            out["contains"] = contains_gold(pred, golds) if pred else 0.0
            out["correct"] = bool(not row["refused"] and (out["contains"] or out["em"] or out["f1"] >= 0.6))
    else:
        # A question the engine failed on (an error row) was not refused by judgement.
        out["correct"] = bool(row["refused"]) and "error" not in row
    return out


def summarise(rows: list[dict]) -> dict:
    """The evaluation summary of a run."""
    from ..evaluation.answer_metrics import refusal_metrics
    from ..evaluation.confidence_metrics import (auroc, auroc_interval, expected_calibration_error, percentiles,
                                                 reliability_bins, risk_coverage)

    s: dict[str, Any] = {"n": len(rows)}
    if not rows:
        return s
    for r in rows:
        r["grade"] = grade(r)  # always graded by the current rules, also for resumed rows
    graded_all = [r for r in rows if "correct" in r.get("grade", {})]
    # A question the engine could not process (an error row: too long, no words, ...) counts as
    # wrong in the scores, but it was not refused by judgement: the refusal and confidence
    # figures leave it out, and the summary counts it.
    graded = [r for r in graded_all if "error" not in r]
    ans = [r for r in graded_all if r["answerable"]]
    s["errors"] = sum(1 for r in rows if "error" in r)
    s["answered"] = sum(1 for r in rows if not r["refused"])
    s["refused"] = sum(1 for r in rows if r["refused"] and "error" not in r)
    if graded_all:
        s["correct_or_rightly_refused"] = sum(r["grade"]["correct"] for r in graded_all) / len(graded_all)
    if ans:
        for k in ("em", "f1", "contains"):
            s[k] = sum(r["grade"].get(k, 0.0) for r in ans) / len(ans)
    if graded:
        ref = refusal_metrics([r["refused"] for r in graded], [r["answerable"] for r in graded])
        s["refusal"] = ref
        conf = [float(r["confidence"]) for r in graded]
        ok = [1 if r["grade"]["correct"] else 0 for r in graded]
        # Selective answering over every question: answers ranked by confidence, a refusal after
        # every answer (it answers nothing: ranked at -1), each row right or wrong by its grade (an answer to an
        # unanswerable question is wrong, a refusal of one right).
        rc = risk_coverage([-1.0 if r["refused"] else float(r["confidence"]) for r in graded], ok)
        s["aurc"] = rc.get("aurc")
        s["accuracy_at_80_coverage"] = rc.get("accuracy_at_coverage")
        s["risk_coverage_curve"] = rc.get("curve")
        # Confidence is the probability that an *answer* is correct: measured on the answers
        # (what `sirag calibrate` fits and reports). The all-rows figures also count a right
        # refusal as "correct" at its (low) confidence, which no confidence can be calibrated for.
        # Every answer, also those to unanswerable questions (wrong by definition).
        answered_rows = [r for r in graded if not r["refused"]]
        if answered_rows:
            a_conf = [float(r["confidence"]) for r in answered_rows]
            a_ok = [1 if r["grade"]["correct"] else 0 for r in answered_rows]
            # What a user got: of the graded answers returned, how many were right (withholding a
            # wrong answer to an answerable question changes nothing in correct_or_rightly_refused).
            s["answered_right"] = sum(a_ok)
            s["answered_wrong"] = len(a_ok) - sum(a_ok)
            s["answered_accuracy"] = sum(a_ok) / len(a_ok)
            s["confidence_auroc_answered"] = auroc(a_conf, a_ok)
            # How far that AUROC could move on as many other questions like these (one row per question).
            s["confidence_auroc_answered_interval"] = auroc_interval(a_conf, a_ok)
            s["ece_answered"] = expected_calibration_error(a_conf, a_ok)
            s["aurc_answered"] = risk_coverage(a_conf, a_ok).get("aurc")
        s["confidence_auroc"] = auroc(conf, ok)
        s["ece"] = expected_calibration_error(conf, ok)
        s["reliability"] = reliability_bins(conf, ok)
    faith = [a["signals"]["faithfulness"]["value"] for r in rows for a in r["attempts"]
             if a["number"] == r.get("chosen_attempt") and a["signals"]["faithfulness"]["value"] is not None]
    s["faithfulness_mean"] = sum(faith) / len(faith) if faith else None
    ev = [r["evidence_hit"] for r in rows if r.get("evidence_hit") is not None]
    s["evidence_in_context_first_attempt"] = sum(ev) / len(ev) if ev else None
    stages: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r["timings_ms"].items():
            stages.setdefault(k, []).append(v)
    s["latency_ms"] = {k: percentiles(v) for k, v in stages.items()}
    # Per question the engine took: an error row has no attempts, and would dilute the costs.
    taken = [r for r in rows if "error" not in r]
    for key, per_row in (("prompt_tokens_per_question", lambda r: sum(a["prompt_tokens"] for a in r["attempts"])),
                         ("attempts_per_question", lambda r: len(r["attempts"])),
                         ("first_attempt_success", lambda r: bool(r["attempts"])
                          and r["attempts"][0]["failure"] == "NONE")):
        s[key] = sum(per_row(r) for r in taken) / len(taken) if taken else None
    return s
