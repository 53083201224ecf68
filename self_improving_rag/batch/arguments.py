"""The ``batch`` and ``eval`` commands' arguments, registered on the CLI's parser."""

from __future__ import annotations

import argparse
from typing import Callable

from .commands import cmd_batch, cmd_eval
from .spec import BatchSpec


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low`` (and <= ``high`` when given)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


def _run_name(text: str) -> str:
    """An argparse type: a run name that BatchSpec accepts (so it stays inside the output folder)."""
    try:
        return BatchSpec.check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_batch_commands(sub, common, registry: dict, command) -> None:
    """Register ``batch`` and ``eval`` on the CLI's subparsers."""
    import inspect

    for name, fn in (("batch", cmd_batch), ("eval", cmd_eval)):
        doc = inspect.cleandoc(fn.__doc__ or "")
        sp = sub.add_parser(name, parents=[common], help=doc.splitlines()[0], description=doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        # Optional to argparse in both commands: in `--ray FILE` it gives FILE to --ray, and
        # file_before_ray takes it back; cmd_batch says when none is given.
        sp.add_argument("file", nargs="?", help="batch YAML file")
        sp.add_argument("--limit", type=int_at_least(1), help="only the first N questions (after --offset); the summary "
                                                              "covers every question the run has answered")
        sp.add_argument("--offset", type=int_at_least(0), help="skip the first N questions")
        sp.add_argument("--workers", type=int_at_least(1, 64),
                        help="engines answering at once (default 1, in this process): N > 1 runs N Ray actors "
                             "on this machine, this process alone recording the answers (each loads its own "
                             "models: at most one per CPU helps; needs pip install -e '.[ray]'); with --ray (or "
                             "executor: ray), the number of actors there")
        sp.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="ask the questions on Ray actors, this process alone recording the answers: a local "
                             "Ray, or the cluster at ADDRESS (auto, HOST:6379, ray://HOST:10001); a batch file "
                             "right after --ray is the file, not an address; needs pip install -e '.[ray]' "
                             "(docs/scale.md)")
        sp.add_argument("--no-retry", action="store_true", help="run with the loop off")
        if name == "eval":
            sp.add_argument("--dataset", help="JSONL or SQuAD 2.0 JSON with gold answers")
            sp.add_argument("--corpus", action="append",
                            help="documents to ingest (repeatable; replaces a batch file's corpus:)")
            sp.add_argument("--name", type=_run_name, help="run name (default: the batch file's name: field, or the "
                                                           "dataset's file name); a run with the loop off is written "
                                                           "as NAME-noloop")
            sp.add_argument("--output-dir", help="where run folders go (default: the batch file's output_dir:, "
                                                 "else runs/ in the batch file's folder; with --dataset, runs/ here)")
            sp.add_argument("--compare-no-retry", action="store_true",
                            help="compare with the loop off: by default the first attempt of each question, "
                                 "finished alone (what the loop-off engine answers with the first strategies "
                                 "memory chose in the loop run, at no extra cost), "
                                 "written as <run>-single; and with no loop at all (the first attempt's "
                                 "answer as the model gave it: no checks, no refusal but the model's own decline), written as <run>-plain")
            sp.add_argument("--separate-no-retry-run", action="store_true",
                            help="with --compare-no-retry: run the questions again with the loop off instead, "
                                 "as <run>-noloop; the comparison covers the questions every run compared answered")
            sp.add_argument("--retrieval-only", action="store_true",
                            help="evidence recall@k and MRR per chunker x retriever, no generation")
        registry[name] = fn
