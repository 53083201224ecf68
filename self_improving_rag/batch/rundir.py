"""A run folder's results file (``results.jsonl``, one fsynced line per question) and its lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import BatchError
from ..evaluation.datasets import QAItem
from .run_memory import FIT_FILE


#: Fields every result row has (an error row too), which summaries and resumes read.
ROW_KEYS = ("id", "question", "answer", "refused", "attempts")


def read_done(path: Path, cut: bool = True) -> dict[str, dict]:
    """Rows already written; a torn last line (killed mid-write) is cut off (left as it is without
    ``cut``). A damaged line with rows after it is not a torn write: BatchError names it, and
    nothing is cut."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    lines = path.read_bytes().splitlines(keepends=True)
    good_bytes = 0
    for n, raw in enumerate(lines, start=1):
        try:
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict) or "id" not in row:
                raise ValueError("not a result row")
        except (UnicodeDecodeError, ValueError):
            if n < len(lines):
                raise BatchError(f"{path}: line {n} is damaged and {len(lines) - n} row(s) follow it; delete or "
                                 "repair that line (its question is then asked again)") from None
            break
        if not raw.endswith(b"\n"):
            break
        lacking = [k for k in ROW_KEYS if k not in row]
        if lacking:  # a whole line, so not a torn write: an edited or foreign row, named, nothing cut
            raise BatchError(f"{path}: line {n} (id {row['id']!r}) is not a whole result row (no "
                             f"{', '.join(repr(k) for k in lacking)}); delete or repair that line (its question is "
                             "then asked again)")
        done[row["id"]] = row
        good_bytes += len(raw)
    if cut and good_bytes != path.stat().st_size:
        with path.open("r+b") as fh:
            fh.truncate(good_bytes)
    return done


def kept_done(done: dict[str, dict], by_id: dict[str, QAItem]) -> dict[str, dict]:
    """The rows of :func:`read_done` whose questions stay answered. Error rows of earlier versions
    recorded setup failures (no index, generator down) as answers: those questions are asked
    again; only unusable questions stay done. An unusable question whose text has changed since
    (shortened, say) is asked again."""
    return {k: r for k, r in done.items() if "error" not in r or (
        r.get("error_type") == "InputError"
        and (k not in by_id or same_text(r.get("question"), by_id[k].question)))}


def same_text(a: str | None, b: str | None) -> bool:
    return " ".join((a or "").split()) == " ".join((b or "").split())


def run_finished(run_dir: Path, items: list[QAItem], by_id: dict[str, QAItem]) -> bool:
    """Whether every one of ``items`` is answered in the run's results already (read only: a
    damaged file counts as unfinished, and is named when the run opens it)."""
    try:
        done = kept_done(read_done(run_dir / "results.jsonl", cut=False), by_id)
    except (BatchError, OSError):
        return False
    return all(it.id in done for it in items)


def lock_run(run_dir: Path):
    """Hold an exclusive lock on a run folder: two processes resuming the same run would
    both answer the questions left and write them twice."""
    import fcntl

    fh = (run_dir / ".lock").open("w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        fh.close()
        raise BatchError(f"another sirag process is running {run_dir}; wait for it (or use --workers "
                         "to run one batch in parallel)") from exc
    return fh


def remove_unused_run(run_dir: Path) -> None:
    """After a failed start (no index, no model, Ctrl-C while loading) of a run this call
    created: remove what it wrote if no question was answered, and the folder if that leaves
    it empty (an index built inside it stays). Called while the run's lock is held."""
    results = run_dir / "results.jsonl"
    if results.exists() and results.stat().st_size > 0:
        return
    for name in ("results.jsonl", "config.yaml", "corpus.json", FIT_FILE, ".lock"):
        (run_dir / name).unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass  # something else is in it: keep it


def append_row(path: Path, row: dict) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
