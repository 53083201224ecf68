"""Readers for the question-answering sets used in evaluation.

Two formats are recognised automatically by :func:`load_qa`:

* **QA JSONL** -- one JSON object per line with the fields ``id``, ``question``,
  ``answers`` (list of strings) and ``answerable``; optional ``book`` (the corpus
  document the question is about), ``evidence`` (verbatim quotes that support the
  answer); every other field (``type``, ``difficulty``, ``books``, ...) is kept in
  ``QAItem.meta``. A JSON array of such objects is accepted too.
* **SQuAD 2.0 JSON** -- ``{"version": ..., "data": [{"title", "paragraphs": [{"context",
  "qas": [...]}]}]}`` with ``is_impossible`` on each question. Each paragraph gets a
  stable corpus id ``<title slug>_p<NN>`` (e.g. ``normans_p00``), which is both the
  item's ``book`` and the id :func:`squad_contexts` returns, so retrieval can be scored
  by document.

Every problem with a file is an :class:`~self_improving_rag.errors.InputError` whose
one-line message names the file, the line when known, and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from self_improving_rag.errors import InputError

__all__ = ["QAItem", "load_qa", "squad_contexts"]

_JSONL_REQUIRED = ("id", "question", "answers")


@dataclass(frozen=True)
class QAItem:
    """One evaluation question with its gold answers.

    ``answers`` is empty when the question is unanswerable from the corpus (``answerable``
    False) or has no gold at all (``answerable`` None: inline batch questions without
    answers, asked but not graded); duplicates are removed keeping the first occurrence. ``book`` is the corpus
    document the question was written against (``None`` when it names none).
    ``context`` holds the SQuAD paragraph; it is ``None`` for the JSONL sets.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    answerable: bool | None
    evidence: tuple[str, ...] = ()
    book: str | None = None
    context: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def load_qa(path: Path | str) -> list[QAItem]:
    """Read a QA JSONL file or a SQuAD 2.0 JSON file into ``QAItem`` s, in file order.

    Raises ``InputError`` for a missing or unreadable file, malformed JSON (naming the
    line), a missing or mistyped field, an answerable item without answers, an
    unanswerable item with answers, or a duplicate id.
    """
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{path}: the file is empty; give a QA JSONL file or a SQuAD 2.0 JSON file")
    doc = _parse_whole(path, text)
    if isinstance(doc, dict) and "data" in doc:
        items = list(_squad_items(path, doc))
    elif isinstance(doc, list):
        items = [_jsonl_item(path, f"item {i}", obj) for i, obj in enumerate(doc)]
    elif isinstance(doc, dict):  # a one-line JSONL file parses as a single object
        if "question" not in doc and "id" not in doc:
            raise InputError(
                f"{path}: neither a SQuAD 2.0 file (no top-level 'data') nor QA items (no 'id' or 'question'; "
                f"top-level keys: {', '.join(map(repr, list(doc)[:6])) or 'none'}); give a QA JSONL file, one "
                "{\"id\", \"question\", \"answers\"} object per line, or a SQuAD 2.0 JSON file"
            )
        items = [_jsonl_item(path, "line 1", doc)]
    else:
        items = [_jsonl_item(path, f"line {n}", obj) for n, obj in _jsonl_objects(path, text)]
    _check_unique_ids(path, items)
    return items


def squad_contexts(path: Path | str) -> list[tuple[str, str]]:
    """Return ``(doc_id, paragraph text)`` for every paragraph of a SQuAD 2.0 file.

    ``doc_id`` is ``<title slug>_p<NN>`` (``normans_p00``, ``normans_p01``, ...), the same
    id that :func:`load_qa` puts in ``QAItem.book``.
    """
    path = Path(path)
    doc = _parse_whole(path, _read_text(path))
    if not (isinstance(doc, dict) and "data" in doc):
        raise InputError(f"{path}: not a SQuAD 2.0 file (no top-level 'data'); pass a SQuAD 2.0 JSON file")
    return [(doc_id, context) for doc_id, context, _title, _qas in _squad_paragraphs(path, doc)]


# --------------------------------------------------------------------------- reading


def _read_text(path: Path) -> str:
    if not path.exists():
        raise InputError(f"{path}: no such file; check the path of the QA set")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file; pass a QA JSONL or SQuAD JSON file")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 (byte {exc.start}); re-save the file as UTF-8") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); check permissions") from exc


