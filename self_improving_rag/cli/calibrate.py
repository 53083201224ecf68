"""``sirag calibrate``: the confidence weights fitted on the labelled answers in memory, and what
the fit changes, before and after, each label held out."""

from __future__ import annotations

import argparse

from ..config import Config
from ..errors import InputError
from .common import add_command, command, existing_memory, print_json, readable_memory


@command
def cmd_calibrate(args: argparse.Namespace, config: Config) -> int:
    """Fit the confidence weights on labelled outcomes in memory; print AUROC and ECE before and after,
    and how many right answers loop.answer_threshold would withhold and wrong ones it would return.

    Example: sirag calibrate   (labels come from `sirag feedback` and from `sirag eval` gold)
    A fit either rescales the default weights' score (two numbers; their ranking of answers kept) or
    refits every weight, whichever scores the labels better held out.
    The engine also fits by itself at start once enough new labels arrive (calibration.auto_fit;
    `sirag memory stats` shows the weights in use and when the next fit is due). With labels from
    several corpora (index folders), each corpus with enough of them, right and wrong, also gets a
    fit of its own, which questions on it use, unless that fit scores a worse held-out Brier than
    the shared one.
    """
    from ..evaluation.calibrate import calibrate_from_memory, calibration_status, reset_calibration

    if args.reset and (args.dry_run or args.force or args.min_labels is not None):
        raise InputError("--reset puts the default weights back and fits nothing; it takes no --dry-run, --force "
                         "or --min-labels")
    # A dry run stores no fit (an older store's schema is upgraded first, as `sirag memory` does).
    store = readable_memory(config, "calibrate") if args.dry_run else existing_memory(config, "calibrate")
    try:
        if args.reset:
            fit_id = reset_calibration(store)
            if args.json:
                print_json({"fit_id": fit_id, "reset_to_defaults": True})
            else:
                auto = config.calibration
                due = calibration_status(store, auto.auto_fit, auto.auto_min_labels,
                                         auto.auto_refit_after)["automatic_fit"]
                later = ("" if due == "off" else ", or the engine's own at its next start (calibration.auto_fit)"
                         if due == "due" else f", or the engine's own {due} (calibration.auto_fit)")
                print(f"default weights stored as fit {fit_id}: used by every later answer until a newer fit "
                      f"(`sirag calibrate`, one merged in{later})")
            return 0
        result = calibrate_from_memory(store, min_labels=20 if args.min_labels is None else args.min_labels,
                                       seed=config.policy.seed,
                                       save=not args.dry_run, force=args.force,
                                       answer_threshold=config.loop.answer_threshold)
    finally:
        store.close()
    if args.json:
        print_json(result)
    else:
        print_calibration(result)
    return 0


