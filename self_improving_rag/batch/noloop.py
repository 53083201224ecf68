"""Comparisons with the loop off, derived from a loop run's rows: its first attempt finished
alone (``<run>-single``) and plain RAG (``<run>-plain``), and runs compared on the questions
they all answered."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..config import LoopConfig
from ..errors import BatchError
from ..evaluation.shipped import Gate, gate
from .grading import summarise
from .resume import current_rows
from .rundir import read_done


def _ungraded(row: dict) -> dict:
    """A derived row without the source row's grade (summarise grades it afresh)."""
    row.pop("grade", None)
    return row


def single_attempt_row(row: dict, threshold: float, check: Gate | None = None) -> dict:
    """The row the loop-off engine gives for the same question: its first attempt, finished alone.

    At temperature 0 with the same first strategy the engine is deterministic, so the first
    attempt of a loop-on run is exactly what a loop-off run would have produced; the final
    choice follows :func:`~self_improving_rag.decision.returned`, as in the engine: with ``check``
    (the return check of ``loop.target_precision``) its confidence and bar, else the loop's and
    ``threshold``.
    """
    from ..decision import returned

    if not row.get("attempts"):  # the engine refused the question itself (a user error row)
        return _ungraded({**row, "derived_from_first_attempt": True})
    a = row["attempts"][0]
    conf = float(a["signals"]["confidence"]["value"] or 0.0)
    if check is not None:
        conf = check.confidence((a["signals"]["confidence"].get("detail") or {}).get("features") or {})
    ok = returned([(a["answer"], conf, a["failure"], 1)], check.bar if check else threshold, 0.0) == 0
    out = {**row, "attempts": [a], "answer": a["answer"] if ok else None, "refused": not ok, "confidence": conf,
           "chosen_attempt": 1 if ok else None, "timings_ms": dict(a["timings_ms"]), "derived_from_first_attempt": True,
           # The outcome in memory is the loop-on one, and the row keeps only its final passages.
           "outcome_id": None, "sources": row.get("sources", []) if row.get("chosen_attempt") == 1 else []}
    out["refusal_reason"] = None if ok else f"single attempt: {a['failure']}: {a.get('failure_reason') or ''}".strip()
    return _ungraded(out)


def _loop_rows(run_dir: Path, items: dict[str, Any] | None) -> list[dict]:
    """A loop-on run's rows, restricted to ``items`` (by id) and graded with their gold when given."""
    rows = read_done(run_dir / "results.jsonl")
    return list(rows.values()) if items is None else current_rows(run_dir.name, rows, items, quiet=True)


def derive_single_attempt_run(run_dir: Path, loop: LoopConfig, items: dict[str, Any] | None = None) -> dict:
    """Write ``<run>-single`` (results.jsonl, summary.json) from a loop-on run's first attempts
    (of the questions in ``items``, with their current gold, when given), decided under the run's
    loop settings ``loop``."""
    check = gate(loop.target_precision)
    rows = [single_attempt_row(r, loop.answer_threshold, check) for r in _loop_rows(run_dir, items)]
    return _derive_run(run_dir, "-single", rows)


def plain_attempt_row(row: dict) -> dict:
    """The row plain RAG gives for the same question: the first attempt's answer as the model gave it.

    No checks and no confidence bar: the answer is withheld only when the model itself declined
    (or said nothing). With :func:`single_attempt_row` (one attempt, the engine's acceptance rule)
    and the loop-on row it splits the loop's gain into what refusing gives and what retries give.
    """
    if not row.get("attempts"):
        return _ungraded({**row, "derived_from_first_attempt": True})
    from ..feedback.attribution import NO_PASSAGE_REASON
    from ..generation.prompts import is_refusal

    a = row["attempts"][0]
    # The model's own words decide, not the engine's checks (its refusal signal also marks an
    # answer that only echoes the question, which plain RAG would return). The engine withholds
    # such an answer (answer None) and keeps the model's words as raw_answer.
    said = a["answer"] if a.get("answer") is not None else (a.get("raw_answer") or "")
    declined = not said.strip() or is_refusal(said)
    # With nothing retrieved the model was not asked (its attempt's failure_reason says so): plain
    # RAG then has nothing to answer from, and its row says that rather than that the model declined.
    why = f"plain RAG: {NO_PASSAGE_REASON}" if a.get("failure_reason") == NO_PASSAGE_REASON \
        else "plain RAG: the model declined"
    out = {**row, "attempts": [a], "answer": None if declined else said, "refused": declined,
           "confidence": float(a["signals"]["confidence"]["value"] or 0.0), "chosen_attempt": None if declined else 1,
           "timings_ms": dict(a["timings_ms"]), "derived_from_first_attempt": True, "outcome_id": None,
           "sources": row.get("sources", []) if row.get("chosen_attempt") == 1 else [],
           "refusal_reason": why if declined else None}
    return _ungraded(out)