def _parse_whole(path: Path, text: str) -> Any:
    """Parse the whole file as one JSON value; ``None`` when it is not (so: JSONL).

    A ``.json`` file must parse as a whole, so its syntax error is reported here with
    its line; any other file that fails is read line by line as JSONL.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if path.suffix.lower() == ".json":
            if exc.msg == "Extra data" and _is_jsonl(text):
                # One JSON object per line is JSONL whatever the file is called: read it so.
                return None
            raise InputError(
                f"{path}: line {exc.lineno}: malformed JSON ({exc.msg}); fix the JSON syntax there"
            ) from exc
        return None


def _is_jsonl(text: str) -> bool:
    """Every non-blank line is a JSON object on its own."""
    try:
        return all(isinstance(json.loads(line), dict) for line in text.split("\n") if line.strip())
    except json.JSONDecodeError:
        return False


def _jsonl_objects(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    # Lines end at "\n" only: JSON strings may hold U+2028, U+0085 and other characters that
    # str.splitlines() would break a line at.
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}: line {n}: malformed JSON ({exc.msg}); each line must be one complete JSON object"
            ) from exc


# --------------------------------------------------------------------------- JSONL


def _jsonl_item(path: Path, where: str, obj: Any) -> QAItem:
    if not isinstance(obj, dict):
        raise InputError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}; write one object per line")
    for key in _JSONL_REQUIRED:
        # An unanswerable item may leave its (empty) answers out.
        if key not in obj and not (key == "answers" and obj.get("answerable") is False):
            raise InputError(f"{path}: {where}: missing required field '{key}'; add it (required: id, question, "
                             "answers; an unanswerable item may give 'answerable: false' instead of answers)")
    item_id = obj["id"]
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    if not isinstance(item_id, str) or not item_id:
        raise InputError(f"{path}: {where}: 'id' must be a non-empty string; give every item a unique id")
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{path}: {where}: 'question' must be a non-empty string; write the question text")
    answers = _string_tuple(path, where, "answers", obj.get("answers", []))
    # Older files omit 'answerable'; the answers then decide it.
    answerable = obj.get("answerable", bool(answers))
    if not isinstance(answerable, bool):
        raise InputError(f"{path}: {where}: 'answerable' must be true or false, got {answerable!r}")
    if answerable and not answers:
        raise InputError(f"{path}: {where}: answerable item has no answers; add answers or set answerable to false")
    if not answerable and answers:
        raise InputError(f"{path}: {where}: unanswerable item lists answers; empty 'answers' or set answerable to true")
    evidence = _string_tuple(path, where, "evidence", obj.get("evidence") or [])
    book = obj.get("book")
    if book is not None and not isinstance(book, str):
        raise InputError(f"{path}: {where}: 'book' must be a string or null, got {type(book).__name__}")
    known = {"id", "question", "answers", "answerable", "evidence", "book"}
    meta = {k: v for k, v in obj.items() if k not in known}
    meta["source_format"] = "jsonl"
    return QAItem(
        id=item_id,
        question=question,
        answers=answers,
        answerable=answerable,
        evidence=evidence,
        book=book,
        context=None,
        meta=meta,
    )


def _string_tuple(path: Path, where: str, key: str, value: Any) -> tuple[str, ...]:
    """A list of strings as a tuple without duplicates, first occurrence kept."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{path}: {where}: '{key}' must be a list of strings; write it as [\"...\", ...]")
    blank = next((i for i, v in enumerate(value, 1) if not v.strip()), None)
    if blank is not None:
        # An empty gold answer matches no answer: every answer would be graded wrong (and the
        # wrong labels stored in memory, where calibration and the strategy policy read them).
        hint = (" (an unanswerable question has \"answers\": [] or \"answerable\": false)" if key == "answers" else "")
        raise InputError(f"{path}: {where}: '{key}' item {blank} is empty; remove it or write its text{hint}")
    if key == "answers":
        _check_words(path, where, [(f"'answers' item {i}", v) for i, v in enumerate(value, 1)])
    return tuple(dict.fromkeys(value))


