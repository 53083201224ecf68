"""The ``sirag batch`` and ``sirag eval`` commands: each reads its options and the batch file,
makes the library calls, and prints the summaries."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..config import Config, _merge, load_yaml_unique, parse_override
from ..errors import BatchError, ConfigError
from ..ray_pool import file_before_ray, make_executor
from .noloop import derive_plain_run, derive_single_attempt_run, on_common_questions
from .questions import load_items
from .report import COMPARE_KEYS, markdown_table, print_summary, print_where, write_comparison
from .resume import run_config
from .run_memory import pinned_fit
from .runner import comparison_stem, run_batch
from .settings import check_grid_conflicts, command_line_index, packaged_index, resolved_config, with_index
from .spec import BATCH_FORMAT, BatchSpec, QuestionsSpec, load_batch, resolve_path


def _log_to_batch_log_dir(spec: BatchSpec, config: Config, args: argparse.Namespace) -> None:
    """Logging was set up before the batch file was read: when its overrides: set paths.log_dir (and
    no --set replaces it), the log goes there from now on, as the run's config.yaml records. Only
    paths.log_dir is read: the whole config without a grid point may not be valid (an overlap the
    grid gives), and resolved_config names any bad setting, per grid point, before a run starts."""
    tree: dict[str, Any] = {}
    for item in [f"{k}={json.dumps(v)}" for k, v in spec.overrides.items()] + list(args.overrides):
        try:
            tree = _merge(tree, parse_override(item))
        except ConfigError:
            continue  # resolved_config names the bad item
    paths = tree.get("paths")
    if not isinstance(paths, dict) or "log_dir" not in paths:
        return
    try:
        log_dir = type(config.paths).model_validate({**config.paths.model_dump(), "log_dir": paths["log_dir"]}).log_dir
    except ValidationError:
        return  # resolved_config names it
    if log_dir != config.paths.log_dir:
        from ..logging_setup import setup_logging

        setup_logging(log_dir, args.verbose, args.command)


def _note_default_index(args: argparse.Namespace, config: Config, spec: BatchSpec, base: Path,
                        named_by: str | None) -> None:
    """A --config file that names the packaged default index/default is not taken as a batch's
    index (a copy of configs/default.yaml would send every batch there): say so when one does and
    the batch has no index of its own, since a user who wrote it may well want that folder."""
    if named_by is not None or spec.index:
        return
    default = packaged_index()
    if Path(config.paths.index_dir).resolve() != Path(default).resolve():
        return
    for f in getattr(args, "config", None) or []:
        try:  # only regular files: a pipe (--config <(...)) was read once already
            data = load_yaml_unique(Path(f).read_text(encoding="utf-8")) if Path(f).is_file() else None
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
            continue
        paths = data.get("paths") if isinstance(data, dict) else None
        if isinstance(paths, dict) and "index_dir" in paths:
            own = resolve_path(base, spec.output_dir) / spec.name / "index"
            print(f"note: --config {f} gives paths.index_dir {paths['index_dir']}, the packaged default, which a "
                  f"batch does not take as its index; this one uses {own} (pass --index {default} to use that "
                  "folder)", file=sys.stderr)
            return


def cmd_batch(args: argparse.Namespace, config: Config) -> int:
    """Run the questions of a YAML batch file (corpus, questions, overrides, optional grid).

    Example: sirag batch configs/batch-sherlock-dev.yaml --limit 10
    Re-running resumes: questions already in results.jsonl are skipped; a resume with other
    settings than the run was made with is refused (give the batch another name in its name: field).
    """
    file_before_ray(args)
    if args.file is None:
        raise BatchError(f"sirag batch needs a batch YAML file: sirag batch FILE ({BATCH_FORMAT})")
    spec, base = load_batch(args.file)
    _log_to_batch_log_dir(spec, config, args)
    check_grid_conflicts(spec, args.overrides, memory=getattr(args, "memory", None))  # names --memory as such
    # --index (or --set paths.index_dir) replaces the batch file's index:
    spec, named_by = with_index(spec, *command_line_index(args, config))
    _note_default_index(args, config, spec, base, named_by)
    executor = make_executor(args.ray, args.workers, spec.executor)
    summaries = run_batch(spec, base, config, limit=args.limit, loop=False if args.no_retry else None,
                          progress=sys.stderr.isatty() and not args.json, offset=args.offset, cli_overrides=args.overrides, guard_index=named_by, executor=executor)
    if args.json:
        print(json.dumps(summaries))
    else:
        for s in summaries:
            print_summary(s)
        out_root = resolve_path(base, spec.output_dir)
        print_where(out_root, summaries, [comparison_stem(out_root, spec.name, summaries)])
    return 0


def cmd_eval(args: argparse.Namespace, config: Config) -> int:
    """Evaluate against gold answers: a batch YAML, or --dataset FILE --corpus DIR.

    Examples: sirag eval configs/batch-sherlock-dev.yaml --compare-no-retry
              sirag eval --dataset ../shared/data/qa/squad2_dev_normans.json --limit 40
              sirag eval configs/batch-sherlock-dev.yaml --retrieval-only
    """
    file_before_ray(args)
    if args.file and args.dataset:
        raise BatchError("give a batch YAML file or --dataset FILE, not both (a batch file names its questions)")
    if args.separate_no_retry_run and not args.compare_no_retry:
        raise BatchError("--separate-no-retry-run only changes how --compare-no-retry runs the loop-off side; "
                         "add --compare-no-retry")
    index = command_line_index(args, config)
    if args.file:
        spec, base = load_batch(args.file)
        _log_to_batch_log_dir(spec, config, args)
        if args.name:  # a second run of the same batch under another name (its own folder)
            spec = spec.model_copy(update={"name": args.name})
        # Like --index, these replace the batch file's own settings (relative to the current folder).
        if args.output_dir:
            spec = spec.model_copy(update={"output_dir": str(Path(args.output_dir).resolve())})
        if args.corpus:
            spec = spec.model_copy(update={"corpus": [str(Path(c).resolve()) for c in args.corpus]})
    elif args.dataset:
        default_name = re.sub(r"[^\w.-]", "_", Path(args.dataset).stem)[:80].strip(".") or "dataset"
        spec = BatchSpec(name=args.name or default_name, corpus=args.corpus or [],
                         questions=QuestionsSpec(file=str(Path(args.dataset).resolve())),
                         output_dir=args.output_dir or "runs")
        base = Path.cwd()
    else:
        raise BatchError("sirag eval needs a batch YAML file or --dataset FILE (with --corpus DIR unless it is SQuAD)")
    spec, named_by = with_index(spec, *index)
    _note_default_index(args, config, spec, base, named_by)
    if args.compare_no_retry and (args.no_retry or not spec.loop
                                  or not resolved_config(config, spec, {}, str(config.paths.index_dir), args.overrides).loop.enabled):
        raise BatchError("--compare-no-retry compares the loop with no loop, but this run has the loop off "
                         "(--no-retry, the batch file's loop: false, or loop.enabled: false); drop one of them")
    if args.retrieval_only:
        ignored = [name for name, given in (("--workers", args.workers not in (None, 1)),
                                            ("--ray", args.ray is not None), ("--no-retry", args.no_retry),
                                            ("--compare-no-retry", args.compare_no_retry)) if given]
        if ignored:
            raise BatchError(f"--retrieval-only scores retrieval alone, with the default strategy and no answers: "
                             f"{', '.join(ignored)} would be ignored; drop {'them' if len(ignored) > 1 else 'it'}")
        if spec.grid:
            print(f"note: --retrieval-only scores every chunker x retriever with the batch's settings; the grid "
                  f"({', '.join(spec.grid)}) is not used", file=sys.stderr)
        from ..evaluation.retrieval_eval import retrieval_eval

        table = retrieval_eval(spec, base, config, limit=args.limit, ks=(1, 3, 5, 10), cli_overrides=args.overrides,
                               offset=args.offset, guard_index=named_by)
        print(json.dumps(table) if args.json else table["markdown"])
        if nowhere := table["evidence_found_nowhere"]:
            shown = ", ".join(nowhere[:10]) + (f" and {len(nowhere) - 10} more" if len(nowhere) > 10 else "")
            print(f"note: the evidence of {len(nowhere)} question(s) ({shown}) is in no passage of the index, so "
                  "their recall is 0 whatever the retriever: an evidence quote must be the documents' words "
                  "verbatim (spaces and line breaks aside) within one passage; check those quotes",
                  file=sys.stderr)
        return 0
    check_grid_conflicts(spec, args.overrides, memory=getattr(args, "memory", None))  # names --memory as such
    progress = sys.stderr.isatty() and not args.json
    derived = (("-plain",) if args.separate_no_retry_run else ("-single", "-plain")) if args.compare_no_retry else ()
    executor = make_executor(args.ray, args.workers, spec.executor)
    summaries = run_batch(spec, base, config, limit=args.limit, loop=False if args.no_retry else None,
                          progress=progress, offset=args.offset,
                          cli_overrides=args.overrides, guard_index=named_by, derived=derived, executor=executor)
    out_root = resolve_path(base, spec.output_dir)
    comparisons = [comparison_stem(out_root, spec.name, summaries)]  # a grid's, as run_batch wrote it
    if summaries and not any("correct_or_rightly_refused" in s for s in summaries):
        print("warning: no question of this evaluation has gold answers, so nothing was graded (no accuracy, "
              "refusal or calibration figures); give each question 'answers' (or 'answerable: false'), or use "
              "`sirag batch` to only run questions", file=sys.stderr)
    if args.compare_no_retry:
        loop_runs = [s for s in summaries if s["loop"]]  # a grid point with the loop off is its own loop-off run
        current = {it.id: it for it in load_items(spec, base)}  # the derived runs summarise what the loop run did
        if args.separate_no_retry_run:
            # calibrate=False: the loop run's gold labels must not calibrate its own comparison; and
            # each loop-off run is scored with the confidence weights of the loop run it is set beside.
            noloop = run_batch(spec, base, config, limit=args.limit, loop=False,
                               progress=progress, offset=args.offset, cli_overrides=args.overrides,
                               guard_index=named_by, calibrate=False, executor=executor,
                               fits={s["run"] + "-noloop": pinned_fit(out_root / s["run"]) for s in loop_runs})
            comparisons.append(comparison_stem(out_root, spec.name, noloop))
            summaries += noloop
        else:
            for s in loop_runs:
                run_cfg = run_config(out_root / s["run"])
                summaries.append(derive_single_attempt_run(out_root / s["run"], run_cfg.loop, current))
        # No loop at all: the first attempt's answer as the model gave it, no checks, no refusal but its own decline.
        summaries += [derive_plain_run(out_root / s["run"], current) for s in loop_runs]
        summaries = on_common_questions(summaries, out_root, current)
        comparisons.append(out_root / f"{spec.name}-loop-vs-noloop")
        write_comparison(summaries, comparisons[-1])
    if args.json:
        print(json.dumps(summaries))
    else:
        for s in summaries:
            print_summary(s)
        if len(summaries) > 1:
            print(markdown_table([{"run": s["run"], **{k: s.get(k) for k in COMPARE_KEYS}} for s in summaries]))
        print_where(out_root, summaries, comparisons)
    return 0