def check_derived_folder(run_dir: Path, suffix: str) -> None:
    """Raise BatchError when ``<run><suffix>`` holds something other than a run derived from ``run``
    (a run of its own, or one derived from another run): deriving would overwrite it."""
    out_dir = run_dir.with_name(run_dir.name + suffix)
    if not out_dir.exists():
        return
    why = None
    if not out_dir.is_dir():
        why = "it is a file"
    elif (out_dir / "config.yaml").exists():
        why = "a run of its own"
    elif (out_dir / "summary.json").is_file():
        try:
            source = json.loads((out_dir / "summary.json").read_text(encoding="utf-8")).get("derived_from")
        except (OSError, ValueError, AttributeError):
            source = None
        if source != run_dir.name:
            why = f"derived from run {source}" if source else "a summary sirag did not derive from this run"
    elif any(p.name != "results.jsonl" for p in out_dir.iterdir()):
        why = "files sirag did not write there"
    if why:
        raise BatchError(f"{out_dir} already holds something else ({why}); the comparison with no loop writes its "
                         f"figures of run {run_dir.name} there: give the run another --name, or move that folder away")


def _derive_run(run_dir: Path, suffix: str, rows: list[dict]) -> dict:
    check_derived_folder(run_dir, suffix)
    out_dir = run_dir.with_name(run_dir.name + suffix)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "results.jsonl").open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    summary = {"run": out_dir.name, "grid_point": {}, "loop": False, "derived_from": run_dir.name, **summarise(rows)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def derive_plain_run(run_dir: Path, items: dict[str, Any] | None = None) -> dict:
    """Write ``<run>-plain`` (results.jsonl, summary.json) from a run's first attempts, answered as given."""
    return _derive_run(run_dir, "-plain", [plain_attempt_row(r) for r in _loop_rows(run_dir, items)])


def on_common_questions(summaries: list[dict], out_root: Path, items: dict[str, Any]) -> list[dict]:
    """The summaries of runs to be compared, each over the questions every one of them answered.
    A run's summary covers all the questions it has answered, over every command that ran it; a
    separate loop-off run made with another --offset/--limit than the loop run's earlier slices
    holds other questions, and its figures would be set beside figures of other questions. When
    the runs' questions differ, each is summarised again over the shared ones (its own
    summary.json keeps all of its questions), with a note; the summaries are returned as they are
    otherwise."""
    rows = {s["run"]: current_rows(s["run"], read_done(out_root / s["run"] / "results.jsonl"), items, quiet=True)
            for s in summaries}
    ids = {run: {r["id"] for r in rs} for run, rs in rows.items()}
    common = set.intersection(*ids.values()) if ids else set()
    if all(len(v) == len(common) for v in ids.values()):
        return summaries
    counts = ", ".join(f"{run} {len(v)}" for run, v in ids.items())
    if not common:
        raise BatchError(f"the runs compared share no question ({counts}); each run's results are kept, but "
                         "there is nothing to compare: give the loop-off run the --offset/--limit of the loop run")
    print(f"note: the runs compared answered different questions ({counts}); the comparison covers the "
          f"{len(common)} they all answered (each run's summary.json keeps all of its own)", file=sys.stderr)
    # Only the run's identity is kept: every figure comes from the shared questions (a figure the
    # subset cannot give must be absent, not the whole run's).
    keep = ("run", "grid_point", "loop", "derived_from")
    return [{**{k: s[k] for k in keep if k in s}, **summarise([r for r in rows[s["run"]] if r["id"] in common]),
             "compared_on": len(common)} for s in summaries]
