"""What a run reads from and writes to memory besides its answers: the calibration fit it is
scored with (pinned in its folder), answers left under its name, and its gold labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import BatchError
from ..evaluation.datasets import QAItem


def fit_calibration_once(db: str, config: Config) -> None:
    """The automatic calibration of a batch's memory store, before its runs (see run_batch)."""
    from ..evaluation.calibrate import auto_calibrate_with
    from ..memory import MemoryStore

    store = MemoryStore(db)
    try:
        done, _ = auto_calibrate_with(store, config)
    finally:
        store.close()
    if done:
        print(f"note: {done}", file=sys.stderr)


#: The run folder's record of the calibration fit its answers are scored with.
FIT_FILE = "calibration.json"


#: No fit recorded or asked for: memory's latest. The engine's ``LATEST_FIT``, written here too
#: because the engine module (and the models' libraries) is imported only once a run starts.
LATEST_FIT = "latest"


def pin_fit(run_dir: Path, memory_db: str, run_name: str, resumed: bool, start_with: Any = LATEST_FIT) -> Any:
    """The calibration fit a run's answers are scored with: memory's latest when the run starts,
    recorded in its folder (:data:`FIT_FILE`), and the recorded one when it resumes, so that a run
    split over several commands (``--limit``, a Ctrl-C, a fit stored meanwhile by another command)
    is scored by one confidence model, as its summary's AUROC and ECE assume. A run that starts
    with ``start_with`` (a fit id, or None for the default weights) records that one instead of
    the latest: a separate loop-off run is scored as the loop run it is compared with. A run
    started before fits were recorded gets memory's latest at its first resume, recorded then.
    Returns the fit's id (``Engine(fit_id=...)``), or None for the default weights."""
    from ..memory import MemoryStore

    path = run_dir / FIT_FILE
    store = MemoryStore(memory_db)
    try:
        latest = store.latest_calibration()
        latest_id = latest["id"] if latest else None
        if not resumed:
            chosen_id, chosen = latest_id, latest
            asked = store.calibration_fit(start_with) if start_with not in (LATEST_FIT, None) else None
            if start_with is None or asked is not None:  # the fit of the run this one is compared with
                chosen_id, chosen = start_with, asked
            path.write_text(json.dumps({"fit_id": chosen_id, "created_at": chosen and chosen["created_at"]}) + "\n",
                            encoding="utf-8")
            return chosen_id
        if not path.is_file():
            # A run started before fits were recorded: what scored its earlier answers is not known,
            # but from here on one fit does (memory's latest now), whatever is stored meanwhile.
            path.write_text(json.dumps({"fit_id": latest_id, "created_at": latest and latest["created_at"],
                                        "from_resume": True}) + "\n", encoding="utf-8")
            return latest_id
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            fit_id = recorded["fit_id"]
            if fit_id is not None and (isinstance(fit_id, bool) or not isinstance(fit_id, int)):
                raise ValueError(fit_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise BatchError(f"{path} is damaged ({exc}); it records which confidence weights run {run_name} was "
                             "scored with: restore it, or give the run another name to start afresh") from exc
        if fit_id is not None and store.calibration_fit(fit_id) is None:
            raise BatchError(f"run {run_name} was scored with calibration fit #{fit_id}, which memory {memory_db} does "
                             "not hold; resume it with the memory store it was started with (--memory), or give the "
                             "run another name")
        if fit_id != latest_id:
            print(f"note: run {run_name} goes on with the confidence weights its answers so far were scored with ("
                  + (f"calibration fit #{fit_id}" if fit_id is not None else "the default weights")
                  + f"); memory's newer fit #{latest_id} scores runs started from now on", file=sys.stderr)
        return fit_id
    finally:
        store.close()


def pinned_fit(run_dir: Path) -> Any:
    """The calibration fit a run's answers were scored with, as its :data:`FIT_FILE` records it
    (None for the default weights), or :data:`LATEST_FIT` when it records none (a run of an older
    sirag) or cannot be read."""
    try:
        fit_id = json.loads((run_dir / FIT_FILE).read_text(encoding="utf-8"))["fit_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return LATEST_FIT
    return fit_id if fit_id is None or (isinstance(fit_id, int) and not isinstance(fit_id, bool)) else LATEST_FIT


def archive_memory_leftovers(memory_db: str, run_name: str, todo: list[QAItem]) -> None:
    """Memory keys a batch's answers by (run name, question id) and hands back the answer it holds
    for a pair, so a question to ask that memory already holds under this run name would not get
    its new answer recorded, and its gold label would go to the old answer. Such answers (of a run
    interrupted before it wrote them, of another batch with this name, or of an earlier run whose
    results folder was deleted) are moved to the run name ``NAME@TIME``, with a note, and kept."""
    from ..memory import MemoryStore

    store = MemoryStore(memory_db)
    try:
        moved, name = store.archive_run_items(run_name, [it.id for it in todo])
    finally:
        store.close()
    if moved:
        print(f"note: memory {memory_db} held {moved} answer(s) under run name {run_name} to questions this run's "
              "results do not hold (from a run interrupted before it wrote them, another batch of this name, or an "
              f"earlier run whose results were deleted); they are kept under run name {name}, and these questions "
              "are asked and recorded again", file=sys.stderr)


def record_gold(config: Config, run_name: str, rows: list[dict]) -> None:
    """Gold labels become feedback in memory (for calibration), once per outcome: a re-run adds nothing, a user's label is never
    overridden, a changed verdict updates."""
    from ..memory import MemoryStore

    store = MemoryStore(config.paths.memory_db)
    elsewhere = 0
    try:
        for r in rows:
            oid = r.get("outcome_id")
            if oid and "correct" in r.get("grade", {}) and not r["refused"]:
                # A resumed run may have recorded earlier rows in another memory store (--memory).
                if not store.has_outcome(oid):
                    elsewhere += 1
                    continue
                store.add_feedback(oid, correct=r["grade"]["correct"], source="gold", note=run_name,
                                   keep_settled=True)
    finally:
        store.close()
    if elsewhere:
        print(f"note: {elsewhere} answer(s) of run {run_name} were recorded in another memory store, not in "
              f"{config.paths.memory_db}; their gold labels are not written here (`sirag memory merge` brings "
              "stores together)", file=sys.stderr)
