"""QA readers: the shared evaluation sets, small synthetic files, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from self_improving_rag.errors import InputError
from self_improving_rag.evaluation.datasets import QAItem, load_qa, squad_contexts
from self_improving_rag.evaluation.retrieval_metrics import evidence_hit
from tests.conftest import IN_CI, skip_or_fail

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
QA_DIR = SHARED / "data" / "qa"
CORPORA = SHARED / "data" / "corpora"

# In CI (SIRAG_CI) these run and fail when the data is missing.
needs_shared = pytest.mark.skipif(
    not QA_DIR.is_dir() and not IN_CI, reason=f"shared evaluation data not found at {QA_DIR} (sibling folder 'shared' of the repo)"
)


# --------------------------------------------------------------------------- shared sets


@needs_shared
def test_sherlock_dev() -> None:
    items = load_qa(QA_DIR / "sherlock_dev.jsonl")
    assert len(items) == 45
    assert len({i.id for i in items}) == 45
    unanswerable = [i for i in items if not i.answerable]
    assert len(unanswerable) == 8
    assert all(i.answers == () and i.evidence == () for i in unanswerable)
    answerable = [i for i in items if i.answerable]
    assert all(i.answers and i.book and i.evidence for i in answerable)
    assert all(i.context is None for i in items)
    first = items[0]
    assert first.id == "d001" and first.book == "pg244"
    assert {"type", "difficulty"} <= set(first.meta)
    assert first.meta["source_format"] == "jsonl"


@needs_shared
def test_sherlock_evidence_is_verbatim_in_books() -> None:
    """Each evidence quote is a whitespace-normalised substring of one of its books."""
    if not (CORPORA / "sherlock").is_dir():
        skip_or_fail(f"Sherlock corpus not found at {CORPORA / 'sherlock'}")
    texts: dict[str, str] = {}
    for f in (CORPORA / "sherlock").glob("pg*_*.txt"):
        texts[f.name.split("_", 1)[0]] = f.read_text(encoding="utf-8-sig")
    checked = 0
    for item in load_qa(QA_DIR / "sherlock_dev.jsonl"):
        books = item.meta.get("books") or [item.book]
        for quote in item.evidence:
            assert any(evidence_hit(texts[b], quote) for b in books), (item.id, quote[:60])
            checked += 1
    assert checked > 40


@needs_shared
def test_literaryqa_dev() -> None:
    items = load_qa(QA_DIR / "literaryqa_dev.jsonl")
    assert len(items) == 86
    assert all(i.answerable and i.answers for i in items)
    books = {i.book for i in items}
    assert books == {
        "pg35_the_time_machine.txt",
        "pg174_the_picture_of_dorian_gray.txt",
        "pg863_the_mysterious_affair_at_styles.txt",
    }
    # duplicated reference answers collapse, keeping order
    assert all(len(set(i.answers)) == len(i.answers) for i in items)
    assert items[0].answers == ("Richmond, Surrey",)


@needs_shared
def test_squad2_normans() -> None:
    path = QA_DIR / "squad2_dev_normans.json"
    items = load_qa(path)
    assert len(items) == 208
    unanswerable = [i for i in items if not i.answerable]
    assert len(unanswerable) == 112
    assert all(i.answers == () for i in unanswerable)
    first = items[0]
    assert first.answers == ("France",)  # four identical annotations deduplicated
    assert first.book == "normans_p00" and first.meta["doc_id"] == "normans_p00"
    assert first.context is not None and "France" in first.context
    for item in items:
        if item.answerable:
            assert all(a in item.context for a in item.answers)
    contexts = squad_contexts(path)
    assert len(contexts) == 39
    assert contexts[0][0] == "normans_p00" and contexts[-1][0] == "normans_p38"
    by_id = dict(contexts)
    assert all(by_id[i.book] == i.context for i in items)


# --------------------------------------------------------------------------- synthetic files


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_roundtrip_and_meta(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "qa.jsonl",
        [
            {"id": "a", "question": "Q1?", "answers": ["x", "y", "x"], "answerable": True, "book": "b1",
             "evidence": ["quote"], "type": "who"},
            {"id": "b", "question": "Q2?", "answers": [], "answerable": False, "book": None},
            {"id": "c", "question": "Q3?", "answers": ["z"]},  # answerable inferred from answers
        ],
    )
    items = load_qa(path)
    assert items[0] == QAItem("a", "Q1?", ("x", "y"), True, ("quote",), "b1")
    assert items[0].meta == {"type": "who", "source_format": "jsonl"}
    assert not items[1].answerable and items[1].book is None
    assert items[2].answerable


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text('\n{"id": "a", "question": "Q?", "answers": ["x"], "answerable": true}\n\n', encoding="utf-8")
    assert [i.id for i in load_qa(path)] == ["a"]


def test_json_array_of_items(tmp_path: Path) -> None:
    path = tmp_path / "qa.json"
    path.write_text(json.dumps([{"id": "a", "question": "Q?", "answers": ["x"], "answerable": True}]), encoding="utf-8")
    assert load_qa(path)[0].answers == ("x",)


def test_squad_minimal(tmp_path: Path) -> None:
    doc = {
        "version": "v2.0",
        "data": [
            {
                "title": "Tiny Article",
                "paragraphs": [
                    {"context": "Rollo led the Norse.", "qas": [
                        {"id": "q1", "question": "Who led?", "is_impossible": False,
                         "answers": [{"text": "Rollo", "answer_start": 0}, {"text": "Rollo", "answer_start": 0}]},
                        {"id": "q2", "question": "Who followed?", "is_impossible": True, "answers": [],
                         "plausible_answers": [{"text": "Norse", "answer_start": 14}]},
                    ]},
                ],
            }
        ],
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    q1, q2 = load_qa(path)
    assert q1.answers == ("Rollo",) and q1.book == "tiny_article_p00" and q1.context == "Rollo led the Norse."
    assert not q2.answerable and q2.meta["plausible_answers"] == ["Norse"]
    assert squad_contexts(path) == [("tiny_article_p00", "Rollo led the Norse.")]



def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "Who wrote\u2028the letter\u0085?", "answers": ["x"]},
            {"id": "b", "question": "Q?", "answers": ["y"]}]
    path = tmp_path / "qa.jsonl"
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    assert [i.id for i in load_qa(path)] == ["a", "b"]


def test_squad_articles_get_distinct_ids_whatever_their_titles(tmp_path: Path) -> None:
    titles = ["Normans 2", "Normans", "Normans", "Normans"]
    doc = {"version": "v2.0", "data": [
        {"title": t, "paragraphs": [{"context": f"Text {a}.", "qas": [
            {"id": f"q{a}", "question": "Which text?", "is_impossible": False,
             "answers": [{"text": f"Text {a}", "answer_start": 0}]}]}]} for a, t in enumerate(titles)]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    contexts = squad_contexts(path)
    assert len({doc_id for doc_id, _ in contexts}) == 4
    assert [text for _, text in contexts] == ["Text 0.", "Text 1.", "Text 2.", "Text 3."]
    assert [i.book for i in load_qa(path)] == [doc_id for doc_id, _ in contexts]


# --------------------------------------------------------------------------- errors


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_qa(tmp_path / "nope.jsonl")


def test_malformed_jsonl_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "question": "Q?", "answers": ["x"], "answerable": true}\n'
        '{"id": "b", "question": "Q?", "answers": ["x"], "answerable": true}\n'
        '{"id": "c", "question": \n',
        encoding="utf-8",
    )
    with pytest.raises(InputError) as info:
        load_qa(path)
    message = str(info.value)
    assert str(path) in message and "line 3" in message and "malformed JSON" in message
    assert "\n" not in message


def test_malformed_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"version": "v2.0",\n "data": [\n  {"title": }\n]}', encoding="utf-8")
    with pytest.raises(InputError, match="line 3: malformed JSON"):
        load_qa(path)


def test_a_jsonl_file_named_json_is_read_as_jsonl(tmp_path: Path) -> None:
    # Its content is right, only the extension is not: "malformed JSON (Extra data)" misled.
    path = tmp_path / "qa.json"
    path.write_text('{"id": "a", "question": "Q?", "answers": ["x"]}\n{"id": "b", "question": "R?", "answers": []}\n',
                    encoding="utf-8")
    assert [it.id for it in load_qa(path)] == ["a", "b"]


def test_an_object_that_is_neither_squad_nor_a_qa_item_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text('{"questions": []}', encoding="utf-8")
    with pytest.raises(InputError, match=r"neither a SQuAD 2.0 file .* top-level keys: 'questions'"):
        load_qa(path)


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ({"question": "Q?", "answers": ["x"]}, "missing required field 'id'"),
        ({"id": "a", "answers": ["x"]}, "missing required field 'question'"),
        ({"id": "a", "question": "Q?"}, "missing required field 'answers'"),
        ({"id": "a", "question": "Q?", "answers": "x"}, "'answers' must be a list"),
        ({"id": "a", "question": "Q?", "answers": [], "answerable": True}, "no answers"),
        ({"id": "a", "question": "Q?", "answers": ["x"], "answerable": False}, "unanswerable item lists answers"),
        ({"id": "a", "question": "Q?", "answers": ["x"], "answerable": "yes"}, "true or false"),
    ],
)
def test_bad_fields(tmp_path: Path, row: dict, pattern: str) -> None:
    good = {"id": "ok", "question": "Q?", "answers": ["x"], "answerable": True}
    path = _write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(InputError, match=pattern) as info:
        load_qa(path)
    assert "line 2" in str(info.value)


def test_an_unanswerable_item_may_leave_its_answers_out(tmp_path: Path) -> None:
    # What `sirag eval`'s warning suggests: "give each question 'answers' (or 'answerable: false')".
    path = _write_jsonl(tmp_path / "q.jsonl", [{"id": "u", "question": "Who painted the mill?", "answerable": False}])
    (item,) = load_qa(path)
    assert item.answerable is False and item.answers == ()
    with pytest.raises(InputError, match="missing required field 'answers'.*'answerable: false' instead"):
        load_qa(_write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "question": "Q?", "answerable": True}]))


def test_duplicate_ids(tmp_path: Path) -> None:
    row = {"id": "a", "question": "Q?", "answers": ["x"], "answerable": True}
    with pytest.raises(InputError, match="duplicate id 'a'"):
        load_qa(_write_jsonl(tmp_path / "dup.jsonl", [row, row]))


def test_empty_and_non_utf8(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("  \n", encoding="utf-8")
    with pytest.raises(InputError, match="empty"):
        load_qa(empty)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "a", "question": "caf\xe9?", "answers": ["x"]}\n'.encode("latin-1"))
    with pytest.raises(InputError, match="UTF-8"):
        load_qa(latin)


def test_squad_contexts_rejects_jsonl(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"id": "a", "question": "Q?", "answers": ["x"]}] * 2)
    with pytest.raises(InputError, match="not a SQuAD 2.0 file"):
        squad_contexts(path)


def test_an_empty_gold_answer_is_refused(tmp_path: Path) -> None:
    """An empty gold string matches no answer: every answer would be graded wrong, and the wrong
    labels would reach memory (calibration and the strategy policy read them)."""
    for answers in ([""], ["Rex", "  "]):
        with pytest.raises(InputError, match=r"'answers' item \d is empty.*\"answers\": \[\]"):
            load_qa(_write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "Q?", "answers": answers}]))
    with pytest.raises(InputError, match="'evidence' item 1 is empty"):
        load_qa(_write_jsonl(tmp_path / "e.jsonl", [{"id": "a", "question": "Q?", "answers": ["x"], "evidence": [""]}]))
    # Punctuation alone could match no answer the engine gives either; a letter or digit can ("A").
    for answers, n in ((["."], 1), (["blue", "--"], 2), (["?!"], 1)):
        with pytest.raises(InputError, match=rf"'answers' item {n} \(.*\) has no letter or digit"):
            load_qa(_write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "question": "Q?", "answers": answers}]))
    assert load_qa(_write_jsonl(tmp_path / "ok.jsonl", [{"id": "a", "question": "Q?", "answers": ["1.5", "A", "The"]}]))
    punct = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Rollo led. Then.", "qas": [
        {"id": "q1", "question": "Who led?", "is_impossible": False, "answers": [{"text": ".", "answer_start": 9}]}]}]}]}
    (tmp_path / "punct.json").write_text(json.dumps(punct))
    with pytest.raises(InputError, match=r"answer 1 \('\.'\) has no letter or digit"):
        load_qa(tmp_path / "punct.json")
    doc = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Rollo led.", "qas": [
        {"id": "q1", "question": "Who led?", "is_impossible": False, "answers": [{"text": " ", "answer_start": 0}]}]}]}]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match="an answer's 'text' is empty.*is_impossible"):
        load_qa(path)
