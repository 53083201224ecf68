"""Resuming a run: the settings, corpus and questions a run folder holds answers to must be
those given now (else the resume is refused rather than mixing them), and a summary reads the
run's rows with the dataset's current gold."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from ..config import NO_EFFECT, REMOVED_KEYS, Config, config_from_dict
from ..errors import BatchError, SiragError
from .rundir import same_text
from .settings import CONFIG_INDEX, SET_INDEX


# Settings added after runs were made, with the behaviour those runs had (a setting removed since
# is then compared with the value of REMOVED_KEYS, the behaviour sirag has now).
# A run's own engines never fit the confidence weights (run_batch settles them before the runs).
_ADDED_SINCE = {"policy.first_from_memory": True, "loop.retry_margin": 0.0, "calibration.auto_fit": False,
               "policy.rejudge": False, "scoring.question_check": False, "scoring.question_prior": False,
               # Older runs: attribution's dates rule (1: off) and the fit's penalty (fixed at 1).
               "thresholds.dates_unstated": 1.0, "calibration.l2": 1.0,
               # Older runs: one fit for every corpus.
               "calibration.per_corpus": False,
               # Older runs: no sampled replies.
               "scoring.agreement_samples": 0,
               # Older runs: every fit refitted every weight.
               "calibration.model": "full"}


# Settings that do not change what a run answers: a resume may change them.
_RESUME_FREE = ("paths.memory_db", "paths.log_dir", "paths.model_cache", "generator.n_threads", "generator.timeout_s",
                "ingestion.gutenberg_mirror", "ingestion.gutenberg_dir", "ingestion.max_file_mb",
                "calibration.auto_min_labels", "calibration.auto_refit_after")


def _changed_settings(run_dir: Path, config: Config) -> str:
    """The settings that differ from those the run was made with (``_RESUME_FREE`` aside; the index
    folder is compared: another corpus is another run), shown as 'key: old -> new, ...'; '' if none."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return ""
    try:
        stored = yaml.safe_load(stored_path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""  # an unreadable record of the settings cannot be compared (a resume is refused)

    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, dict):
            return {prefix: d}
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    a, b = flat(stored), flat(config.model_dump(mode="json"))
    # A setting the stored file lacks is one added to sirag since: it does not block a resume,
    # unless the run now asks for other than what the earlier rows were made with. A file that
    # names no removed setting was written since they were removed: it lacks those as every file
    # sirag writes now does.
    written_before_removal = any(k in a for k in REMOVED_KEYS)
    for key, before in _ADDED_SINCE.items():
        if written_before_removal or key not in REMOVED_KEYS:
            a.setdefault(key, before)
    # A setting removed since: the run's rows were made as sirag answers now only if it held the
    # value the code now behaves as.
    removed = {k: v for k, v in REMOVED_KEYS.items() if k in a and v is not NO_EFFECT}
    b.update(removed)
    changed = sorted(k for k in a if k in b and k not in _RESUME_FREE and a[k] != b[k])
    if any(k.startswith("strategy.") for k in changed) and False in (a.get("policy.first_from_memory"),
                                                                    b.get("policy.first_from_memory")):
        # Set by sirag itself when a strategy.* setting is given (the pinned strategy goes first):
        # naming it would blame a setting the user never touched.
        changed = [k for k in changed if k != "policy.first_from_memory"]
    shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" + (" (no longer a setting)" if k in removed else "")
                      for k in changed[:4])
    return shown + (", ..." if len(changed) > 4 else "")


def run_config(run_dir: Path) -> Config:
    """The settings a run was made with (its config.yaml); BatchError names the file when it cannot be read."""
    path = run_dir / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a mapping of settings")
        return config_from_dict(data, str(path))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError, SiragError) as exc:
        why = " ".join(str(exc).split())[:200]
        raise BatchError(f"{path} cannot be read as the run's settings ({why}); the comparison with no loop needs "
                         "them: restore the file, or run again under another --name") from None


