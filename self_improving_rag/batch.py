"""YAML batch runs and the evaluation harness (``sirag batch``, ``sirag eval``).

A batch file names the corpus, the questions, config overrides and an optional grid; each
grid point is a run with its own folder holding ``results.jsonl`` (one line per question,
the ``sirag ask --json`` keys plus ``id`` and the gold fields), ``summary.json`` and the
resolved ``config.yaml``. Runs resume: questions already in ``results.jsonl`` are skipped,
and memory rows are keyed by (run, question id), so a killed run loses at most the question
in flight and never duplicates a row. A resume with settings that differ from the stored
``config.yaml`` (beyond ``_RESUME_FREE``) is refused rather than mixing two configurations, and
so is one whose questions have other text under the same ids (another dataset with the same
name); a summary grades with the dataset's current gold and leaves out ids it no longer has.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import json
import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .config import (NO_EFFECT, REMOVED_KEYS, Config, DuplicateKeyError, _merge, config_from_dict, default_config_text,
                     load_yaml_unique, no_yes_no_for_numbers, parse_override, pins_strategy, to_yaml)
from .errors import BatchError, ConfigError, SiragError
from .evaluation.datasets import QAItem, load_qa, squad_contexts
from .ray_pool import ExecutorSpec, file_before_ray, make_executor

log = logging.getLogger(__name__)


#: What a batch file holds, for messages about a malformed one.
BATCH_FORMAT = ("a batch file holds name:, questions: (file: a JSONL or SQuAD file, or inline: a list of "
                "question:/answers: items) and, unless the questions are a SQuAD file, corpus: (document folders) or "
                "index: (a built index); "
                "configs/batch-sherlock-dev.yaml in the repository is an example")


class QuestionsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str | None = None
    inline: list[dict[str, Any]] | None = None


class BatchSpec(BaseModel):
    """The schema of a batch YAML file (unknown keys fail, naming the key)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    corpus: list[str] = []
    index: str | None = None
    questions: QuestionsSpec
    overrides: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    output_dir: str = "runs"
    loop: bool = True
    limit: int | None = Field(None, ge=1)
    offset: int = Field(0, ge=0)  # skip the first N questions (before --limit)
    executor: ExecutorSpec | None = None  # ray: the questions are asked on Ray (ray_pool.py)

    @field_validator("name")
    @classmethod
    def check_name(cls, v: str) -> str:
        """A run folder name: 1-80 letters, digits, '_', '.', '-', and not '.' or '..'."""
        if not re.fullmatch(r"[\w.-]{1,80}", v) or v in (".", ".."):
            raise ValueError(f"{v!r} cannot name a run folder; use up to 80 letters, digits, '_', '.' or '-' "
                             "(no spaces or slashes, not '.' or '..')")
        return v

    @field_validator("limit", "offset", mode="before")
    @classmethod
    def check_number(cls, v: Any, info) -> Any:
        return no_yes_no_for_numbers(cls, v, info.field_name)

    @field_validator("overrides", "grid")
    @classmethod
    def dates_as_text(cls, v: dict[str, Any]) -> dict[str, Any]:
        """YAML reads an unquoted 2024-01-01 as a date, which no setting takes and which made
        json.dumps fail with an internal TypeError: such a value is the text as written."""
        return _dates_as_text(v)

    @field_validator("corpus")
    @classmethod
    def check_corpus(cls, v: list[str]) -> list[str]:
        """No blank entry: relative to the batch file, "" would be the batch file's own folder."""
        blank = [i + 1 for i, c in enumerate(v) if not str(c).strip()]
        if blank:
            raise ValueError(f"entry {blank[0]} is empty; list document files or folders (relative to the batch "
                             "file), or leave corpus: out for a SQuAD question file")
        return v


def _dates_as_text(value: Any) -> Any:
    import datetime

    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    return value


