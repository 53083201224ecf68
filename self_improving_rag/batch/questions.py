"""A batch's questions (:func:`load_items`): a question file, or the batch file's inline items,
read like QA JSONL items with the checks that name a misspelt field or a value YAML read as
other than text."""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

from ..errors import BatchError
from ..evaluation.datasets import QAItem, load_qa
from .spec import BatchSpec, resolve_path, yaml_kind


_INLINE_FIELDS = ("id", "question", "answers", "answerable", "evidence", "book")


#: Keys users write for the gold answers (``gold_answers`` is what results.jsonl calls them).
_GOLD_SYNONYMS = ("gold_answers", "gold", "gold_answer")


def load_items(spec: BatchSpec, base: Path) -> list[QAItem]:
    if spec.questions.file:
        items = load_qa(resolve_path(base, spec.questions.file))
    else:
        # Inline questions are read like QA JSONL items (evidence, book and extra fields kept,
        # the same checks), except that the id and the answers may be left out.
        from ..evaluation.datasets import _check_unique_ids, _jsonl_item

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
            kind = yaml_kind(v)
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