def _corpus_change(run_dir: Path, corpus: list[Path]) -> str:
    """'corpus: old -> new' when the run's documents (``corpus.json``, written when it started) are
    not those given now; '' when they are, when none are given now (the index is used as it is), or
    when they were not recorded (a run of an older sirag)."""
    if not corpus:
        return ""
    try:
        before = json.loads((run_dir / "corpus.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return ""
    now = corpus_record(corpus)
    return "" if not isinstance(before, list) or sorted(before) == now else f"corpus: {sorted(before)!r} -> {now!r}"


def corpus_record(corpus: list[Path]) -> list[str]:
    """The corpus paths as ``corpus.json`` keeps them."""
    return sorted(str(p) for p in corpus)


def run_changes(run_dir: Path, config: Config, corpus: list[Path]) -> str:
    """The settings and corpus paths given now that differ from the run's, shown; '' if none."""
    return ", ".join(x for x in (_changed_settings(run_dir, config), _corpus_change(run_dir, corpus)) if x)


def check_resume_config(run_dir: Path, config: Config, n_done: int, corpus: list[Path],
                         named_by: str | None = None) -> None:
    """A resumed run must use the settings and the corpus paths its earlier results were made with.
    ``named_by``: what named the index folder given now (as :func:`command_line_index` says it), for
    the way back to the run's own index when that is what differs."""
    stored = run_dir / "config.yaml"
    try:
        readable = isinstance(yaml.safe_load(stored.read_text(encoding="utf-8")), dict)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        readable = False
    if not readable:
        # Nothing to compare with: a resume with other settings would mix them into one results.jsonl unseen.
        why = "cannot be read" if stored.exists() else "is missing"
        raise BatchError(f"{run_dir} already holds {n_done} result(s), but its config.yaml, the record of the "
                         f"settings they were made with, {why}, so a resume cannot tell whether it would mix "
                         "results of other settings. Restore that file, give the run another name (the batch "
                         "file's name:, or sirag eval --name NEW), or delete that folder to ask its questions again")
    shown = run_changes(run_dir, config, corpus)
    if shown:
        hint = _resume_index_hint(stored, config, named_by)
        raise BatchError(f"{run_dir} already holds {n_done} result(s) made with other settings ({shown}); "
                         f"resuming would mix them. Run with the same settings{hint}, give the run another name "
                         "(the batch file's name:, or sirag eval --name NEW), or delete that folder")


def _resume_index_hint(stored: Path, config: Config, named_by: str | None) -> str:
    """How to give a resumed run the index folder it was made with, when that is not the one given
    now: a run started before --set paths.index_dir and a --config file's paths.index_dir named a
    batch's index recorded its own folder, and the same command line now names another."""
    try:
        old = (yaml.safe_load(stored.read_text(encoding="utf-8")).get("paths") or {}).get("index_dir")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return ""
    if not isinstance(old, str) or not old or Path(old).resolve() == Path(config.paths.index_dir).resolve():
        return ""
    instead = {SET_INDEX: " in place of the --set paths.index_dir item, which names a batch's index",
               CONFIG_INDEX: ", which replaces the --config file's paths.index_dir"}.get(named_by or "", "")
    return f" (for its index: --index {shlex.quote(old)}{instead})"


def check_same_questions(run_dir: Path, done: dict[str, dict], items: dict[str, Any]) -> None:
    """A run folder's rows answer the questions they were asked: an id whose question text is now
    different (another dataset with the same name, or an edited one) would be summarised with the
    answer to another question, so the run is refused."""
    changed = [k for k, r in done.items() if k in items and not same_text(r.get("question"), items[k].question)]
    if changed:
        raise BatchError(
            f"{run_dir} holds answers to {len(changed)} question(s) whose text is different in this dataset (id "
            f"{changed[0]!r}: the run asked {' '.join(str(done[changed[0]].get('question')).split())[:80]!r}); a "
            "resume would mix answers to other questions into this run. Give the run another name (the batch "
            "file's name:, or sirag eval --name NEW), or delete that folder to ask them again"
        )


def current_rows(run_name: str, rows: dict[str, dict], items: dict[str, Any], quiet: bool = False) -> list[dict]:
    """The run's rows for the dataset's questions, with its current gold: rows for ids it no
    longer holds are left out, and gold edited since a row was written is the gold graded."""
    out, regraded = [], 0
    for k, r in rows.items():
        it = items.get(k)
        if it is None:
            continue
        if list(it.answers) != list(r.get("gold_answers") or []) or it.answerable != r.get("answerable"):
            r = {**r, "gold_answers": list(it.answers), "answerable": it.answerable}
            regraded += 1
        out.append(r)
    if len(out) < len(rows) and not quiet:
        print(f"note: run {run_name} holds {len(rows) - len(out)} result(s) for question ids this dataset no longer "
              "has; they are left out of its summary", file=sys.stderr)
    if regraded and not quiet:
        print(f"note: the gold answers of {regraded} question(s) changed since run {run_name} answered them; "
              "they are graded with the dataset's current gold", file=sys.stderr)
    return out