def print_calibration(result: dict) -> None:
    """What `sirag calibrate` prints of a fit: its scores before and after, each label held out, per
    corpus when there are several, its weights and model, and whether it was stored."""
    def fmt(x) -> str:
        return "  n/a" if x is None else f"{x:5.3f}"

    def span(m: dict) -> str:
        # In-sample scores have no interval: the same labels fitted and scored say nothing of others.
        if "auroc_interval" not in m:
            return ""
        iv = m["auroc_interval"]
        return " " * 14 + ("n/a" if iv is None else f"{iv['low']:.2f}–{iv['high']:.2f}")

    held = result["held_out"]
    print(f"labelled answered outcomes: {result['n']}")
    print(f"{'':46s} AUROC   ECE    Brier  ECE if calibrated  AUROC 95% interval")
    rows = [("default weights", held["before"]),
            (f"fitted, each label held out ({held['folds']} folds)", held["after"]),
            ("fitted on all labels, scored in-sample", result["in_sample_after"])]
    for name, m in rows:
        print(f"{name:46s} {fmt(m['auroc'])}  {fmt(m['ece'])}  {fmt(m['brier'])}  {fmt(m.get('ece_floor'))}"
              + span(m))
    print(f"(held out: each label scored by weights fitted on the other {held['folds'] - 1} of {held['folds']} folds, "
          f"at least {held['n_train']} labels each; one question's answers share a fold)")
    print("(ECE if calibrated: what perfectly calibrated confidences would measure on this few labels; "
          "an ECE near it is sampling noise)")
    print("(AUROC 95% interval: the middle 95% of the AUROCs of 1000 draws, with replacement, of as many questions "
          "from these, each with its held-out confidences; a target inside it is neither shown met nor shown missed "
          "by these labels)")
    by_corpus = held.get("by_corpus") or {}
    if len(by_corpus) > 1:
        from ..memory.analysis import NOT_RECORDED

        own = result.get("corpus_fits") or {}
        stored = "fit_id" in result
        print("by corpus, each label held out (a corpus's own fit is pulled toward the fit on all labels, "
              "by an l2 of its own; the figures above score each label by the fit its corpus keeps):")
        for corpus, figures in by_corpus.items():
            name = "corpus not recorded (answers recorded by an older sirag)" if corpus == NOT_RECORDED else corpus
            print(f"  {name} ({figures['n']} labels)")
            lines = [("default weights", figures["before"]), ("one fit for every corpus", figures["pooled"])]
            if "own" in figures:
                what = f"its own fit ({figures['own_folds']} of {held['folds']} folds)"
                lines.append((what + (", in use" if corpus in own and stored else ""), figures["own"]))
            for what, m in lines:
                print(f"    {what:42s} {fmt(m['auroc'])}  {fmt(m['ece'])}  {fmt(m['brier'])}  {fmt(m.get('ece_floor'))}"
                      + span(m))
            if corpus in own:
                chose = "; each held-out fold chose its own" if result.get("l2_chosen") else ", fixed"
                print(f"    its weights (l2 {own[corpus]['l2']:g}{chose}): "
                      + ", ".join(f"{k} {v:+.2f}" for k, v in own[corpus]["weights"].items()))
            else:
                why = ("its corpus is unknown" if corpus == NOT_RECORDED
                       else "its own fits scored none of its held-out labels (each fold that held one out left too "
                            "few, or one kind, to fit on)" if figures.get("eligible") and "own" not in figures
                       else f"its own fit scored a worse held-out Brier, {figures['own']['brier']:.4f} against "
                            f"{figures['pooled']['brier']:.4f}" if "own" in figures
                       else "too few labelled answers, or not both right and wrong ones, for a fit of its own")
                print(f"    (scored by the fit on all labels: {why})")
    print(("weights of the fit on all labels: " if len(by_corpus) > 1 else "weights: ")
          + ", ".join(f"{k} {v:+.2f}" for k, v in result["weights"].items()))
    if "model" in result:
        if result["model"] == "scaled":
            sc = result.get("scaled") or {}
            what = (f"scaled, the default weights' score times {sc.get('slope', float('nan')):.2f} and shifted by "
                    f"{sc.get('shift', float('nan')):+.2f}: answers ranked as the default weights rank them")
        else:
            what = "full, every weight refitted"
        how = ("chosen from the labels: the lower cross-fitted Brier score; each held-out fold chose its own"
               if result.get("model_chosen")
               else "fixed")
        print(f"model: {what} ({how})")
    if result.get("l2") is not None:
        how = ("chosen from the labels: the lowest cross-fitted Brier score; each held-out fold chose its own"
               if result.get("l2_chosen") else "fixed")
        print(f"pull toward the default weights: l2 {result['l2']:g} ({how})")
    if "at_threshold" in result:
        t = result["at_threshold"]
        b, a = t["before"], t["after"]
        # A calibration moves the confidences past the loop's bar: what that does to answers, before it is used.
        print(f"at loop.answer_threshold {t['threshold']:.2f} (what a first attempt must reach to be returned): "
              f"right answers below it, withheld: {b['right_below']} of {b['right']} with the default weights, "
              f"{a['right_below']} with the fit (each label held out); wrong answers at or above it, returned: "
              f"{b['wrong_at_or_above']} of {b['wrong']}, {a['wrong_at_or_above']} with the fit")
    if "fit_id" in result:
        own = result.get("corpus_fits") or {}
        with_own = (f", with the own fit{'' if len(own) == 1 else 's'} shown above for {len(own)} "
                    f"corp{'us' if len(own) == 1 else 'ora'} (questions on {'it' if len(own) == 1 else 'them'} use "
                    f"{'it' if len(own) == 1 else 'theirs'})" if own else "")
        print(f"stored as fit {result['fit_id']}{with_own}: used by every later answer (the latest fit wins; "
              "`sirag calibrate --reset` goes back to the default weights)")
    elif result.get("not_stored"):
        print(f"not stored: {result['not_stored']}")
    elif result.get("would_not_store"):
        print(f"dry run: nothing stored; {result['would_not_store']}")
    else:
        print("dry run: nothing stored; a real run would store this fit")


def add_parsers(sub: argparse._SubParsersAction, store_only: argparse.ArgumentParser) -> None:
    """Add ``calibrate`` to the ``sirag`` parser."""
    from ..batch import int_at_least

    sp = add_command(sub, "calibrate", cmd_calibrate, store_only)
    sp.add_argument("--min-labels", type=int_at_least(2), default=None,
                    help="labelled outcomes needed to fit (default 20); also what a corpus needs for a fit of its own")
    sp.add_argument("--dry-run", action="store_true",
                    help="report the fit, and whether a real run would store it, without storing it (a store of an "
                         "older schema is upgraded first, as `sirag memory` does)")
    sp.add_argument("--force", action="store_true",
                    help="store the fit even when it scores worse than the default weights on held-out labels")
    sp.add_argument("--reset", action="store_true",
                    help="put the default weights back in use (stored as the newest fit; nothing is deleted)")
