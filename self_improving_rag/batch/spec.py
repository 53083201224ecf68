"""The batch file: its schema (:class:`BatchSpec`), reading it (:func:`load_batch`), and the
messages that name a malformed one's key and say how to write it."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..config import DuplicateKeyError, load_yaml_unique, no_yes_no_for_numbers, parse_override
from ..errors import BatchError, ConfigError
from ..ray_pool import ExecutorSpec
from .settings import grid_keys


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
           else "a mapping" if isinstance(value, dict) else yaml_kind(value) or type(value).__name__)
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
    for g, varied in grid_keys(spec.grid).items():
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


def resolve_path(base: Path, path: str) -> Path:
    return (base / os.path.expanduser(path)).resolve()


def yaml_kind(value: Any) -> str | None:
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
