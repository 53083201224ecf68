"""Running a batch (:func:`run_batch`): every grid point a run in its own folder, each question
asked once and written as one result row (:func:`ask_row`), in this process or on an executor."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from ..config import Config, to_yaml
from ..errors import BatchError
from ..evaluation.datasets import QAItem
from .grading import grade, summarise
from .inputs import (check_documents, check_folders, check_index_keeps_documents, check_index_sources, ensure_index,
                     index_chunkers, run_inputs, write_squad_corpus)
from .noloop import check_derived_folder
from .questions import load_items
from .report import write_comparison
from .resume import check_resume_config, check_same_questions, corpus_record, current_rows, run_changes
from .run_memory import LATEST_FIT, archive_memory_leftovers, fit_calibration_once, pin_fit, record_gold
from .rundir import append_row, kept_done, lock_run, read_done, remove_unused_run, run_finished
from .settings import check_grid_conflicts, grid_points, point_label, resolved_config
from .spec import BatchSpec


def _evidence_hit(item: QAItem, answer_json: dict) -> bool | None:
    from ..evaluation.retrieval_metrics import evidence_hit

    if not item.evidence or not answer_json["attempts"]:
        return None
    texts = answer_json["attempts"][0].get("hit_texts") or []
    return any(evidence_hit(t, q) for t in texts for q in item.evidence)


def ask_row(engine, item: QAItem, run_id: str, loop: bool) -> dict:
    """One question's result row. A question the engine cannot take (InputError: empty, too long)
    or whose prompt the generator failed on (GenerationError: too long for n_ctx, nothing
    produced, refused by the server) becomes an error row, asked again on resume unless it is an
    InputError. Any other error (the generator unavailable, the index, the memory) stops the run
    instead of being written for every question."""
    from ..errors import GenerationError, GeneratorUnavailableError, InputError

    try:
        ans = engine.ask(item.question, loop=loop, run_id=run_id, item_id=item.id)
        data = ans.to_json()
        # Texts of the first attempt's hits, for evidence recall (not part of the ask contract).
        data["attempts"][0]["hit_texts"] = [p.text for p in ans.attempts[0].passages]
    except GeneratorUnavailableError:
        raise
    except (InputError, GenerationError) as exc:
        data = {"question": item.question, "answer": None, "refused": True, "refusal_reason": f"error: {exc}",
                "confidence": 0.0, "sources": [], "attempts": [], "timings_ms": {}, "error": str(exc),
                "error_type": type(exc).__name__}
    row = {"id": item.id, "gold_answers": list(item.answers), "answerable": item.answerable, **data}
    row["evidence_hit"] = _evidence_hit(item, data)
    row["grade"] = grade(row)
    if row["attempts"]:
        row["attempts"][0].pop("hit_texts", None)
    return row


def run_batch(spec: BatchSpec, base: Path, base_config: Config, *, limit: int | None = None,
              loop: bool | None = None, progress: bool = True, suffix: str = "",
              on_row: Callable[[dict], None] | None = None, offset: int | None = None,
              cli_overrides: tuple[str, ...] | list[str] = (), guard_index: str | None = None,
              derived: tuple[str, ...] = (), calibrate: bool = True, fits: dict[str, Any] | None = None,
              executor: Any = None) -> list[dict]:
    """Run every grid point; returns one summary per run. ``cli_overrides`` are the command
    line's ``--set`` items, applied over the batch file's overrides. ``guard_index``: the index
    was named on the command line (what named it: "--index", --set paths.index_dir, or a --config
    file's paths.index_dir), so one built from other documents is refused, not re-ingested.
    ``derived``: suffixes of the runs to be derived from each loop run afterwards (``-plain``),
    whose folders are checked first: another run there stops this one before it starts.
    ``calibrate``: fit the confidence weights first when memory's labels call for it
    (``calibration.auto_fit``); the runs themselves never fit. ``fits``: for a run (by name) that
    starts now, the calibration fit to score it with instead of memory's latest (a separate
    loop-off run takes its loop run's, see :func:`pin_fit`). ``executor``: asks the questions
    instead of this process (a :class:`~self_improving_rag.ray_pool.RayPool`)."""
    from tqdm import tqdm

    items = load_items(spec, base)
    n_all = len(items)
    # The summary covers every question of the dataset the run has answered (not only this
    # call's --offset/--limit slice), always with the dataset's current text and gold.
    by_id = {it.id: it for it in items}
    offset = spec.offset if offset is None else offset
    if offset:
        items = items[offset:]
    limit = limit or spec.limit
    if limit:
        items = items[:limit]
    if not items:
        why = f": the offset {offset} skips all {n_all} of them; use a smaller offset (--offset or the batch file's offset:)" if n_all and offset else ""
        raise BatchError(f"batch {spec.name}: no questions to run{why}")
    loop = spec.loop if loop is None else loop
    # Nothing is written before every check that can refuse the batch has passed: a SQuAD file's
    # paragraphs are written right before its index is built (write_squad_corpus).
    out_root, index_dir, corpus, squad = run_inputs(spec, base, items)
    # Every grid point is checked before the first one runs: a typo in the last value must not
    # cost the earlier runs' hours.
    runs = []
    indexed = None if corpus else index_chunkers(index_dir)
    check_grid_conflicts(spec, cli_overrides)
    for point in grid_points(spec.grid):
        config = resolved_config(base_config, spec, point, index_dir, cli_overrides)
        # The chunkers the run will search: those it ingests with, or, with no corpus to ingest,
        # those its index holds. The engine would warn and answer with another chunker, under
        # this point's name.
        chunkers, source = ((list(config.ingestion.chunkers), "ingestion.chunkers") if indexed is None
                            else (indexed, f"the index {index_dir}"))
        if config.strategy.chunker not in chunkers:
            where = f"grid point {point_label(point)}" if point else "the settings"
            raise BatchError(f"batch {spec.name}: {where} ask for strategy.chunker {config.strategy.chunker!r}, "
                             f"which {source} ({', '.join(chunkers)}) does not hold; choose one of those"
                             + (" or add it to ingestion.chunkers" if indexed is None else
                                " or re-ingest that index with it in ingestion.chunkers"))
        point_loop = loop and config.loop.enabled  # loop.enabled: false (--set, overrides, grid) turns it off
        run_name = spec.name + ("" if not point else "-" + point_label(point)) + suffix + ("" if point_loop else "-noloop")
        runs.append((point, config, run_name, point_loop))
    names = [r[2] for r in runs]
    if len(set(names)) < len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise BatchError(f"batch {spec.name}: two grid points share the run folder {dup}; make the grid's values "
                         "differ in letters or digits")
    check_folders(out_root, [r[2] for r in runs], index_dir)
    for _, _, run_name, point_loop in runs:
        for suf in derived if point_loop else ():
            check_derived_folder(out_root / run_name, suf)
    check_documents(spec, index_dir, corpus, squad,
                    finished=lambda: all(run_finished(out_root / name, items, by_id) for _, _, name, _ in runs))
    if guard_index and corpus:
        check_index_sources(index_dir, corpus, guard_index)
    from ..memory import MemoryStore
    from ..retrieval.index import atomic_write_text

    for db in dict.fromkeys(c.paths.memory_db for _, c, _, _ in runs):
        # Opened (and migrated) once before any index is built: an unusable --memory path must not
        # be found only after minutes of ingesting.
        MemoryStore(db).close()
    # The confidence weights are settled once, here: the gold labels each run writes at its end
    # calibrate the next command, not the batch's later runs (they would be scored with weights
    # fitted on their own questions), and the engines that answer (Ray actors too) do not each fit.
    if calibrate:
        for db, config in {c.paths.memory_db: c for _, c, _, _ in reversed(runs) if c.calibration.auto_fit}.items():
            fit_calibration_once(db, config)
    runs = [(p, c.model_copy(update={"calibration": c.calibration.model_copy(update={"auto_fit": False})}), n, lp)
            for p, c, n, lp in runs]
    summaries = []
    for point, config, run_name, loop in runs:
        run_dir = out_root / run_name
        created = not run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
        results = run_dir / "results.jsonl"
        lock = lock_run(run_dir)
        bar = None
        failed = True
        try:
            done = kept_done(read_done(results), by_id)
            check_same_questions(run_dir, done, by_id)
            todo = [it for it in items if it.id not in done]
            # A finished run is only summarised again, whatever the settings now; a resume is
            # checked before any index is built for it.
            fit_id: Any = None
            if todo:
                if done:
                    check_resume_config(run_dir, config, len(done), corpus,
                                         guard_index)
                fit_id = pin_fit(run_dir, config.paths.memory_db, run_name, resumed=bool(done),
                                  start_with=(fits or {}).get(run_name, LATEST_FIT))
                if corpus and not guard_index:
                    check_index_keeps_documents(index_dir, corpus)  # only when it would be ingested into
                # Whole or not at all: a resume is refused when the record of the settings cannot be read.
                atomic_write_text(run_dir / "config.yaml", to_yaml(config))
                if corpus:
                    (run_dir / "corpus.json").write_text(json.dumps(corpus_record(corpus)), encoding="utf-8")
                    write_squad_corpus(squad, corpus)
                    ensure_index(config, corpus, index_dir, progress, out_root)
                # Once the run is known to go ahead: a refused resume leaves memory as it was.
                archive_memory_leftovers(config.paths.memory_db, run_name, todo)
            elif shown := run_changes(run_dir, config, corpus):
                print(f"note: run {run_name} is finished; its results are summarised as they were made. The "
                      f"settings given now differ ({shown}) and are not used: give the run another name to run "
                      "them", file=sys.stderr)
            else:  # the summary alone would read as if the questions had just been asked
                errors = sum(1 for it in items if "error" in done.get(it.id, {}))
                unasked = f" ({errors} of them could not be asked)" if errors else ""
                print(f"note: run {run_name}: the {len(items)} question(s) asked for were all answered before"
                      f"{unasked}, so "
                      "nothing was asked again; the summary is of the results as they were made (give the run "
                      "another name to ask them again)", file=sys.stderr)
            bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=run_name, unit="q",
                       disable=not progress or None)

            def keep(row: dict) -> None:
                append_row(results, row)
                if on_row:
                    on_row(row)
                if "error" in row:  # else only an errors= count at the end of the summary line says so
                    tqdm.write(f"note: run {run_name}: question {row['id']} could not be asked ({row['error']}); "
                               "it counts as wrong, under errors in the summary", file=sys.stderr)
                bar.update(1)

            if todo and executor is not None:
                executor.run(todo, run_name, keep, config, index_dir, loop, fit_id)
            elif todo:
                from ..engine import Engine
                from ..memory import MemoryStore

                engine = Engine(config, memory=MemoryStore(config.paths.memory_db), index_dir=index_dir,
                                fit_id=fit_id)
                try:
                    engine.warm_up()  # a missing index or model stops the run before any question
                    for it in todo:
                        keep(ask_row(engine, it, run_name, loop))
                finally:
                    engine.close()
            failed = False
        finally:
            if bar is not None:
                bar.close()
            if failed and created:
                remove_unused_run(run_dir)
            lock.close()  # closing the file releases the lock
        rows = current_rows(run_name, read_done(results), by_id)
        summary = {"run": run_name, "grid_point": point, "loop": loop, **summarise(rows)}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
        record_gold(config, run_name, rows)
        summaries.append(summary)
    if (stem := comparison_stem(out_root, spec.name, summaries, suffix)) is not None:
        write_comparison(summaries, stem)
    return summaries


def comparison_stem(out_root: Path, name: str, summaries: list[dict], suffix: str = "") -> Path | None:
    """Where :func:`run_batch` writes the comparison of its runs (``<stem>.json``, ``.md``, ``.png``),
    or None when it made one run (no comparison)."""
    if len(summaries) < 2:
        return None
    noloop = "" if any(s["loop"] for s in summaries) else "-noloop"  # as its runs are named
    return out_root / f"{name}{suffix}{noloop}-comparison"
