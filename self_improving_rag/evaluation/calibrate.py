"""Fit the confidence weights on labelled outcomes in memory (``sirag calibrate``)."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import InputError, MemoryStoreError
from ..memory.analysis import NOT_RECORDED
from ..memory.fits import ANY_LATEST
from ..confidence import DEFAULT_WEIGHTS, answer_words, confidence
from .crossfit import DEFAULT_L2, choose_l2, choose_model_and_l2, cross_fit, fit_corpora
from .fit_scores import evaluate_fit, threshold_counts
from .fitting import fit_weights, scaled_params, scaled_weights


log = logging.getLogger(__name__)

# How `sirag calibrate` and the automatic fit fit (docs/results.md):
#: the held-out figures and the keep-or-drop rule cross-fit the labels in this many folds (each
#: label scored by weights fitted on the others; one question's answers in one fold);
FOLDS = 5
#: a full refit's pull toward the default weights: "auto" picks, from 0.01 to 10, the strength
#: whose cross-fitted Brier score is lowest on the labels at hand (a number fixes it);
L2 = "auto"
#: the confidence model (:data:`~.fitting.MODELS`): "auto" takes "scaled" (the default
#: weights' score rescaled, their ranking kept) or "full" (every weight refitted), whichever has
#: the lower cross-fitted Brier score, "scaled" on a tie;
MODEL = "auto"
#: and a corpus (index folder) with enough labelled answers, right and wrong, gets a fit of its
#: own, pulled toward the fit on all labels, unless it scores a worse held-out Brier.
PER_CORPUS = True


def weights_for(fit: dict | None, corpus: str | None) -> dict | None:
    """The weights a stored fit (:meth:`MemoryStore.latest_calibration`) gives questions on
    ``corpus``: that corpus's own fit when it has one, else the fit on all labels; None without
    a fit (the default weights)."""
    if not fit:
        return None
    own = (fit.get("corpus_fits") or {}).get(corpus) if corpus is not None else None
    return own["weights"] if own else fit.get("weights")


def calibrate_from_memory(store, min_labels: int = 20, seed: int = 0, save: bool = True, force: bool = False,
                          folds: int = FOLDS, l2: float | str = L2, per_corpus: bool = PER_CORPUS,
                          if_latest: Any = ANY_LATEST, interval: bool = True,
                          answer_threshold: float | None = None, model: str = MODEL) -> dict:
    """Cross-fit for honest before/after figures, then fit on all labels and store the weights.

    With ``interval``, the held-out scores (``result["held_out"]``) carry ``auroc_interval``, AUROC's
    95% bootstrap interval over the questions, so that a figure on few labels is read with its
    uncertainty (the automatic fit, which shows no AUROC interval, leaves it out: it costs a
    bootstrap of 1000 draws per score).

    ``model`` is the confidence model (:data:`~.fitting.MODELS`): ``"full"`` refits every
    weight, ``"scaled"`` only the slope and shift of the default weights' score
    (:func:`fit_scaled`), and ``"auto"`` chooses between them (:func:`choose_model`) on all labels
    for the stored fit and inside each training fold for the held-out figures.
    ``result["model"]`` is the stored fit's model, ``result["scaled"]`` its slope and shift when
    it is scaled.

    ``l2`` is the full fit's penalty strength, or ``"auto"``: chosen by :func:`choose_l2` on all
    labels for the stored fit, and inside each training fold for the held-out figures, so that
    they measure the choice too. ``result["l2"]`` is the strength of the stored fit (None for a
    scaled one).

    The cross-fit (:func:`cross_fit`, ``folds`` folds, one question's outcomes in one fold) scores
    every label with weights fitted on the other folds. A fit whose cross-fitted Brier score (a
    proper score: it rewards both ranking and calibration) is worse than the default weights' on
    the same labels is not stored unless ``force``: ``result["stored"]`` is False and
    ``result["not_stored"]`` says why.

    With ``per_corpus``, when the labels come from more than one corpus, every corpus with at
    least ``min_labels`` labelled answers, right and wrong ones among them, also gets a fit of its
    own, pulled toward the fit on all labels (:func:`fit_corpora`), unless its own fits scored
    worse than the fit on all labels on its held-out labels, or scored none of them; the
    cross-fit scores each label as the engine would (by its corpus's fit where one is kept),
    ``result["held_out"]["by_corpus"]`` gives each corpus's figures (outcomes without a corpus
    under :data:`NOT_RECORDED`), and ``result["corpus_fits"]`` the fits, stored with the other.

    With ``answer_threshold`` (the engine's ``loop.answer_threshold``), ``result["at_threshold"]``
    says how that bar sorts the labelled answers under the default weights (``before``) and under
    the fit, each label held out (``after``): right answers below it, which the engine would
    withhold, and wrong ones at or above it, which it would return (:func:`threshold_counts`).
    A fit can calibrate better and still withhold many more right answers: on a corpus where the
    model is right about half the time its confidences fall around the bar
    (docs/results.md).
    """
    last_label = store.last_label_id()  # before the rows: a label written meanwhile stays new to this fit
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
    groups = [r.get("question_id") or r["outcome_id"] for r in rows]
    if len(set(groups)) < 2:
        raise InputError("every labelled answer is to one question; calibration scores each question's answers by "
                         "a fit on the others, so label answers to at least two questions")
    corpora = [r.get("corpus") for r in rows] if per_corpus else None
    held_out = cross_fit(rows, labels, seed=seed, folds=folds, groups=groups, l2=l2, corpora=corpora,
                         corpus_min=min_labels, interval=interval, model=model)
    held_confidences = held_out.pop("confidences")  # per label: too long for the printed result
    strength: float | None = None
    if model == "auto":
        chosen, strength = choose_model_and_l2(rows, labels, groups, folds=folds, seed=seed, l2=l2)
    else:
        chosen = model
    scaled: dict[str, float] | None = None
    if chosen == "scaled":
        slope, shift = scaled_params(rows, labels)
        scaled = {"slope": slope, "shift": shift}
        weights = scaled_weights(slope, shift)
    else:
        if strength is None:
            strength = choose_l2(rows, labels, groups, folds=folds, seed=seed) if l2 == "auto" else float(l2)
        weights = fit_weights(rows, labels, l2=strength)
    by_corpus = held_out.get("by_corpus") or {}
    # Only the corpora whose own fits beat the fit on all labels on their held-out labels keep one.
    kept = [c for c, figures in by_corpus.items() if figures["kept"]]
    own = fit_corpora(rows, labels, groups, corpora, weights, l2=l2, folds=folds, seed=seed, only=kept,
                      pooled_l2=DEFAULT_L2 if strength is None else strength, pooled_model=chosen) if kept else {}
    for key, fit in own.items():
        figures = by_corpus[key]
        fit["held_out"] = {m: {k: figures[m][k] for k in ("auroc", "auroc_interval", "ece", "brier") if k in figures[m]}
                           for m in ("before", "pooled", "after")}
    if None in by_corpus:  # a JSON key: outcomes recorded before the corpus was
        held_out["by_corpus"] = {NOT_RECORDED if c is None else c: f for c, f in by_corpus.items()}
    before = held_out["before"]  # the default weights on all labels: the cross-fit scored them already
    after = evaluate_fit(rows, labels, weights, corpora, own)
    result = {"n": len(rows), "held_out": held_out, "in_sample_before": before, "in_sample_after": after,
              "weights": weights, "model": chosen, "model_chosen": model == "auto", "l2": strength,
              "l2_chosen": l2 == "auto", "corpus_fits": own}
    if scaled is not None:
        result["scaled"] = scaled
    if answer_threshold is not None:
        result["at_threshold"] = {
            "threshold": answer_threshold,
            "before": threshold_counts([confidence(r, DEFAULT_WEIGHTS) for r in rows], labels, answer_threshold),
            "after": threshold_counts(held_confidences, labels, answer_threshold)}
    b_before, b_after = held_out["before"].get("brier"), held_out["after"].get("brier")
    worse = not force and b_before is not None and b_after is not None and b_after > b_before
    # A dry run says what a real run would do: store the fit, or refuse it as below.
    result["would_store"] = not worse
    if worse:
        why = (f"the fit scores worse than the default weights on held-out labels (Brier {b_after:.3f} > "
               f"{b_before:.3f}, each label scored by a fit on the other {held_out['folds'] - 1} of "
               f"{held_out['folds']} folds")
        if save:
            # Named in full: the automatic fit's note reaches `sirag ask` and `sirag eval`, which have no --force.
            fit = store.latest_calibration()
            defaults = fit is None or bool((fit.get("metrics") or {}).get("reset_to_defaults"))
            stay = ("the default weights stay in use" if defaults
                    else "the weights in use stay (`sirag calibrate --reset` for the defaults)")
            result["stored"] = False
            result["not_stored"] = (f"{why}): too few or unrepresentative labels; {stay}; add labels, or store it "
                                    "anyway with `sirag calibrate --force`")
            return result
        result["would_not_store"] = f"{why}); a real run would keep the weights in use unless given --force"
    result["stored"] = save
    if save:
        metrics = {"auroc_before": held_out.get("before", {}).get("auroc"), "auroc_after": held_out.get("after", {}).get("auroc"),
                   "ece_before": held_out.get("before", {}).get("ece"), "ece_after": held_out.get("after", {}).get("ece"),
                   "model": chosen, "l2": strength, "last_label_id": last_label}
        result["fit_id"] = store.save_calibration(weights, len(rows), metrics, corpus_fits=own or None,
                                                  if_latest=if_latest)
        if result["fit_id"] is None:  # another process stored a fit while this one was fitting
            result["stored"] = False
            result["not_stored"] = "another process stored a fit of these labels meanwhile; that one is in use"
    return result


def reset_calibration(store) -> int:
    """Put the default weights back in use: they are stored as the newest fit (n = 0), so the
    history of fits is kept and a later ``sirag calibrate`` replaces them as before. An automatic
    fit (:func:`auto_calibrate`) counts only labels written after it (:func:`_new_labels`), so a
    reset stays until new labels arrive."""
    return store.save_calibration(dict(DEFAULT_WEIGHTS), 0, {"reset_to_defaults": True,
                                                              "last_label_id": store.last_label_id()})


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _new_labels(store, fit: dict | None) -> int:
    """Labelled answers the weights in use have not seen (all of them without a fit): those whose
    label in use was written to the store after the weights were made (given here, changed by a
    later label, or merged in: the fit keeps the store's last label id, ``last_label_id``).
    Labels merged in keep the time they were given, so time alone would miss them. A fit without
    that id (stored by an older sirag, or merged in from another store, whose ids mean nothing
    here) counts the labels given after it was stored or, when that is more, the labelled
    answers beyond its ``n``."""
    if fit is None:
        return store.labelled_answers()
    metrics = fit.get("metrics") or {}
    if _is_count(metrics.get("last_label_id")):
        return store.labelled_answers(after_label=metrics["last_label_id"])
    since = store.labelled_answers(since=fit["created_at"])
    if metrics.get("reset_to_defaults") or not _is_count(fit.get("n")):
        return since
    return max(since, store.labelled_answers() - fit["n"])


def auto_calibrate(store, min_labels: int, refit_after: int, seed: int = 0, folds: int = FOLDS,
                   l2: float | str = L2, per_corpus: bool = PER_CORPUS,
                   answer_threshold: float | None = None, model: str = MODEL) -> dict | None:
    """Fit the confidence weights from memory's labels when enough new ones have arrived.

    Due when the store holds at least ``min_labels`` labelled answers and, if weights were stored
    before (a fit or a reset), at least ``refit_after`` of them are new to those weights (labelled
    after them, or merged in since: :func:`_new_labels`). The fit is made and kept as ``sirag
    calibrate`` does: stored only if it is no worse than the default weights'
    held-out Brier score. A fit kept out is recorded (:meth:`MemoryStore.save_kept_out`), and the
    next one is due only once ``refit_after`` labelled answers are new to it, as to a stored fit
    (:func:`_kept_out`): the same labels would give the same fit, at every start. Returns the
    :func:`calibrate_from_memory` result, or None when nothing was due, the store is read-only, or
    its labels hold one class. ``answer_threshold`` and ``model``: as for :func:`calibrate_from_memory`.
    """
    if getattr(store, "read_only", False) or store.labelled_answers() < min_labels:
        return None
    fit = store.latest_calibration()
    new = _new_to_weights(store, fit)
    if new is not None and new < refit_after:
        return None
    last_label = store.last_label_id()  # before the fit reads the labels: one written meanwhile stays new
    try:
        # Stored only if no other process (another `sirag ask` starting on this store) stored a fit
        # while this one was fitting: the labels would then no longer be new to the weights in use.
        result = calibrate_from_memory(store, min_labels=min_labels, seed=seed, save=True, folds=folds, l2=l2,
                                       per_corpus=per_corpus, if_latest=fit["id"] if fit is not None else None,
                                       interval=False, answer_threshold=answer_threshold, model=model)
    except InputError:  # every label the same: nothing to fit
        return None
    if not result["stored"] and not result["would_store"]:  # kept out: worse than the default weights
        before, after = result["held_out"]["before"].get("brier"), result["held_out"]["after"].get("brier")
        reason = f"held-out Brier {after:.3f} > the default weights' {before:.3f}"
        try:
            store.save_kept_out(result["n"], last_label, fit["id"] if fit is not None else None, reason)
        except MemoryStoreError as exc:  # not recorded: the next start fits again, no worse than before
            log.warning("the automatic fit kept out could not be recorded (%s); the next start fits again", exc)
        else:
            result["not_stored"] += (f"; the automatic fit waits for {refit_after} labelled answers new to it "
                                     "(calibration.auto_refit_after)")
    return result


def _kept_out(store, fit: dict | None) -> dict | None:
    """The newest automatic fit kept out (:meth:`MemoryStore.save_kept_out`) while the weights
    in use now (``fit``, the store's latest; None for none) were: a fit or a reset stored since
    makes it history."""
    kept = store.latest_kept_out()
    return kept if kept is not None and kept["fit_id"] == (fit["id"] if fit is not None else None) else None


def _new_to_weights(store, fit: dict | None) -> int | None:
    """Labelled answers that neither the weights in use (``fit``: :func:`_new_labels`) nor an
    automatic fit kept out since (:func:`_kept_out`) has seen; None without either (no weights
    stored, no fit kept out: the automatic fit waits only for ``calibration.auto_min_labels``)."""
    kept = _kept_out(store, fit)
    if kept is not None:
        return store.labelled_answers(after_label=kept["last_label_id"])
    return None if fit is None else _new_labels(store, fit)


def auto_calibrate_with(store, config) -> tuple[str | None, bool]:
    """:func:`auto_calibrate` with a Config's ``calibration`` settings and ``policy.seed``: the
    line :func:`describe_auto_fit` gives for what it did (None when nothing was due), and whether
    the fit was stored (new weights in use)."""
    c = config.calibration
    result = auto_calibrate(store, c.auto_min_labels, c.auto_refit_after, seed=config.policy.seed,
                            answer_threshold=config.loop.answer_threshold)
    return (None, False) if result is None else (describe_auto_fit(result), bool(result.get("stored")))


def describe_auto_fit(result: dict) -> str:
    """One line on what :func:`auto_calibrate` did, for a log or a note."""
    held = result["held_out"]

    def fmt(x) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    if not result.get("stored"):
        return f"automatic calibration on {result['n']} labelled answers not stored: {result.get('not_stored', '')}"
    return (f"confidence calibrated on the {result['n']} labelled answers in memory "
            f"(model {result.get('model', 'full')}, held-out AUROC "
            f"{fmt(held['before']['auroc'])} -> {fmt(held['after']['auroc'])}, ECE {fmt(held['before']['ece'])} -> "
            f"{fmt(held['after']['ece'])}, Brier {fmt(held['before'].get('brier'))} -> "
            f"{fmt(held['after'].get('brier'))}: a fit is kept when its Brier is no worse than the default weights'); "
            f"fit {result['fit_id']} is in use (calibration.auto_fit)"
            + _corpus_note(result) + _threshold_note(result))


def _threshold_note(result: dict) -> str:
    """What the new weights do at the answer threshold (:func:`calibrate_from_memory`'s
    ``at_threshold``): a fit that withholds more right answers than the weights before it did is
    said, since the engine then refuses answers it used to give."""
    t = result.get("at_threshold")
    if not t:
        return ""
    b, a = t["before"], t["after"]
    return (f"; at loop.answer_threshold {t['threshold']:.2f} the labelled answers' right ones below it go from "
            f"{b['right_below']} of {b['right']} under the default weights to {a['right_below']} (withheld), and "
            f"the wrong ones at or above it from {b['wrong_at_or_above']} of {b['wrong']} to "
            f"{a['wrong_at_or_above']} (returned)")


def _corpus_note(result: dict) -> str:
    own = result.get("corpus_fits") or {}
    if not own:
        return ""
    return f", with own fits for {len(own)} {'corpus' if len(own) == 1 else 'corpora'} ({', '.join(sorted(own))})"


def calibration_status(store, auto_fit: bool, min_labels: int, refit_after: int) -> dict:
    """The confidence weights in use and when an automatic fit comes (``sirag memory stats``).

    ``weights``: ``default`` or ``fit ID (MODEL)``, MODEL ``scaled`` or ``full``; ``fitted_on``: its
    labelled answers (0 for the defaults); ``corpus_fits``: each corpus with a fit of its own made
    with it, and that fit's labelled answers; ``labelled_answers``: in the store now,
    ``new_since_weights`` of them new to the weights in use (see :func:`_new_labels`); ``automatic_fit``: ``off``, ``due`` (the next start
    fits) or how many more labelled answers it waits for.
    """
    fit = store.latest_calibration()
    default = fit is None or bool((fit.get("metrics") or {}).get("reset_to_defaults"))
    n = store.labelled_answers()
    new = _new_labels(store, fit)
    unseen = _new_to_weights(store, fit)
    wait = max(min_labels - n, 0 if unseen is None else refit_after - unseen, 0)
    # Its model (MODEL chose it); a fit stored by an older version refitted every weight.
    model = "" if default else ((fit.get("metrics") or {}).get("model") or "full")
    status = {"weights": "default" if default else f"fit {fit['id']} ({model})",
              "fitted_on": 0 if default else int(fit["n"]),
              "corpus_fits": {c: int(f["n"]) for c, f in (fit or {}).get("corpus_fits", {}).items()},
              "labelled_answers": n, "new_since_weights": new,
              "automatic_fit": ("off" if not auto_fit else "due" if wait == 0
                                else f"after {wait} more labelled answer{'' if wait == 1 else 's'}")}
    kept = _kept_out(store, fit)
    if kept is not None:  # why the automatic fit waits although labels are new to the weights in use
        status["kept_out"] = (f"the automatic fit on {kept['n']} labelled answers ({kept['created_at'][:16]}): "
                              f"{kept['reason']}")
    return status
