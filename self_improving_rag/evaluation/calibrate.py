"""Fit the confidence weights on labelled outcomes in memory (``sirag calibrate``)."""

from __future__ import annotations

from ..errors import InputError
from .calibration import DEFAULT_WEIGHTS, answer_words, cross_fit, evaluate_fit, fit_weights


def calibrate_from_memory(store, min_labels: int = 20, seed: int = 0, save: bool = True) -> dict:
    """Cross-fit for honest before/after figures, then fit on all labels and store the weights."""
    rows = [{**r, "answer_words": answer_words(r.get("answer"), bool(r.get("refusal")))}
            for r in store.labelled_attempts()]
    if len(rows) < min_labels:
        raise InputError(
            f"only {len(rows)} labelled answered outcome(s) in memory (labels on refusals do not count), "
            f"{min_labels} needed; label answers with "
            "`sirag feedback ID --correct/--wrong` or run `sirag eval` (gold labels), or pass --min-labels"
        )
    labels = [int(r["label"]) for r in rows]
    if len(set(labels)) < 2:
        raise InputError("all labels are the same; calibration needs both correct and wrong answers")
    held_out = cross_fit(rows, labels, seed=seed)
    weights = fit_weights(rows, labels)
    before = evaluate_fit(rows, labels, DEFAULT_WEIGHTS)
    after = evaluate_fit(rows, labels, weights)
    result = {"n": len(rows), "held_out": held_out, "in_sample_before": before, "in_sample_after": after,
              "weights": weights}
    if save:
        metrics = {"auroc_before": held_out.get("before", {}).get("auroc"), "auroc_after": held_out.get("after", {}).get("auroc"),
                   "ece_before": held_out.get("before", {}).get("ece"), "ece_after": held_out.get("after", {}).get("ece")}
        result["fit_id"] = store.save_calibration(weights, len(rows), metrics)
    return result
