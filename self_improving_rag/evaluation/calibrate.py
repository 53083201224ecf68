"""Fit the confidence weights on labelled outcomes in memory (``sirag calibrate``)."""

from __future__ import annotations

from ..errors import InputError
from .calibration import DEFAULT_WEIGHTS, answer_words, cross_fit, evaluate_fit, fit_weights


def calibrate_from_memory(store, min_labels: int = 20, seed: int = 0, save: bool = True, force: bool = False) -> dict:
    """Cross-fit for honest before/after figures, then fit on all labels and store the weights.

    A fit whose held-out Brier score (a proper score: it rewards both ranking and calibration) is
    worse than the default weights' on the same held-out half is not stored unless ``force``:
    ``result["stored"]`` is False and ``result["not_stored"]`` says why.
    """
    rows = [{**r, "answer_words": answer_words(r.get("answer"), bool(r.get("refusal")))}
            for r in store.labelled_attempts()]
    if len(rows) < min_labels:
        raise InputError(
            f"only {len(rows)} labelled answered outcome(s) in memory (labels on refusals do not count), "
            f"{min_labels} needed; label answers with "
            "`sirag feedback ID --correct/--wrong` or run `sirag eval` (gold labels)"
            + (", or pass --min-labels" if len(rows) >= 2 else "")
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
    b_before, b_after = held_out["before"].get("brier"), held_out["after"].get("brier")
    worse = not force and b_before is not None and b_after is not None and b_after > b_before
    # A dry run says what a real run would do: store the fit, or refuse it as below.
    result["would_store"] = not worse
    if worse:
        why = f"the fit scores worse than the default weights on the held-out half (Brier {b_after:.3f} > {b_before:.3f}"
        if save:
            result["stored"] = False
            result["not_stored"] = (f"{why}; one seeded half-split of the labels): too few or unrepresentative "
                                    "labels; the weights in use stay (`sirag calibrate --reset` for the defaults); add "
                                    "labels, or store it anyway with --force")
            return result
        result["would_not_store"] = f"{why}); a real run would keep the weights in use unless given --force"
    result["stored"] = save
    if save:
        metrics = {"auroc_before": held_out.get("before", {}).get("auroc"), "auroc_after": held_out.get("after", {}).get("auroc"),
                   "ece_before": held_out.get("before", {}).get("ece"), "ece_after": held_out.get("after", {}).get("ece")}
        result["fit_id"] = store.save_calibration(weights, len(rows), metrics)
    return result


def reset_calibration(store) -> int:
    """Put the default weights back in use: they are stored as the newest fit (n = 0), so the
    history of fits is kept and a later ``sirag calibrate`` replaces them as before. The number of
    labelled answers at the reset is kept (``labels_seen``), so an automatic fit waits for new
    labels instead of undoing the reset at the next start."""
    return store.save_calibration(dict(DEFAULT_WEIGHTS), 0,
                                  {"reset_to_defaults": True, "labels_seen": len(store.labelled_attempts())})


def labels_behind_weights(fit: dict | None) -> int:
    """How many labelled answers the weights in use were decided on: the fit's ``labels_seen``
    (a reset), else its ``n``; 0 without a fit."""
    if not fit:
        return 0
    seen = (fit.get("metrics") or {}).get("labels_seen")
    return int(seen) if isinstance(seen, (int, float)) else int(fit.get("n") or 0)


def calibration_status(store, auto_fit: bool, min_labels: int, refit_after: int) -> dict:
    """What confidence weights the next start uses and when it fits new ones (``memory stats``).

    ``weights``: ``default`` or ``fit ID``; ``fitted_on``: its labelled answers (0 for the
    defaults); ``labelled_answers``: in the store now; ``automatic_fit_at``: the count of
    labelled answers at which a start fits again (only with ``auto_fit``).
    """
    fit = store.latest_calibration()
    default = fit is None or bool((fit.get("metrics") or {}).get("reset_to_defaults"))
    out: dict = {"weights": "default" if default else f"fit {fit['id']}",
                 "fitted_on": 0 if default else int(fit["n"]),
                 "labelled_answers": len(store.labelled_attempts())}
    if auto_fit:
        out["automatic_fit_at"] = max(min_labels, labels_behind_weights(fit) + refit_after)
    return out


def auto_calibrate(store, min_labels: int, refit_after: int, seed: int = 0) -> dict | None:
    """Fit the confidence weights from memory's labels when enough new ones have arrived.

    Fits, as ``sirag calibrate`` does (stored only if it beats the default weights' held-out
    Brier score), when the store holds at least ``min_labels`` labelled answers and at least
    ``refit_after`` more than the weights in use were decided on. Returns the
    :func:`calibrate_from_memory` result, or None when nothing was due (or the store is
    read-only, or its labels hold one class).
    """
    if getattr(store, "read_only", False):
        return None
    rows = store.labelled_attempts()
    n = len(rows)
    if n < min_labels or n - labels_behind_weights(store.latest_calibration()) < refit_after:
        return None
    if len({int(r["label"]) for r in rows}) < 2:
        return None
    return calibrate_from_memory(store, min_labels=min_labels, seed=seed, save=True)