def _check_words(path: Path, where: str, answers: list[tuple[str, str]]) -> None:
    """A gold answer of punctuation alone ("." or "--") can only be matched by an answer of
    punctuation alone, which the engine never gives: every answer to it would be graded wrong
    (and the wrong labels stored in memory). ``answers``: (how to name it, its text)."""
    for name, text in answers:
        if not re.search(r"\w", text):
            raise InputError(f"{path}: {where}: {name} ({text!r}) has no letter or digit, so no answer could match "
                             "it; write the answer's words, or remove it")


# --------------------------------------------------------------------------- SQuAD 2.0


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "article"


def _squad_paragraphs(path: Path, doc: dict[str, Any]) -> Iterator[tuple[str, str, str, list[Any]]]:
    """Yield ``(doc_id, context, title, qas)`` per paragraph, with stable unique doc ids."""
    data = doc["data"]
    if not isinstance(data, list):
        raise InputError(f"{path}: 'data' must be a list of articles; check that this is a SQuAD 2.0 file")
    seen: set[str] = set()
    for a, article in enumerate(data):
        where = f"data[{a}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise InputError(f"{path}: {where}: missing 'paragraphs' list; check that this is a SQuAD 2.0 file")
        title = article.get("title")
        title = title if isinstance(title, str) else f"article{a}"
        slug = base = _slug(title)
        suffix = a
        while slug in seen:  # two articles with the same title still need distinct ids
            slug = f"{base}_{suffix}"
            suffix += 1
        seen.add(slug)
        paragraphs = article["paragraphs"]
        width = max(2, len(str(len(paragraphs) - 1)))
        for p, para in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{p}]"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                raise InputError(f"{path}: {pwhere}: missing 'context' string; every paragraph needs its text")
            qas = para.get("qas", [])
            if not isinstance(qas, list):
                raise InputError(f"{path}: {pwhere}: 'qas' must be a list of questions")
            yield f"{slug}_p{p:0{width}d}", para["context"], title, qas


def _squad_items(path: Path, doc: dict[str, Any]) -> Iterator[QAItem]:
    for doc_id, context, title, qas in _squad_paragraphs(path, doc):
        for q, qa in enumerate(qas):
            where = f"paragraph {doc_id} question {q}"
            if not isinstance(qa, dict):
                raise InputError(f"{path}: {where}: expected a JSON object for the question")
            for key in ("id", "question"):
                if not isinstance(qa.get(key), str) or not qa.get(key):
                    raise InputError(f"{path}: {where}: missing required field '{key}'; add it as a string")
            impossible = qa.get("is_impossible", False)
            if not isinstance(impossible, bool):
                raise InputError(f"{path}: {where}: 'is_impossible' must be true or false, got {impossible!r}")
            raw = qa.get("answers", [])
            if not isinstance(raw, list) or not all(isinstance(x, dict) and isinstance(x.get("text"), str) for x in raw):
                raise InputError(f"{path}: {where}: 'answers' must be a list of {{\"text\", \"answer_start\"}} objects")
            if any(not x["text"].strip() for x in raw):
                raise InputError(f"{path}: {where}: an answer's 'text' is empty; remove that answer or write its "
                                 "text (an unanswerable question has is_impossible: true)")
            _check_words(path, where, [(f"answer {i}", x["text"]) for i, x in enumerate(raw, 1)])
            answers = tuple(dict.fromkeys(x["text"] for x in raw))
            if not impossible and not answers:
                raise InputError(f"{path}: {where}: answerable question has no answers; add one or set is_impossible")
            plausible = qa.get("plausible_answers") or []
            meta: dict[str, Any] = {
                "source_format": "squad2",
                "title": title,
                "doc_id": doc_id,
                "answer_starts": [x.get("answer_start") for x in raw],
            }
            if plausible:
                meta["plausible_answers"] = list(
                    dict.fromkeys(x["text"] for x in plausible if isinstance(x, dict) and isinstance(x.get("text"), str))
                )
            yield QAItem(
                id=qa["id"],
                question=qa["question"],
                answers=() if impossible else answers,
                answerable=not impossible,
                evidence=(),
                book=doc_id,
                context=context,
                meta=meta,
            )


def _check_unique_ids(path: Path, items: list[QAItem]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise InputError(f"{path}: duplicate id '{item.id}'; give every question a unique id")
        seen.add(item.id)