def load_batch(path: str | Path) -> tuple[BatchSpec, Path]:
    p = Path(path)
    if p.is_dir():
        raise BatchError(f"{p} is a folder, not a batch file; pass the path of a batch YAML file ({BATCH_FORMAT})")
    if not p.is_file():
        raise BatchError(f"batch file {p} not found; pass the path of a batch YAML file ({BATCH_FORMAT})")
    if p.suffix.lower() in (".json", ".jsonl"):
        # A question file given where the batch file goes: its keys would be reported as unknown.
        raise BatchError(f"{p} is a question file, not a batch YAML file: evaluate it with `sirag eval --dataset "
                         f"{shlex.quote(str(p))} --corpus DOCS` (a SQuAD file needs no --corpus), or name it under "
                         "questions: file: in a batch YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BatchError(f"{p}: not UTF-8 text (byte {exc.start} cannot be decoded); save the file as UTF-8") from exc
    try:
        data = load_yaml_unique(text)
    except DuplicateKeyError as exc:
        raise BatchError(f"{p}: the key {exc.key!r} is given twice in one mapping (line {exc.problem_mark.line + 1}); "
                         "YAML would keep only the last: keep one of them") from exc
    except (yaml.YAMLError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else f" ({exc.__class__.__name__})"
        why = f": {exc.problem}" if isinstance(getattr(exc, "problem", None), str) else ""
        raise BatchError(f"{p}: malformed YAML{where}{why}; fix the syntax") from exc
    if not isinstance(data, dict):
        raise BatchError(f"{p}: expected a mapping with name, corpus, questions")
    try:
        spec = BatchSpec.model_validate(data)
    except ValidationError as exc:
        # A mistyped key ("questionz") also makes the real one missing: name the mistyped key.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        err = errors[0]
        loc = ".".join(str(x) for x in err["loc"])
        what = f"unknown key '{loc}'" if err["type"] == "extra_forbidden" else f"'{loc}': {err['msg']}"
        value, key = err.get("input"), err["loc"][-1] if err["loc"] else "name"
        if value is None and err["loc"] and isinstance(err["loc"][-1], int):
            # "corpus: [a, ~]", or a "-" with nothing after it: an item of a list, not a key.
            where = ".".join(str(x) for x in err["loc"][:-1])
            what = (f"item {err['loc'][-1] + 1} of '{where}' is empty (YAML reads a '-' with nothing after it, or "
                    "~, as null): give the item its value, or remove the item")
        elif value is None and err["type"] not in ("extra_forbidden", "missing"):
            # "overrides:" uncommented with its entries left commented out, as in the example file.
            fix = "give it its value" if loc in ("name", "questions") else "give it its value, or remove the key too"
            what = (f"'{loc}' is empty (YAML reads a key with nothing after it, or only commented-out lines under "
                    f"it, as null): {fix}")
        elif (shape := _shape_fix(err["type"], err["loc"], value)) is not None:
            what = f"'{loc}' {shape}"
        elif err["type"] == "string_type" and isinstance(value, bool):
            # YAML reads an unquoted off, on, yes or no as a yes/no value.
            what += f" (YAML read it as the yes/no value {str(value).lower()}: quote what you wrote, e.g. {key}: \"off\")"
        elif err["type"] == "string_type" and isinstance(value, (int, float)):
            what += f" (YAML read it as the number {value}: quote it, e.g. {key}: \"{value}\")"
        raise BatchError(f"{p}: {what}; {BATCH_FORMAT}") from exc
    if not spec.questions.file and not spec.questions.inline:
        raise BatchError(f"{p}: questions needs 'file' (JSONL or SQuAD JSON) or 'inline' items")
    if spec.questions.file and spec.questions.inline:
        # Only one would be asked: refuse rather than silently leave the other out.
        raise BatchError(f"{p}: questions has both 'file' and 'inline'; give one of them (put the inline "
                         "questions in the file, or the file's questions inline)")
    _check_no_index_dir_setting(p, spec)
    return spec, p.parent.resolve()


#: For a key given in the wrong shape (pydantic says only "Input should be a valid list", or names
#: its own class), how the key is written.
_SHAPES = {
    ("corpus",): "corpus: [docs] (or one '- docs' line under corpus: for each file or folder)",
    ("questions",): "questions: {file: questions.jsonl}, or questions: {inline: [{question: ..., answers: [...]}]}",
    ("overrides",): "overrides: {strategy.top_k: 6} (or one 'key: value' line under overrides: for each setting)",
    ("grid",): "grid: {strategy.top_k: [4, 8]} (a setting key, then the list of its values)",
    ("questions", "inline"): "inline: [{question: ..., answers: [...]}] (or one '- question: ...' item per question)",
}


def _shape_fix(kind: str, loc: tuple, value: Any) -> str | None:
    """What to say of a batch-file key given as the wrong kind of YAML value (a text where a list
    or a mapping goes, a list where a mapping goes), with how to write it; None for other errors."""
    def shown(v: Any) -> str:  # text quoted unless YAML reads it back as the same text inside [...]
        if isinstance(v, bool):
            return str(v).lower()  # YAML's spelling, not Python's True
        if not isinstance(v, str):
            return str(v)
        try:  # "2024", "yes", "off", "null", "a: b", "#x" read back as something else
            plain = yaml.safe_load(f"[{v}]") == [v]
        except yaml.YAMLError:
            plain = False
        return v if plain else json.dumps(v, ensure_ascii=False)

    got = ("a text" if isinstance(value, str) else "a list" if isinstance(value, list)
           else "a mapping" if isinstance(value, dict) else _yaml_kind(value) or type(value).__name__)
    scalar = not isinstance(value, (list, dict))
    if kind == "list_type" and loc in _SHAPES:
        # A corpus entry is text: a number or date YAML read is quoted back as the text written.
        text = (value if isinstance(value, str) else None if isinstance(value, bool) or value is None
                else str(value) if scalar else None)
        fix = f"corpus: [{shown(text)}]" if loc == ("corpus",) and text is not None else _SHAPES[loc]
        return f"must be a list, not {got}: write {fix}"
    if kind == "list_type" and len(loc) == 2 and loc[0] == "grid":
        example = f"[{shown(value)}]" if scalar else "[value1, value2]"
        return f"must be a list of values, one run each, not {got}: write {loc[1]}: {example} (or set one value " \
               "under overrides:)"
    if kind in ("dict_type", "model_type") and loc in _SHAPES:
        fix = (f"questions: {{file: {shown(value)}}}" if loc == ("questions",) and isinstance(value, str)
               else _SHAPES[loc])
        return f"must be a mapping, not {got}: write {fix}"
    if kind == "dict_type" and len(loc) == 3 and loc[:2] == ("questions", "inline"):
        example = f"{{question: {shown(value)}}}" if isinstance(value, str) else "{question: ..., answers: [...]}"
        return f"must be a mapping with question: (and optional answers:), not {got}: write {example}"
    return None


def _check_no_index_dir_setting(p: Path, spec: BatchSpec) -> None:
    """A batch's index folder is its ``index:`` (else ``<output_dir>/<name>/index``; ``--index``
    replaces it), which every run is given: a paths.index_dir under overrides: or grid: would be
    replaced by it unseen, and the run would build or search another index than the one named."""
    for k, v in spec.overrides.items():
        try:
            paths = parse_override(f"{k}={json.dumps(v)}").get("paths")
        except ConfigError:
            continue  # resolved_config names the bad item
        if isinstance(paths, dict) and "index_dir" in paths:
            value = paths["index_dir"]
            raise BatchError(f"{p}: overrides: sets paths.index_dir ({value}), but a batch keeps its index in the "
                             "folder its index: names (else --config's paths.index_dir, else "
                             "<output_dir>/<name>/index), which would replace it unseen; write index: "
                             f"{_as_index_entry(value, p)} instead (read from the batch file's folder), and take "
                             "paths.index_dir out of overrides:")
    for g, varied in _grid_keys(spec.grid).items():
        # A grid's values are deep-merged: "paths: [{memory_db: a.db}, ...]" leaves the index alone.
        if any(k == "paths.index_dir" or k.startswith("paths.index_dir.") for k in varied):
            raise BatchError(f"{p}: grid: varies {g}, but every run of a batch uses the one index its index: names "
                             "(else --config's paths.index_dir, else <output_dir>/<name>/index), which would "
                             "replace the grid's values unseen; run one batch per index, each with its own "
                             "index: and name:")


def _as_index_entry(value: Any, p: Path) -> str:
    """A paths.index_dir value (read from the current folder) as index: reads it (from the batch
    file's folder): relative to that folder when inside it, else the absolute path."""
    text = os.path.expanduser(str(value))
    if os.path.isabs(text):
        return text
    target, folder = Path(text).resolve(), p.parent.resolve()
    return str(target.relative_to(folder)) if target.is_relative_to(folder) and target != folder else str(target)


def _grid_keys(grid: dict[str, Any]) -> dict[str, list[str]]:
    """The dotted keys each grid key's values set: a mapping value is deep-merged into the
    settings, so ``strategy: [{top_k: 2}]`` varies strategy.top_k, not the whole of strategy."""
    return {g: list(dict.fromkeys(k for v in (values if isinstance(values, list) else [values])
                                  for k in _setting_keys(f"{g}={json.dumps(v)}")))
            for g, values in grid.items()}


def _resolve(base: Path, path: str) -> Path:
    return (base / os.path.expanduser(path)).resolve()


_INLINE_FIELDS = ("id", "question", "answers", "answerable", "evidence", "book")
#: Keys users write for the gold answers (``gold_answers`` is what results.jsonl calls them).
_GOLD_SYNONYMS = ("gold_answers", "gold", "gold_answer")


def load_items(spec: BatchSpec, base: Path) -> list[QAItem]:
    if spec.questions.file:
        items = load_qa(_resolve(base, spec.questions.file))
    else:
        # Inline questions are read like QA JSONL items (evidence, book and extra fields kept,
        # the same checks), except that the id and the answers may be left out.
        from .evaluation.datasets import _check_unique_ids, _jsonl_item

        items = []
        where = Path(f"{spec.name} (inline questions)")
        for i, row in enumerate(spec.questions.inline or []):
            if not isinstance(row, dict) or "question" not in row:
                keys = [str(k) for k in row] if isinstance(row, dict) else []
                close = next((k for k in keys if difflib.get_close_matches(k, ["question"], n=1, cutoff=0.75)), None)
                hint = (f"; it has the key '{close}': did you mean 'question'?" if close else
                        f"; it has the keys {', '.join(repr(k) for k in keys)}" if keys else "")
                raise BatchError(f"{spec.name}: inline question {i + 1} has no 'question' field{hint}")
            for key in row:
                # Other keys are kept as the item's metadata; one that looks like a misspelt
                # field would silently leave the question ungraded.
                close = (["answers"] if key in _GOLD_SYNONYMS else
                         difflib.get_close_matches(str(key), _INLINE_FIELDS, n=1, cutoff=0.8))
                if key not in _INLINE_FIELDS and close and close[0] not in row:
                    raise BatchError(f"{spec.name}: inline question {i + 1} has the key '{key}'; did you mean "
                                     f"'{close[0]}'? (fields: {', '.join(_INLINE_FIELDS)}; other keys are kept as "
                                     "metadata)")
            _check_inline_text(spec.name, i, row)
            obj = {"id": f"q{i + 1:03d}", "answers": [], **row}
            item = _jsonl_item(where, f"question {i + 1}", obj)
            if "answers" not in row and "answerable" not in row:
                # No gold given: the question is asked, not graded (and never labelled in memory).
                item = dataclasses.replace(item, answerable=None)
            items.append(item)
        given = [row.get("id") for row in spec.questions.inline or []]
        for i, item in enumerate(items):
            # An id sirag gave (q001, q002, ...) can clash with one written on another question.
            clash = next((j for j, other in enumerate(items) if j != i and other.id == item.id), None)
            if clash is not None and given[i] is None:
                raise BatchError(f"{spec.name}: inline question {i + 1} has no id and gets '{item.id}' by its place, "
                                 f"which inline question {clash + 1} names as its own; give question {i + 1} an id, "
                                 "or rename the other")
        _check_unique_ids(where, items)
    return items


def _yaml_kind(value: Any) -> str | None:
    """What YAML read an unquoted value as, when that is not text (None for text)."""
    import datetime

    if isinstance(value, bool):
        return "a yes/no value"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    if value is None:
        return "null (nothing)"
    return None


def _check_inline_text(name: str, i: int, row: dict) -> None:
    """An inline question's text fields must be text. YAML reads an unquoted 1523, yes or
    2020-01-01 as a number, a yes/no value or a date: the answer a user wrote for "When was the
    guild founded?" is then refused as "not a list of strings", which names no value and reads as
    if the list itself were wrong. Name the value and say to quote it."""
    for key in ("question", "answers", "evidence"):
        if key not in row:
            continue
        # A whole list left empty (evidence: ~) is accepted as no list, as in a JSONL file.
        values = [row[key]] if key == "question" else row[key] if isinstance(row[key], list) else []
        for v in values:
            kind = _yaml_kind(v)
            if kind is None:
                continue
            if v is None:  # nothing to quote: an empty value ("question: ~", "answers: [~]")
                raise BatchError(f"{name}: inline question {i + 1}: '{key}' holds an empty value (YAML reads "
                                 f"it as {kind}); give it text")
            shown = "yes" if v is True else "no" if v is False else str(v)
            example = f'"{shown}"' if key == "question" else f'["{shown}"]'
            # The value as YAML read it: "1.50" is shown as 1.5, "on" as yes; the quotes keep what was written.
            raise BatchError(f"{name}: inline question {i + 1}: '{key}' holds {v!r}, which YAML reads as {kind}, "
                             f"not text; put the text as you wrote it in quotes (YAML read it as {example})")


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    if not grid:
        return [{}]
    keys = list(grid)
    for k in keys:
        if not isinstance(grid[k], list) or not grid[k]:
            raise BatchError(f"grid key '{k}' needs a non-empty list of values")
    return [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]


def _setting_keys(item: str) -> list[str]:
    """The dotted keys one ``key=value`` item sets ("strategy={top_k: 6}" sets strategy.top_k)."""
    def flat(tree: Any, prefix: str) -> list[str]:
        if not isinstance(tree, dict) or not tree:
            return [prefix]
        return [k for key, v in tree.items() for k in flat(v, f"{prefix}.{key}" if prefix else str(key))]

    try:
        return flat(parse_override(item), "")
    except ConfigError:  # resolved_config names the bad item
        return []


def check_grid_conflicts(spec: BatchSpec, cli_overrides: tuple[str, ...] | list[str] = (),
                         memory: str | None = None) -> None:
    """A key the grid varies that a --set item also gives: each grid point's value replaces it (the
    grid comes last), so the setting typed on the command line would be silently left unused. (The
    batch file's own overrides: may hold a key its grid varies: both are in one file, in view.)
    ``memory``: the --memory option, which main() appends to ``cli_overrides`` as a paths.memory_db item."""
    if not spec.grid:
        return
    varied = [(k, g) for g, keys in _grid_keys(spec.grid).items() for k in keys]
    items = list(cli_overrides)
    from_memory = len(items) if memory is None else max(
        (i for i, item in enumerate(items) if item == f"paths.memory_db={memory}"), default=len(items))
    for i, item in enumerate(items):
        # main() adds policy.first_from_memory=false itself when a --set pins a strategy.* key.
        if item.replace(" ", "") == "policy.first_from_memory=false":
            continue
        for key in _setting_keys(item):
            k, g = next(((k, g) for k, g in varied if key == k or key.startswith(k + ".") or k.startswith(key + ".")),
                        (None, None))
            if k is None:
                continue
            grid_key = k if k == g else f"{k} (under {g})"
            flag, drop = ("--memory", "drop --memory") if i == from_memory else ("--set", "drop the --set item")
            raise BatchError(f"batch {spec.name}: {key} is given with {flag}, but the grid varies {k} and each grid "
                             f"point's value would replace it unseen; {drop}, or take {grid_key} out of the batch "
                             "file's grid:")


def resolved_config(base_config: Config, spec: BatchSpec, point: dict[str, Any], index_dir: str,
                    cli_overrides: tuple[str, ...] | list[str] = ()) -> Config:
    """Settings of one run: defaults < --config < the batch file's overrides < --set (the
    command line wins over the file) < the grid point (a grid varies its keys)."""
    data = yaml.safe_load(default_config_text())
    data = _merge(data, base_config.model_dump(mode="json"))
    for k, v in spec.overrides.items():
        data = _merge(data, parse_override(f"{k}={json.dumps(v)}"))
    for item in cli_overrides:
        data = _merge(data, parse_override(item))
    for k, v in point.items():
        data = _merge(data, parse_override(f"{k}={json.dumps(v)}"))
    explicit = [*spec.overrides.items(), *cli_overrides, *point.items()]
    if pins_strategy(explicit):  # a strategy the file or the grid asks for is used, not memory's choice
        data = _merge(data, {"policy": {"first_from_memory": False}})
    data = _merge(data, {"paths": {"index_dir": index_dir}})
    try:
        return config_from_dict(data, f"batch {spec.name}")
    except ConfigError as exc:
        raise BatchError(str(exc)) from exc


def point_label(point: dict[str, Any]) -> str:
    """A grid point as part of a run folder's name: key=value pairs, with any character that could
    leave the output folder or trouble a shell ('/', spaces, quotes, ...) turned into '_'."""
    label = "-".join(f"{k.split('.')[-1]}={v}" for k, v in point.items()) or "default"
    return re.sub(r"[^\w.=,+-]", "_", label).strip(".")[:120] or "point"


# -- results file -----------------------------------------------------------------------

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


def _run_config(run_dir: Path) -> Config:
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
    now = _corpus_record(corpus)
    return "" if not isinstance(before, list) or sorted(before) == now else f"corpus: {sorted(before)!r} -> {now!r}"


def _corpus_record(corpus: list[Path]) -> list[str]:
    """The corpus paths as ``corpus.json`` keeps them."""
    return sorted(str(p) for p in corpus)


def _run_changes(run_dir: Path, config: Config, corpus: list[Path]) -> str:
    """The settings and corpus paths given now that differ from the run's, shown; '' if none."""
    return ", ".join(x for x in (_changed_settings(run_dir, config), _corpus_change(run_dir, corpus)) if x)


def _check_resume_config(run_dir: Path, config: Config, n_done: int, corpus: list[Path],
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
    shown = _run_changes(run_dir, config, corpus)
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


def _same_text(a: str | None, b: str | None) -> bool:
    return " ".join((a or "").split()) == " ".join((b or "").split())


def _check_same_questions(run_dir: Path, done: dict[str, dict], items: dict[str, Any]) -> None:
    """A run folder's rows answer the questions they were asked: an id whose question text is now
    different (another dataset with the same name, or an edited one) would be summarised with the
    answer to another question, so the run is refused."""
    changed = [k for k, r in done.items() if k in items and not _same_text(r.get("question"), items[k].question)]
    if changed:
        raise BatchError(
            f"{run_dir} holds answers to {len(changed)} question(s) whose text is different in this dataset (id "
            f"{changed[0]!r}: the run asked {' '.join(str(done[changed[0]].get('question')).split())[:80]!r}); a "
            "resume would mix answers to other questions into this run. Give the run another name (the batch "
            "file's name:, or sirag eval --name NEW), or delete that folder to ask them again"
        )


def _current_rows(run_name: str, rows: dict[str, dict], items: dict[str, Any], quiet: bool = False) -> list[dict]:
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


def _index_sources(index_dir: str) -> list[str] | None:
    """The paths the live index at ``index_dir`` was ingested from; None when there is no index
    or it is damaged (ingest rebuilds a damaged one, and says so)."""
    from .retrieval.index import CorpusIndex

    idx = CorpusIndex(index_dir)
    if idx.current_dir() is None:
        return None
    try:
        return list(idx.manifest().get("sources") or [])
    except SiragError:
        return None


def _check_index_sources(index_dir: str, corpus: list[Path], named_by: str = "--index") -> None:
    """An index named on the command line (``named_by``: --index, --set paths.index_dir, or a
    --config file's paths.index_dir) that was built from other documents is not re-ingested from
    the batch's corpus: that would replace the user's documents in it."""
    sources = sorted(_index_sources(index_dir) or [])
    wanted = sorted(str(Path(c).resolve()) for c in corpus)
    if sources and sources != wanted:
        raise BatchError(f"the index {index_dir} ({named_by}) was built from {', '.join(sources)}, not from this "
                         f"batch's corpus ({', '.join(wanted)}); ingesting the corpus there would replace its "
                         f"documents. Pass another --index (a new folder is built){_config_fix(named_by)}, or make "
                         "the corpus the same files (the batch file's corpus:, or eval's --corpus)")


def _config_fix(named_by: str) -> str:
    return " or change paths.index_dir in the --config file" if named_by == CONFIG_INDEX else ""


def _check_index_keeps_documents(index_dir: str, corpus: list[Path]) -> None:
    """The batch's own index (its ``index:``, or the run's default) follows its corpus, so paths
    added to the corpus are ingested into it; but an ingest that would drop documents the index
    holds (built from other paths, e.g. with `sirag ingest`) is refused rather than replace them."""
    wanted = sorted({Path(c).resolve() for c in corpus})
    # A source is kept when the corpus names it or a folder that holds it (is_relative_to covers both).
    dropped = sorted(s for s in _index_sources(index_dir) or [] if not any(Path(s).is_relative_to(w) for w in wanted))
    if dropped:
        raise BatchError(f"the index {index_dir} holds documents from {', '.join(dropped)}, which this batch's corpus "
                         f"({', '.join(map(str, wanted))}) does not list; ingesting the corpus there would remove them. "
                         "Add those paths to the corpus, or run under another name (the batch file's name:, or sirag "
                         "eval --name NEW) with another index (the batch file's index:, or --index NEW), or rebuild "
                         "that index on purpose with `sirag ingest --rebuild`")


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


def _kept_done(done: dict[str, dict], by_id: dict[str, QAItem]) -> dict[str, dict]:
    """The rows of :func:`read_done` whose questions stay answered. Error rows of earlier versions
    recorded setup failures (no index, generator down) as answers: those questions are asked
    again; only unusable questions stay done. An unusable question whose text has changed since
    (shortened, say) is asked again."""
    return {k: r for k, r in done.items() if "error" not in r or (
        r.get("error_type") == "InputError"
        and (k not in by_id or _same_text(r.get("question"), by_id[k].question)))}


def _finished(run_dir: Path, items: list[QAItem], by_id: dict[str, QAItem]) -> bool:
    """Whether every one of ``items`` is answered in the run's results already (read only: a
    damaged file counts as unfinished, and is named when the run opens it)."""
    try:
        done = _kept_done(read_done(run_dir / "results.jsonl", cut=False), by_id)
    except (BatchError, OSError):
        return False
    return all(it.id in done for it in items)


def _lock_run(run_dir: Path):
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


def _remove_unused_run(run_dir: Path) -> None:
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


# -- scoring ----------------------------------------------------------------------------

def grade(row: dict) -> dict:
    """Per-question gold scores for a result row."""
    from .evaluation.metrics import contains_gold, exact_match, token_f1

    out: dict[str, Any] = {}
    if row.get("answerable") is None:
        return out
    if row["answerable"]:
        from .generation.prompts import strip_citations

        # Citations are the engine's bookkeeping, not part of the answer text being graded.
        pred = strip_citations(row.get("answer") or "")
        golds = row.get("gold_answers") or []
        if golds:
            out["em"] = exact_match(pred, golds) if pred else 0.0
            out["f1"] = token_f1(pred, golds) if pred else 0.0
            out["contains"] = contains_gold(pred, golds) if pred else 0.0
            out["correct"] = bool(not row["refused"] and (out["contains"] or out["em"] or out["f1"] >= 0.6))
    else:
        # A question the engine failed on (an error row) was not refused by judgement.
        out["correct"] = bool(row["refused"]) and "error" not in row
    return out


def summarise(rows: list[dict]) -> dict:
    """The evaluation summary of a run."""
    from .evaluation.metrics import (auroc, auroc_interval, expected_calibration_error, percentiles,
                                     reliability_bins, refusal_metrics, risk_coverage)

    s: dict[str, Any] = {"n": len(rows)}
    if not rows:
        return s
    for r in rows:
        r["grade"] = grade(r)  # always graded by the current rules, also for resumed rows
    graded_all = [r for r in rows if "correct" in r.get("grade", {})]
    # A question the engine could not process (an error row: too long, no words, ...) counts as
    # wrong in the scores, but it was not refused by judgement: the refusal and confidence
    # figures leave it out, and the summary counts it.
    graded = [r for r in graded_all if "error" not in r]
    ans = [r for r in graded_all if r["answerable"]]
    s["errors"] = sum(1 for r in rows if "error" in r)
    s["answered"] = sum(1 for r in rows if not r["refused"])
    s["refused"] = sum(1 for r in rows if r["refused"] and "error" not in r)
    if graded_all:
        s["correct_or_rightly_refused"] = sum(r["grade"]["correct"] for r in graded_all) / len(graded_all)
    if ans:
        for k in ("em", "f1", "contains"):
            s[k] = sum(r["grade"].get(k, 0.0) for r in ans) / len(ans)
    if graded:
        ref = refusal_metrics([r["refused"] for r in graded], [r["answerable"] for r in graded])
        s["refusal"] = ref
        conf = [float(r["confidence"]) for r in graded]
        ok = [1 if r["grade"]["correct"] else 0 for r in graded]
        # Selective answering over every question: answers ranked by confidence, a refusal after
        # every answer (it answers nothing: ranked at -1), each row right or wrong by its grade (an answer to an
        # unanswerable question is wrong, a refusal of one right).
        rc = risk_coverage([-1.0 if r["refused"] else float(r["confidence"]) for r in graded], ok)
        s["aurc"] = rc.get("aurc")
        s["accuracy_at_80_coverage"] = rc.get("accuracy_at_coverage")
        s["risk_coverage_curve"] = rc.get("curve")
        # Confidence is the probability that an *answer* is correct: measured on the answers
        # (what `sirag calibrate` fits and reports). The all-rows figures also count a right
        # refusal as "correct" at its (low) confidence, which no confidence can be calibrated for.
        # Every answer, also those to unanswerable questions (wrong by definition).
        answered_rows = [r for r in graded if not r["refused"]]
        if answered_rows:
            a_conf = [float(r["confidence"]) for r in answered_rows]
            a_ok = [1 if r["grade"]["correct"] else 0 for r in answered_rows]
            # What a user got: of the graded answers returned, how many were right (withholding a
            # wrong answer to an answerable question changes nothing in correct_or_rightly_refused).
            s["answered_right"] = sum(a_ok)
            s["answered_wrong"] = len(a_ok) - sum(a_ok)
            s["answered_accuracy"] = sum(a_ok) / len(a_ok)
            s["confidence_auroc_answered"] = auroc(a_conf, a_ok)
            # How far that AUROC could move on as many other questions like these (one row per question).
            s["confidence_auroc_answered_interval"] = auroc_interval(a_conf, a_ok)
            s["ece_answered"] = expected_calibration_error(a_conf, a_ok)
            s["aurc_answered"] = risk_coverage(a_conf, a_ok).get("aurc")
        s["confidence_auroc"] = auroc(conf, ok)
        s["ece"] = expected_calibration_error(conf, ok)
        s["reliability"] = reliability_bins(conf, ok)
    faith = [a["signals"]["faithfulness"]["value"] for r in rows for a in r["attempts"]
             if a["number"] == r.get("chosen_attempt") and a["signals"]["faithfulness"]["value"] is not None]
    s["faithfulness_mean"] = sum(faith) / len(faith) if faith else None
    ev = [r["evidence_hit"] for r in rows if r.get("evidence_hit") is not None]
    s["evidence_in_context_first_attempt"] = sum(ev) / len(ev) if ev else None
    stages: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r["timings_ms"].items():
            stages.setdefault(k, []).append(v)
    s["latency_ms"] = {k: percentiles(v) for k, v in stages.items()}
    # Per question the engine took: an error row has no attempts, and would dilute the costs.
    taken = [r for r in rows if "error" not in r]
    for key, per_row in (("prompt_tokens_per_question", lambda r: sum(a["prompt_tokens"] for a in r["attempts"])),
                         ("attempts_per_question", lambda r: len(r["attempts"])),
                         ("first_attempt_success", lambda r: bool(r["attempts"])
                          and r["attempts"][0]["failure"] == "NONE")):
        s[key] = sum(per_row(r) for r in taken) / len(taken) if taken else None
    return s


def _evidence_hit(item: QAItem, answer_json: dict) -> bool | None:
    from .evaluation.metrics import evidence_hit

    if not item.evidence or not answer_json["attempts"]:
        return None
    texts = answer_json["attempts"][0].get("hit_texts") or []
    return any(evidence_hit(t, q) for t in texts for q in item.evidence)


# -- running ----------------------------------------------------------------------------

def _ask_row(engine, item: QAItem, run_id: str, loop: bool) -> dict:
    """One question's result row. A question the engine cannot take (InputError: empty, too long)
    or whose prompt the generator failed on (GenerationError: too long for n_ctx, nothing
    produced, refused by the server) becomes an error row, asked again on resume unless it is an
    InputError. Any other error (the generator unavailable, the index, the memory) stops the run
    instead of being written for every question."""
    from .errors import GenerationError, GeneratorUnavailableError, InputError

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


#: How long a batch waits for another process's ingest of its index before giving up.
INDEX_WAIT_S = 600.0


def ensure_index(config: Config, corpus: list[Path], index_dir: str, progress: bool,
                 out_root: Path | None = None) -> None:
    """Ingest the corpus when its index is missing or its files changed (cheap when unchanged). The
    batch's output folder (``out_root``) is left out of the corpus's folders: its results are not
    documents."""
    from .ingestion.pipeline import ingest
    from .retrieval.embedder import embedder_from_config

    embedder = embedder_from_config(config)
    # Batches started together on one index (shards, a grid and its comparison) take turns: the
    # second finds the index up to date once the first has built it, instead of failing.
    report = ingest([str(p) for p in corpus], config, embedder, index_dir=index_dir, progress=progress,
                    exclude=(out_root,) if out_root is not None else (), wait_s=INDEX_WAIT_S)
    # What `sirag ingest` would say: which documents were (re)indexed and why, and which files were left out.
    for line in report.summary_notes():
        print(f"note: {line}", file=sys.stderr)
    for line in report.notices():
        print(line, file=sys.stderr)


def run_inputs(spec: BatchSpec, base: Path, items: list[QAItem]) -> tuple[Path, str, list[Path], Path | None]:
    """The output folder, the index folder, the corpus paths of a batch, and the SQuAD file whose
    paragraphs are its corpus (None when the corpus is the user's documents). A SQuAD file without
    a corpus gets its paragraphs written under the output folder, in a folder named after the
    dataset (shared by every run of it, so one index serves them all; never beside a user's
    index): the corpus names that folder, and :func:`write_squad_corpus` writes it once every
    check that can refuse the batch has passed (a refused batch leaves the output folder as it was)."""
    out_root = _resolve(base, spec.output_dir)
    index_dir = str(_resolve(base, spec.index)) if spec.index else str(out_root / spec.name / "index")
    corpus = [_resolve(base, c) for c in spec.corpus]
    squad = None
    if not corpus and spec.questions.file and items and items[0].context is not None:
        squad = _resolve(base, spec.questions.file)
        paragraphs = out_root / "corpora" / re.sub(r"[^\w.-]", "_", squad.stem)
        # A file in the way is named now, before anything is written (mkdir would fail later
        # with a bare "Not a directory").
        _check_output_folder(out_root)
        if (f := _file_in_the_way(paragraphs)) is not None:
            raise BatchError(f"{f} is a file, where the paragraphs of {squad.name} go (the corpus of a SQuAD "
                             "file, under <output_dir>/corpora/); move that file away, or give another output "
                             "folder (the batch file's output_dir:, or sirag eval --output-dir DIR)")
        corpus = [paragraphs]
    return out_root, index_dir, corpus, squad


def write_squad_corpus(squad: Path | None, corpus: list[Path]) -> None:
    """Write the paragraphs of ``squad`` (from :func:`run_inputs`) into the corpus folder it names,
    right before the corpus is ingested; nothing when the corpus is the user's documents."""
    if squad is not None:
        squad_corpus(squad, corpus[0])


def _index_chunkers(index_dir: str) -> list[str] | None:
    """The chunkers a built index holds (its manifest), or None when there is no readable index
    (check_documents and the engine say what is wrong with it)."""
    from .retrieval.index import CorpusIndex

    try:
        index = CorpusIndex(index_dir)
        return list(index.manifest().get("chunkers", {})) if index.current_dir() is not None else None
    except (OSError, ValueError, SiragError):
        return None


def _file_in_the_way(folder: Path) -> Path | None:
    """The file standing where ``folder`` or one of its parents must be a folder, if any."""
    for p in (folder, *folder.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _check_output_folder(out_root: Path) -> None:
    if (f := _file_in_the_way(out_root)) is not None:
        what = "is a file, not a folder" if f == out_root else f"cannot be made: {f} is a file"
        raise BatchError(f"the output folder {out_root} {what}; give another output folder (the batch file's "
                         "output_dir:, or sirag eval --output-dir DIR), or move that file away")


def _check_folders(out_root: Path | None, run_names: list[str], index_dir: str) -> None:
    """Before anything is written: a file where the output folder, a run's folder or the index
    folder goes made mkdir fail with a bare "Not a directory" or "File exists". ``out_root`` is
    None when nothing is written there (``--retrieval-only`` with an index elsewhere; a SQuAD
    file's paragraphs, written there once every check has passed, are checked by run_inputs)."""
    if out_root is not None:
        _check_output_folder(out_root)
    for name in run_names:
        if (out_root / name).exists() and not (out_root / name).is_dir():
            raise BatchError(f"{out_root / name} is a file, where run {name} keeps its results; move that file "
                             "away, or give the run another name (the batch file's name:, or sirag eval --name NEW)")
    if (f := _file_in_the_way(Path(index_dir))) is not None:
        what = "is a file, not a folder" if f == Path(index_dir) else f"cannot be made: {f} is a file"
        raise BatchError(f"the index folder {index_dir} {what}; give another index folder "
                         "(the batch file's index:, or --index DIR), or move that file away")


def check_documents(spec: BatchSpec, index_dir: str, corpus: list[Path], squad: Path | None = None,
                    finished: Callable[[], bool] | None = None) -> None:
    """Before anything is written: a batch needs documents to answer from, or an index of them,
    and every corpus path must exist (the ingest would refuse a missing one, but only after the
    memory store and the output folder were made). ``squad``: the corpus is that file's
    paragraph folder, written later. ``finished``: asked only when a corpus path is missing, whether
    every run is answered already; such runs are only summarised again, and nothing is ingested, so
    a corpus path gone since is not needed."""
    if not corpus and not spec.index and not Path(index_dir).is_dir():
        raise BatchError(f"batch {spec.name}: no corpus and no index: these questions carry no passages of their "
                         "own (only SQuAD files do); give the documents with corpus: in the batch file or "
                         "eval's --corpus DIR, or an index built from them with --index DIR")
    missing = [str(p) for p in corpus if not p.exists()] if squad is None else []
    if missing and not (finished is not None and finished()):
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise BatchError(f"batch {spec.name}: the corpus path {missing[0]} does not exist{more}; nothing was "
                         "changed. Fix the path or leave it out (the batch file's corpus:, read from its folder, "
                         "or eval's --corpus)")


def squad_corpus(squad_file: Path, out_dir: Path) -> Path:
    """Write the SQuAD paragraphs as one text file each (the corpus of a SQuAD evaluation), and
    remove the folder's other paragraph files: the folder is named after the file's stem, so
    another dataset of that name (``a/sq.json``, then ``b/sq.json``), or this one before an edit
    (a paragraph removed, a title changed), left paragraphs there that questions of this file
    would otherwise be answered from."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = set()
    for doc_id, text in squad_contexts(squad_file):
        p = out_dir / f"{doc_id}.txt"
        written.add(p.name)
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
    for stale in out_dir.glob("*.txt"):
        # Only paragraph files ("<title slug>_p<NN>.txt", as squad_contexts names them): any other
        # file there was not written by sirag.
        if stale.name not in written and _PARAGRAPH_FILE.fullmatch(stale.name):
            stale.unlink()
    return out_dir


_PARAGRAPH_FILE = re.compile(r"[a-z0-9_]+_p\d{2,}\.txt")


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
    loop-off run takes its loop run's, see :func:`_pin_fit`). ``executor``: asks the questions
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
    indexed = None if corpus else _index_chunkers(index_dir)
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
    _check_folders(out_root, [r[2] for r in runs], index_dir)
    for _, _, run_name, point_loop in runs:
        for suf in derived if point_loop else ():
            _check_derived_folder(out_root / run_name, suf)
    check_documents(spec, index_dir, corpus, squad,
                    finished=lambda: all(_finished(out_root / name, items, by_id) for _, _, name, _ in runs))
    if guard_index and corpus:
        _check_index_sources(index_dir, corpus, guard_index)
    from .memory import MemoryStore
    from .retrieval.index import atomic_write_text

    for db in dict.fromkeys(c.paths.memory_db for _, c, _, _ in runs):
        # Opened (and migrated) once before any index is built: an unusable --memory path must not
        # be found only after minutes of ingesting.
        MemoryStore(db).close()
    # The confidence weights are settled once, here: the gold labels each run writes at its end
    # calibrate the next command, not the batch's later runs (they would be scored with weights
    # fitted on their own questions), and the engines that answer (Ray actors too) do not each fit.
    if calibrate:
        for db, config in {c.paths.memory_db: c for _, c, _, _ in reversed(runs) if c.calibration.auto_fit}.items():
            _fit_calibration_once(db, config)
    runs = [(p, c.model_copy(update={"calibration": c.calibration.model_copy(update={"auto_fit": False})}), n, lp)
            for p, c, n, lp in runs]
    summaries = []
    for point, config, run_name, loop in runs:
        run_dir = out_root / run_name
        created = not run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
        results = run_dir / "results.jsonl"
        lock = _lock_run(run_dir)
        bar = None
        failed = True
        try:
            done = _kept_done(read_done(results), by_id)
            _check_same_questions(run_dir, done, by_id)
            todo = [it for it in items if it.id not in done]
            # A finished run is only summarised again, whatever the settings now; a resume is
            # checked before any index is built for it.
            fit_id: Any = None
            if todo:
                if done:
                    _check_resume_config(run_dir, config, len(done), corpus,
                                         guard_index)
                fit_id = _pin_fit(run_dir, config.paths.memory_db, run_name, resumed=bool(done),
                                  start_with=(fits or {}).get(run_name, _LATEST))
                if corpus and not guard_index:
                    _check_index_keeps_documents(index_dir, corpus)  # only when it would be ingested into
                # Whole or not at all: a resume is refused when the record of the settings cannot be read.
                atomic_write_text(run_dir / "config.yaml", to_yaml(config))
                if corpus:
                    (run_dir / "corpus.json").write_text(json.dumps(_corpus_record(corpus)), encoding="utf-8")
                    write_squad_corpus(squad, corpus)
                    ensure_index(config, corpus, index_dir, progress, out_root)
                # Once the run is known to go ahead: a refused resume leaves memory as it was.
                _archive_memory_leftovers(config.paths.memory_db, run_name, todo)
            elif shown := _run_changes(run_dir, config, corpus):
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
                from .engine import Engine
                from .memory import MemoryStore

                engine = Engine(config, memory=MemoryStore(config.paths.memory_db), index_dir=index_dir,
                                fit_id=fit_id)
                try:
                    engine.warm_up()  # a missing index or model stops the run before any question
                    for it in todo:
                        keep(_ask_row(engine, it, run_name, loop))
                finally:
                    engine.close()
            failed = False
        finally:
            if bar is not None:
                bar.close()
            if failed and created:
                _remove_unused_run(run_dir)
            lock.close()  # closing the file releases the lock
        rows = _current_rows(run_name, read_done(results), by_id)
        summary = {"run": run_name, "grid_point": point, "loop": loop, **summarise(rows)}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
        _record_gold(config, run_name, rows)
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


def _ungraded(row: dict) -> dict:
    """A derived row without the source row's grade (summarise grades it afresh)."""
    row.pop("grade", None)
    return row


def single_attempt_row(row: dict, threshold: float) -> dict:
    """The row the loop-off engine gives for the same question: its first attempt, finished alone.

    At temperature 0 with the same first strategy the engine is deterministic, so the first
    attempt of a loop-on run is exactly what a loop-off run would have produced; the final
    choice follows :func:`~self_improving_rag.decision.acceptable`, as in the engine.
    """
    from .decision import acceptable

    if not row.get("attempts"):  # the engine refused the question itself (a user error row)
        return _ungraded({**row, "derived_from_first_attempt": True})
    a = row["attempts"][0]
    conf = float(a["signals"]["confidence"]["value"] or 0.0)
    ok = acceptable(a["answer"], conf, a["failure"], threshold)
    out = {**row, "attempts": [a], "answer": a["answer"] if ok else None, "refused": not ok, "confidence": conf,
           "chosen_attempt": 1 if ok else None, "timings_ms": dict(a["timings_ms"]), "derived_from_first_attempt": True,
           # The outcome in memory is the loop-on one, and the row keeps only its final passages.
           "outcome_id": None, "sources": row.get("sources", []) if row.get("chosen_attempt") == 1 else []}
    out["refusal_reason"] = None if ok else f"single attempt: {a['failure']}: {a.get('failure_reason') or ''}".strip()
    return _ungraded(out)


def _loop_rows(run_dir: Path, items: dict[str, Any] | None) -> list[dict]:
    """A loop-on run's rows, restricted to ``items`` (by id) and graded with their gold when given."""
    rows = read_done(run_dir / "results.jsonl")
    return list(rows.values()) if items is None else _current_rows(run_dir.name, rows, items, quiet=True)


def derive_single_attempt_run(run_dir: Path, threshold: float, items: dict[str, Any] | None = None) -> dict:
    """Write ``<run>-single`` (results.jsonl, summary.json) from a loop-on run's first attempts
    (of the questions in ``items``, with their current gold, when given)."""
    return _derive_run(run_dir, "-single", [single_attempt_row(r, threshold) for r in _loop_rows(run_dir, items)])


def plain_attempt_row(row: dict) -> dict:
    """The row plain RAG gives for the same question: the first attempt's answer as the model gave it.

    No checks and no confidence bar: the answer is withheld only when the model itself declined
    (or said nothing). With :func:`single_attempt_row` (one attempt, the engine's acceptance rule)
    and the loop-on row it splits the loop's gain into what refusing gives and what retries give.
    """
    if not row.get("attempts"):
        return _ungraded({**row, "derived_from_first_attempt": True})
    from .feedback.attribution import NO_PASSAGE_REASON
    from .generation.prompts import is_refusal

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


def _check_derived_folder(run_dir: Path, suffix: str) -> None:
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
    _check_derived_folder(run_dir, suffix)
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


def _fit_calibration_once(db: str, config: Config) -> None:
    """The automatic calibration of a batch's memory store, before its runs (see run_batch)."""
    from .evaluation.calibrate import auto_calibrate_with
    from .memory import MemoryStore

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
_LATEST = "latest"


def _pin_fit(run_dir: Path, memory_db: str, run_name: str, resumed: bool, start_with: Any = _LATEST) -> Any:
    """The calibration fit a run's answers are scored with: memory's latest when the run starts,
    recorded in its folder (:data:`FIT_FILE`), and the recorded one when it resumes, so that a run
    split over several commands (``--limit``, a Ctrl-C, a fit stored meanwhile by another command)
    is scored by one confidence model, as its summary's AUROC and ECE assume. A run that starts
    with ``start_with`` (a fit id, or None for the default weights) records that one instead of
    the latest: a separate loop-off run is scored as the loop run it is compared with. A run
    started before fits were recorded gets memory's latest at its first resume, recorded then.
    Returns the fit's id (``Engine(fit_id=...)``), or None for the default weights."""
    from .memory import MemoryStore

    path = run_dir / FIT_FILE
    store = MemoryStore(memory_db)
    try:
        latest = store.latest_calibration()
        latest_id = latest["id"] if latest else None
        if not resumed:
            chosen_id, chosen = latest_id, latest
            asked = store.calibration_fit(start_with) if start_with not in (_LATEST, None) else None
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
    (None for the default weights), or :data:`_LATEST` when it records none (a run of an older
    sirag) or cannot be read."""
    try:
        fit_id = json.loads((run_dir / FIT_FILE).read_text(encoding="utf-8"))["fit_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return _LATEST
    return fit_id if fit_id is None or (isinstance(fit_id, int) and not isinstance(fit_id, bool)) else _LATEST


def _archive_memory_leftovers(memory_db: str, run_name: str, todo: list[QAItem]) -> None:
    """Memory keys a batch's answers by (run name, question id) and hands back the answer it holds
    for a pair, so a question to ask that memory already holds under this run name would not get
    its new answer recorded, and its gold label would go to the old answer. Such answers (of a run
    interrupted before it wrote them, of another batch with this name, or of an earlier run whose
    results folder was deleted) are moved to the run name ``NAME@TIME``, with a note, and kept."""
    from .memory import MemoryStore

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


def _record_gold(config: Config, run_name: str, rows: list[dict]) -> None:
    """Gold labels become feedback in memory (for calibration), once per outcome: a re-run adds nothing, a user's label is never
    overridden, a changed verdict updates."""
    from .memory import MemoryStore

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


COMPARE_KEYS = ("n", "correct_or_rightly_refused", "answered_accuracy", "em", "f1", "contains",
                "first_attempt_success", "attempts_per_question", "prompt_tokens_per_question", "aurc", "aurc_answered",
                "ece", "confidence_auroc", "ece_answered", "confidence_auroc_answered", "faithfulness_mean",
                "evidence_in_context_first_attempt")


def write_comparison(summaries: list[dict], stem: Path) -> None:
    rows = []
    for s in summaries:
        rows.append({"run": s["run"], **{k: s.get(k) for k in COMPARE_KEYS}})
    # Suffixes appended, not swapped: with_suffix would cut a run name at its dot ("exp.v2-comparison"
    # became "exp.json"), so two batches, or a grid and its loop-vs-noloop table, wrote one file.
    def named(ext: str) -> Path:
        return stem.with_name(stem.name + ext)

    named(".json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    named(".md").write_text(markdown_table(rows), encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3 + 0.3 * len(rows)))
        ax.barh([r["run"] for r in rows], [r["correct_or_rightly_refused"] or 0 for r in rows])
        ax.set_xlabel("answered correctly or rightly refused")
        ax.set_xlim(0, 1)
        fig.tight_layout()
        fig.savefig(named(".png"))
        plt.close(fig)
    except ImportError:
        pass


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])

    def fmt(v: Any) -> str:
        text = f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))
        # A strategy key ("c=section|r=hybrid|...") must not split its cell.
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# -- CLI ----------------------------------------------------------------------------------

def _figure(v: Any) -> str:
    """A summary figure as the summary line shows it: "n/a" for one that cannot be computed (a
    recall with no unanswerable question, say), as the other commands say it, not Python's None."""
    return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _print_summary(s: dict) -> None:
    keys = ([k for k in COMPARE_KEYS if k in s] + ["refused", "answered"]
            + [k for k in ("answered_right", "answered_wrong") if k in s] + (["errors"] if s.get("errors") else []))
    print(f"run {s['run']}: " + ", ".join(f"{k}={_figure(s.get(k))}" for k in keys))
    if s.get("refusal"):
        r = s["refusal"]
        print("  refusal: " + ", ".join(f"{k}={_figure(v)}" for k, v in r.items()
                                        if k in ("precision", "recall", "f1", "false_refusal_rate")))
    interval = s.get("confidence_auroc_answered_interval")
    if interval:
        print(f"  confidence_auroc_answered 95% interval: {interval['low']:.3f}–{interval['high']:.3f} "
              f"(the answers drawn again with replacement, {interval['resamples']} times)")
    if s.get("latency_ms"):
        print("  latency p50/p95 (s): " + ", ".join(
            f"{k} {v.get('p50', 0) / 1000:.2f}/{v.get('p95', 0) / 1000:.2f}" for k, v in s["latency_ms"].items() if v.get("p50") is not None))


def _print_where(out_root: Path, summaries: list[dict], comparisons: list[Path | None] = ()) -> None:
    """Where the runs were written: the batch file's folder (its output_dir:), not the folder
    the command ran in, so the summary lines alone leave a user looking in the wrong place; and
    the comparison tables written there (a grid's, the loop-vs-noloop one)."""
    if not summaries:
        return
    runs = ", ".join(f"{s['run']}/" for s in summaries)
    line = f"results: {out_root}{os.sep} {runs} (results.jsonl, summary.json)"
    written = [f"{c.name}.{{json,md,png}}" for c in comparisons if c is not None]
    if written:
        line += f"; comparison{'s' if len(written) > 1 else ''}: {', '.join(written)}"
    print(line)


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
        from .logging_setup import setup_logging

        setup_logging(log_dir, args.verbose, args.command)


def _packaged_index() -> str:
    """The packaged default paths.index_dir (index/default), which is not a batch's index."""
    from .config import PathsConfig

    return PathsConfig.model_fields["index_dir"].default


#: What names a batch's index folder on the command line, as :func:`command_line_index` says it.
SET_INDEX = "--set paths.index_dir"
CONFIG_INDEX = "paths.index_dir of --config"


def command_line_index(args: argparse.Namespace, config: Config) -> tuple[str | None, str | None]:
    """The index folder batch and eval are given from outside the batch file, and what gave it:
    ``--index DIR``; ``--set paths.index_dir=DIR``, which means the same (resolved_config gives
    every run the batch's index folder, so the --set item would otherwise be replaced unseen);
    or, failing both, a --config file's paths.index_dir, which stands in for the batch file's
    ``index:`` when it has none (the packaged default, index/default, is not a batch's index: a
    batch without one keeps its own <output_dir>/<name>/index). (None, None) when none of them.
    --index and a --set naming two different folders are refused: one of them would be dropped."""
    by_set = any(k == "paths.index_dir" for item in args.overrides for k in _setting_keys(item))
    if by_set:  # --set comes after --config, so the loaded value is the last --set item's (with ~ expanded)
        value = config.paths.index_dir
        if args.index and Path(args.index).resolve() != Path(value).resolve():
            raise BatchError(f"--index {args.index} and --set paths.index_dir={value} name two different index "
                             "folders, and a batch uses one (for batch and eval, --set paths.index_dir=DIR means "
                             "--index DIR); give the folder once, with --index or with the --set item")
        return (args.index, "--index") if args.index else (value, SET_INDEX)
    if args.index:
        return args.index, "--index"
    default = _packaged_index()
    if Path(config.paths.index_dir).resolve() != Path(default).resolve():
        return config.paths.index_dir, CONFIG_INDEX
    return None, None


def _with_index(spec: BatchSpec, index: str | None, named_by: str | None) -> tuple[BatchSpec, str | None]:
    """``spec`` with the index folder :func:`command_line_index` found (relative to the current
    folder, like any option), and what named it, for the runs' checks (None when the batch uses its
    own index: a --config file's paths.index_dir gives way to the batch file's index:)."""
    if index is None or (named_by == CONFIG_INDEX and spec.index):
        return spec, None
    return spec.model_copy(update={"index": str(Path(index).resolve())}), named_by


def _note_default_index(args: argparse.Namespace, config: Config, spec: BatchSpec, base: Path,
                        named_by: str | None) -> None:
    """A --config file that names the packaged default index/default is not taken as a batch's
    index (a copy of configs/default.yaml would send every batch there): say so when one does and
    the batch has no index of its own, since a user who wrote it may well want that folder."""
    if named_by is not None or spec.index:
        return
    default = _packaged_index()
    if Path(config.paths.index_dir).resolve() != Path(default).resolve():
        return
    for f in getattr(args, "config", None) or []:
        try:  # only regular files: a pipe (--config <(...)) was read once already
            data = load_yaml_unique(Path(f).read_text(encoding="utf-8")) if Path(f).is_file() else None
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
            continue
        paths = data.get("paths") if isinstance(data, dict) else None
        if isinstance(paths, dict) and "index_dir" in paths:
            own = _resolve(base, spec.output_dir) / spec.name / "index"
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
    spec, named_by = _with_index(spec, *command_line_index(args, config))
    _note_default_index(args, config, spec, base, named_by)
    executor = make_executor(args.ray, args.workers, spec.executor)
    summaries = run_batch(spec, base, config, limit=args.limit, loop=False if args.no_retry else None,
                          progress=sys.stderr.isatty() and not args.json, offset=args.offset, cli_overrides=args.overrides, guard_index=named_by, executor=executor)
    if args.json:
        print(json.dumps(summaries))
    else:
        for s in summaries:
            _print_summary(s)
        out_root = _resolve(base, spec.output_dir)
        _print_where(out_root, summaries, [comparison_stem(out_root, spec.name, summaries)])
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
    spec, named_by = _with_index(spec, *index)
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
        from .evaluation.retrieval_eval import retrieval_eval

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
    out_root = _resolve(base, spec.output_dir)
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
                run_cfg = _run_config(out_root / s["run"])
                summaries.append(derive_single_attempt_run(out_root / s["run"], run_cfg.loop.answer_threshold, current))
        # No loop at all: the first attempt's answer as the model gave it, no checks, no refusal but its own decline.
        summaries += [derive_plain_run(out_root / s["run"], current) for s in loop_runs]
        summaries = _on_common_questions(summaries, out_root, current)
        comparisons.append(out_root / f"{spec.name}-loop-vs-noloop")
        write_comparison(summaries, comparisons[-1])
    if args.json:
        print(json.dumps(summaries))
    else:
        for s in summaries:
            _print_summary(s)
        if len(summaries) > 1:
            print(markdown_table([{"run": s["run"], **{k: s.get(k) for k in COMPARE_KEYS}} for s in summaries]))
        _print_where(out_root, summaries, comparisons)
    return 0


def _on_common_questions(summaries: list[dict], out_root: Path, items: dict[str, Any]) -> list[dict]:
    """The summaries of runs to be compared, each over the questions every one of them answered.
    A run's summary covers all the questions it has answered, over every command that ran it; a
    separate loop-off run made with another --offset/--limit than the loop run's earlier slices
    holds other questions, and its figures would be set beside figures of other questions. When
    the runs' questions differ, each is summarised again over the shared ones (its own
    summary.json keeps all of its questions), with a note; the summaries are returned as they are
    otherwise."""
    rows = {s["run"]: _current_rows(s["run"], read_done(out_root / s["run"] / "results.jsonl"), items, quiet=True)
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
