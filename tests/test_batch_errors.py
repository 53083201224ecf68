"""Batch and eval runs: setup failures stop the run, grids are checked first, user folders are safe."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import batch_overrides, fake_overrides, write_corpus
from tests.test_cli import run

ROWS = [
    {"id": "a", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"],
     "evidence": ["built in 1852 by the engineer Clara Venn"]},
    {"id": "b", "question": "How many apple trees grow in the orchard?", "answers": ["sixty"]},
]


def _batch(tmp_path, **extra):
    docs = write_corpus(tmp_path / "docs")
    spec = {"name": "t", "corpus": [str(docs)], "index": str(tmp_path / "index"),
            "questions": {"inline": ROWS}, "output_dir": str(tmp_path / "runs"),
            "overrides": {"generator.replies": ["Clara Venn built it [1]."]}, **extra}
    f = tmp_path / "batch.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def _one_error_line(r):
    # A run that built its index before failing says so on a line of its own.
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("note: indexed ")]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


def test_a_setup_failure_stops_the_run_and_is_not_written_as_answers(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    ov = batch_overrides(tmp_path)
    # No corpus and no index: every question would fail the same way.
    r = run(["eval", "--dataset", str(qa), "--output-dir", str(tmp_path / "runs"), "--name", "noidx",
             "--index", str(tmp_path / "missing-index")], tmp_path, ov)
    assert "no index" in _one_error_line(r)
    results = tmp_path / "runs" / "noidx" / "results.jsonl"
    assert not results.parent.exists(), "a run that answered nothing leaves no empty folder"
    # An unusable memory store is found before any index is built (not after minutes of ingesting).
    bad_db = tmp_path / "not-a-db.db"
    bad_db.write_text("not sqlite")
    r = run(["eval", "--dataset", str(qa), "--output-dir", str(tmp_path / "runs"), "--name", "noidx",
             "--corpus", str(write_corpus(tmp_path / "docs")), "--memory", str(bad_db)], tmp_path, ov)
    assert "not a SQLite database" in _one_error_line(r)
    assert not results.parent.exists()
    assert bad_db.read_text() == "not sqlite"
    # Rows an earlier version wrote for such failures are asked again once the cause is fixed.
    results.parent.mkdir(parents=True, exist_ok=True)
    stale = {"id": "a", "question": ROWS[0]["question"], "answer": None, "refused": True, "attempts": [],
             "error": "no index in ...", "refusal_reason": "error: no index in ...", "sources": []}
    results.write_text(json.dumps(stale) + "\n")
    r = run(["eval", "--dataset", str(qa), "--output-dir", str(tmp_path / "runs"), "--name", "noidx",
             "--corpus", str(write_corpus(tmp_path / "docs")), "--json"], tmp_path,
            ov + ['generator.replies=["Clara Venn built it [1]."]'])
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        rows[row["id"]] = row
    assert rows["a"]["attempts"] and "error" not in rows["a"] and rows["a"]["grade"]["correct"] is True


def test_grid_values_are_checked_before_any_run_and_stay_inside_the_output_folder(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path, grid={"strategy.top_k": [3, "abc"]})
    r = run(["batch", str(f)], tmp_path, ov)
    assert "strategy.top_k" in _one_error_line(r)
    assert not (tmp_path / "runs").exists(), "no grid point may run before all are checked"
    f = _batch(tmp_path, grid={"generator.replies": [["../../../escaped [1]"], ["plain [1]"]]})
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    made = sorted(p.parent for p in tmp_path.rglob("results.jsonl"))
    assert len(made) == 2 and all(p.parent == tmp_path / "runs" for p in made), made


def test_index_named_on_the_command_line_is_not_overwritten_with_other_documents(tmp_path):
    ov = batch_overrides(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "mill.txt").write_text("The miller Anna Grove pressed cider in the red barn.\n")
    assert run(["ingest", str(other), "--index", str(tmp_path / "mine")], tmp_path, ov).returncode == 0
    manifest = sorted((tmp_path / "mine").rglob("manifest.json"))
    before = [m.read_bytes() for m in manifest]
    f = _batch(tmp_path)
    r = run(["batch", str(f), "--index", str(tmp_path / "mine")], tmp_path, ov)
    assert "--index" in _one_error_line(r) and "replace" in r.stderr
    assert [m.read_bytes() for m in sorted((tmp_path / "mine").rglob("manifest.json"))] == before
    r = run(["eval", str(f), "--retrieval-only", "--index", str(tmp_path / "mine")], tmp_path, ov)
    assert "--index" in _one_error_line(r)


def test_a_finished_run_says_that_new_settings_are_not_used(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    r = run(["batch", str(f), "--json"], tmp_path, ov + ["strategy.top_k=7"])
    assert r.returncode == 0 and "finished" in r.stderr and "strategy.top_k: 5 -> 7" in r.stderr
    # policy.first_from_memory follows from the pinned strategy: sirag set it, not the user.
    assert "first_from_memory" not in r.stderr
    assert json.loads(r.stdout)[0]["n"] == 2


def test_eval_refuses_options_that_would_be_ignored(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps(ROWS[0]) + "\n")
    for args, word in ((["--dataset", str(qa)], "not both"), (["--separate-no-retry-run"], "--compare-no-retry"),
                       (["--compare-no-retry", "--no-retry"], "loop off"),
                       (["--compare-no-retry", "--set", "loop.enabled=false"], "loop off"),
                       (["--retrieval-only", "--workers", "2", "--no-retry"], "--workers, --no-retry would be ignored")):
        r = run(["eval", str(f), *args], tmp_path, ov)
        assert word in _one_error_line(r), args
    f2 = _batch(tmp_path, loop=False)
    r = run(["eval", str(f2), "--compare-no-retry"], tmp_path, ov)
    assert "loop off" in _one_error_line(r)
    # Retrieval scoring needs evidence quotes or SQuAD paragraphs.
    f3 = _batch(tmp_path, questions={"inline": [ROWS[1]]})
    r = run(["eval", str(f3), "--retrieval-only"], tmp_path, ov)
    assert "evidence" in _one_error_line(r)
    assert not (tmp_path / "runs").exists()


def test_a_failure_on_one_prompt_is_a_row_a_generator_that_cannot_run_stops():
    import pytest

    from self_improving_rag.batch import grade
    from self_improving_rag.batch.runner import ask_row
    from self_improving_rag.errors import GenerationError, GeneratorUnavailableError
    from self_improving_rag.evaluation.datasets import QAItem

    class Engine:
        def __init__(self, exc):
            self.exc = exc

        def ask(self, *a, **k):
            raise self.exc

    item = QAItem(id="q", question="Who?", answers=(), answerable=False)
    row = ask_row(Engine(GenerationError("prompt of 5000 tokens exceeds n_ctx=4096")), item, "run", True)
    assert row["error_type"] == "GenerationError" and row["attempts"] == []
    assert row["grade"]["correct"] is False, "a failed question is not a rightly refused one"
    assert grade({k: v for k, v in row.items() if k != "error"})["correct"] is True  # a real refusal would be
    with pytest.raises(GeneratorUnavailableError):
        ask_row(Engine(GeneratorUnavailableError("cannot reach the server")), item, "run", True)


def test_runs_of_one_squad_file_under_two_names_share_its_corpus_and_index(tmp_path):
    doc = {"version": "v2.0", "data": [{"title": "Harbour", "paragraphs": [
        {"context": "The lighthouse of Marrow Point was built in 1852 by the engineer Clara Venn.",
         "qas": [{"id": "q1", "question": "Who built the lighthouse?", "is_impossible": False,
                  "answers": [{"text": "Clara Venn", "answer_start": 60}]}]},
        {"context": "The orchard behind the mill has sixty apple trees.",
         "qas": [{"id": "q2", "question": "How many apple trees?", "is_impossible": False,
                  "answers": [{"text": "sixty", "answer_start": 31}]}]}]}]}
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps(doc))
    ov = batch_overrides(tmp_path)
    for name in ("a", "b"):
        r = run(["eval", "--dataset", str(squad), "--index", str(tmp_path / "idx"), "--name", name,
                 "--output-dir", str(tmp_path / "runs"), "--retrieval-only", "--json"], tmp_path, ov)
        assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / "corpora" / "squad").iterdir()) == [
        "harbour_p00.txt", "harbour_p01.txt"]


def test_loop_enabled_false_runs_one_attempt_per_question(tmp_path):
    """loop.enabled is honoured by batch runs (the run is named -noloop) as by ``sirag ask``."""
    ov = fake_overrides(tmp_path)
    spec = yaml.safe_load(_batch(tmp_path).read_text())
    spec["overrides"]["generator.replies"] = ["I cannot answer this from the documents."]
    f = tmp_path / "refuse.yaml"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json", "--limit", "1", "--set", "loop.enabled=false"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["run"] == "t-noloop"
    row = json.loads((tmp_path / "runs" / "t-noloop" / "results.jsonl").read_text().splitlines()[0])
    assert row["refused"] and len(row["attempts"]) == 1
    r = run(["ask", "Who built the lighthouse?", "--json", "--set", "loop.enabled=false"], tmp_path,
            ov + ['generator.replies=["I cannot answer this from the documents."]'])
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["attempts"]) == 1


def test_a_grid_point_with_the_loop_off_is_not_compared_with_itself(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path, grid={"loop.enabled": [True, False]})
    r = run(["eval", str(f), "--json", "--limit", "1", "--compare-no-retry"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    runs = [s["run"] for s in json.loads(r.stdout)]
    assert runs == ["t-enabled=True", "t-enabled=False-noloop", "t-enabled=True-single", "t-enabled=True-plain"]


def test_a_run_resumed_with_another_memory_store_labels_only_its_own_answers(tmp_path):
    # The README's split: the same run folder, a new --memory for the next questions. The first
    # answers' outcomes live in the first store: labelled there, skipped (with a note) here.
    import sqlite3

    rows = [{"id": "a", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"]},
            {"id": "b", "question": "Which engineer built the lighthouse at Marrow Point?", "answers": ["Clara Venn"]}]
    f = _batch(tmp_path, questions={"inline": rows})
    ov = fake_overrides(tmp_path)
    one, two = tmp_path / "part1.db", tmp_path / "part2.db"
    r = run(["batch", str(f), "--limit", "1", "--memory", str(one), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    r = run(["batch", str(f), "--offset", "1", "--limit", "1", "--memory", str(two), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: 1 answer(s) of run t were recorded in another memory store" in r.stderr
    answered = [json.loads(x) for x in (tmp_path / "runs" / "t" / "results.jsonl").read_text().splitlines()]
    assert [(x["id"], x["refused"]) for x in answered] == [("a", False), ("b", False)]

    def labels(db):
        with sqlite3.connect(db) as conn:
            return [r[0] for r in conn.execute("SELECT o.item_id FROM feedback f JOIN outcomes o ON o.id = f.outcome_id")]

    assert labels(one) == ["a"] and labels(two) == ["b"]


def test_batch_file_mistakes_are_named(tmp_path):
    from self_improving_rag.batch import BatchSpec, QuestionsSpec, load_batch, load_items
    from self_improving_rag.errors import BatchError

    f = tmp_path / "b.yaml"
    f.write_text("name: t\nquestionz:\n  inline:\n    - question: Who?\n")
    with pytest.raises(BatchError, match="unknown key 'questionz'"):
        load_batch(f)
    f.write_text("name: t\nquestions:\n  file: q.jsonl\n  inline:\n    - question: Who?\n")
    with pytest.raises(BatchError, match="both 'file' and 'inline'; give one of them"):
        load_batch(f)
    f.write_text("name: t2\nquestions:\n  inline:\n    - question: Who?\nname: t3\n")
    with pytest.raises(BatchError, match=r"the key 'name' is given twice in one mapping \(line 5\)"):
        load_batch(f)
    f.write_text("name: t\nquestions:\n  inline: [\n    - question: Who?\n")
    with pytest.raises(BatchError, match=r"malformed YAML at line \d+, column \d+: [a-z]"):  # with the parser's why
        load_batch(f)
    f.write_text("name: t\nquestions:\n  inline:\n    - {question: Who dug it?}\n")
    with pytest.raises(BatchError, match=r"malformed YAML at line 4, column 28: expected ',' or '}', but got '\?'"):
        load_batch(f)
    # A question file where the batch file goes is named as such, with the command that takes it.
    for name, text in (("qa.json", '{"data": []}'), ("qa.jsonl", '{"id": "a", "question": "Q?", "answers": ["x"]}\n')):
        (tmp_path / name).write_text(text)
        with pytest.raises(BatchError, match=rf"{name} is a question file, not a batch YAML file: .*sirag eval --dataset"):
            load_batch(tmp_path / name)
    spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"question": "Who built it?", "answer": "Clara"}]))
    with pytest.raises(BatchError, match="inline question 1 has the key 'answer'; did you mean 'answers'"):
        load_items(spec, tmp_path)
    # A misspelt question field is named; other keys are listed.
    spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"quesion": "Who built it?", "answers": ["Clara"]}]))
    with pytest.raises(BatchError, match="t: inline question 1 has no 'question' field; it has the key 'quesion': "
                                         "did you mean 'question'"):
        load_items(spec, tmp_path)
    spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"ask": "Who built it?"}]))
    with pytest.raises(BatchError, match=r"no 'question' field; it has the keys 'ask'$"):
        load_items(spec, tmp_path)
    # A folder where the batch file goes is named as a folder, not as missing.
    with pytest.raises(BatchError, match="is a folder, not a batch file"):
        load_batch(tmp_path)
    # results.jsonl calls them gold_answers: a user copying that name is told the field's name.
    for key in ("gold_answers", "gold"):
        spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"question": "Who built it?", key: ["Clara"]}]))
        with pytest.raises(BatchError, match=f"the key '{key}'; did you mean 'answers'"):
            load_items(spec, tmp_path)
    # Other keys stay metadata, as the message says.
    spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"question": "Who built it?", "reference": "ch. 3"}]))
    assert load_items(spec, tmp_path)[0].meta["reference"] == "ch. 3"
    # Keys unlike any field are metadata, as in QA files.
    spec = BatchSpec(name="t", questions=QuestionsSpec(inline=[{"question": "Who?", "answers": ["C"], "difficulty": 2}]))
    assert load_items(spec, tmp_path)[0].meta["difficulty"] == 2


def test_an_offset_past_the_last_question_says_so(tmp_path):
    r = run(["batch", str(_batch(tmp_path)), "--offset", "5"], tmp_path, fake_overrides(tmp_path))
    assert "no questions to run: the offset 5 skips all 2 of them; use a smaller offset" in _one_error_line(r)


def test_a_config_folder_is_named_as_a_folder(tmp_path):
    from self_improving_rag.config import load_config
    from self_improving_rag.errors import ConfigError

    with pytest.raises(ConfigError, match="is a folder; pass a YAML file"):
        load_config(tmp_path)


def test_a_batch_that_builds_its_index_says_what_it_indexed_and_left_out(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    (tmp_path / "docs" / "empty.txt").write_text("", encoding="utf-8")
    r = run(["batch", str(f), "--limit", "1"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: indexed " in r.stderr and "warning: " in r.stderr and "empty.txt" in r.stderr, r.stderr
    # A second run of the same documents re-indexes nothing, and says nothing about it.
    spec = yaml.safe_load(f.read_text())
    spec["name"] = "t2"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--limit", "1"], tmp_path, ov)
    assert r.returncode == 0 and "note: indexed" not in r.stderr, r.stderr


def test_eval_without_any_gold_says_nothing_was_graded(tmp_path):
    rows = [{"question": "Who built the lighthouse of Marrow Point?"}]
    f = _batch(tmp_path, questions={"inline": rows})
    r = run(["eval", str(f), "--json"], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "warning: no question of this evaluation has gold answers, so nothing was graded" in r.stderr
    r = run(["batch", str(f), "--json"], tmp_path, fake_overrides(tmp_path))
    assert "nothing was graded" not in r.stderr  # a batch may just run questions


def test_a_batch_never_drops_documents_its_index_holds_from_elsewhere(tmp_path):
    """The batch file's index: built with `sirag ingest` from other documents is not replaced by
    the batch's corpus (it was, with a note after the fact); a corpus that adds documents is fine."""
    from self_improving_rag.retrieval.index import CorpusIndex

    ov = batch_overrides(tmp_path)
    other = write_corpus(tmp_path / "other")
    idx = tmp_path / "index"
    assert run(["ingest", str(other), "--index", str(idx)], tmp_path, ov).returncode == 0
    before = CorpusIndex(idx).current_dir()
    f = _batch(tmp_path)  # corpus: tmp_path/docs, index: tmp_path/index
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 2 and "would remove them" in r.stderr and str(other) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and CorpusIndex(idx).current_dir() == before
    # Listing the index's documents too makes it an addition: the batch runs.
    spec = yaml.safe_load(f.read_text())
    spec["corpus"] = [str(other), *spec["corpus"]]
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    # --retrieval-only ingests into the same index: the same rule.
    spec["corpus"] = spec["corpus"][1:]
    spec["name"] = "t-retrieval"
    f.write_text(yaml.safe_dump(spec))
    r = run(["eval", str(f), "--retrieval-only"], tmp_path, ov)
    assert r.returncode == 2 and "would remove them" in r.stderr, r.stderr
    # A finished run is only summarised again: nothing is ingested, so nothing is refused.
    spec["name"] = "t"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr


def test_a_corpus_folder_that_holds_the_indexed_one_keeps_its_documents(tmp_path):
    ov = batch_overrides(tmp_path)
    docs = write_corpus(tmp_path / "all" / "docs")
    idx = tmp_path / "index"
    assert run(["ingest", str(docs), "--index", str(idx)], tmp_path, ov).returncode == 0
    f = _batch(tmp_path)
    spec = yaml.safe_load(f.read_text())
    spec["corpus"] = [str(tmp_path / "all")]
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_corpus_entry_is_refused_not_read_as_the_batch_folder(tmp_path, blank):
    f = _batch(tmp_path, corpus=[blank])
    r = run(["batch", str(f)], cwd=tmp_path)
    line = _one_error_line(r)
    assert "corpus" in line and "entry 1 is empty" in line
    assert not (tmp_path / "index").exists(), "an index was built from the batch file's folder"


def test_a_yes_no_limit_is_refused_not_read_as_one_question(tmp_path):
    f = _batch(tmp_path, limit=True)
    line = _one_error_line(run(["batch", str(f)], cwd=tmp_path))
    assert "limit" in line and "expected a number" in line


def test_a_question_made_usable_since_is_asked_again(tmp_path):
    """An unusable question is written as an error row and stays done; once its text is fixed, the
    same run asks it (it used to refuse the run: "holds answers to 1 question(s) whose text is
    different")."""
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    spec = yaml.safe_load(f.read_text())
    spec["questions"]["inline"] = [ROWS[0], {"id": "c", "question": "?? !!", "answers": ["Clara Venn"]}]
    f.write_text(yaml.safe_dump(spec))
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    results = tmp_path / "runs" / "t" / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["id"] for r in rows if "error" in r] == ["c"]
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0  # unchanged: nothing asked again
    assert len(results.read_text().splitlines()) == 2
    spec["questions"]["inline"][1]["question"] = "Who built the lighthouse?"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    last = json.loads(results.read_text().splitlines()[-1])
    assert last["id"] == "c" and "error" not in last and last["question"] == "Who built the lighthouse?"
    assert json.loads(r.stdout)[0]["errors"] == 0


def test_a_run_given_other_documents_says_so(tmp_path):
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0  # one of two questions
    more = write_corpus(tmp_path / "more")
    spec = yaml.safe_load(f.read_text())
    spec["corpus"].append(str(more))
    f.write_text(yaml.safe_dump(spec))
    # A resume would answer the rest from other documents than the first: refused.
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "other settings (corpus: [" in line and str(more) in line
    spec["corpus"].pop()
    f.write_text(yaml.safe_dump(spec))
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0  # the same documents: resumed, finished
    spec["corpus"].append(str(more))
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f)], tmp_path, ov)  # finished: summarised as it was, and the change named
    assert r.returncode == 0 and "is finished" in r.stderr and "corpus: [" in r.stderr, r.stderr


def test_sirags_own_files_among_the_documents_are_not_indexed(tmp_path):
    """A corpus folder that holds the batch's output, logs and memory (corpus: the working folder)
    indexes the documents only: not a run's comparison table, nor warnings about logs or the store."""
    from self_improving_rag.retrieval.index import CorpusIndex

    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    spec = yaml.safe_load(f.read_text())
    spec["corpus"] = [str(tmp_path)]
    f.write_text(yaml.safe_dump(spec))
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    assert (tmp_path / "logs").is_dir() and (tmp_path / "memory" / "memory.db").is_file()
    # What an eval's comparisons write beside its runs: a results table in Markdown.
    (tmp_path / "runs" / "t-comparison.md").write_text("| run | f1 |\n|---|---|\n| t | 0.5 |\n", encoding="utf-8")
    spec["name"] = "t2"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    files = CorpusIndex(tmp_path / "index").manifest()["files"]  # document id -> its file
    paths = [v["path"] for v in files.values()]
    assert "t-comparison" not in files and len(paths) == 2, paths
    assert all("/runs/" not in p and "/logs/" not in p and "/memory/" not in p for p in paths), paths
    assert "memory.db" not in r.stderr and "sirag-" not in r.stderr, r.stderr
    r = run(["eval", str(f), "--retrieval-only"], tmp_path, ov)  # builds its index the same way
    assert r.returncode == 0, r.stderr
    assert "t-comparison" not in CorpusIndex(tmp_path / "index").manifest()["files"]
    # A document of the user's in a folder named like the log folder is a document.
    (tmp_path / "logs" / "lab-notes.md").write_text("The keeper logs the tides at dawn.\n", encoding="utf-8")
    spec["name"] = "t3"
    f.write_text(yaml.safe_dump(spec))
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    assert "lab-notes" in CorpusIndex(tmp_path / "index").manifest()["files"]


def test_an_eval_that_rechunks_its_index_says_why(tmp_path):
    """A run whose --set changes a chunker's settings re-chunks the index for that chunker: the
    note names the chunker and the settings, not "new or changed documents" (none changed)."""
    f = _batch(tmp_path)
    ov = fake_overrides(tmp_path)
    r = run(["eval", str(f), "--retrieval-only", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: indexed 2 new or changed document(s) of 2" in r.stderr and "re-chunked" not in r.stderr
    r = run(["eval", str(f), "--retrieval-only", "--json", "--set", "ingestion.semantic.percentile=80"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "new or changed" not in r.stderr
    assert "note: re-chunked all 2 document(s)" in r.stderr and "chunker(s) semantic:" in r.stderr
    r = run(["eval", str(f), "--retrieval-only", "--json", "--set", "ingestion.semantic.percentile=80"], tmp_path, ov)
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr  # nothing changed: nothing said
    path = tmp_path / "docs" / "harbour.md"
    path.write_text(path.read_text(encoding="utf-8") + "\nThe harbour wall was rebuilt in 1901.\n", encoding="utf-8")
    r = run(["eval", str(f), "--retrieval-only", "--json", "--set", "ingestion.semantic.percentile=80"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: indexed 1 new or changed document(s) of 2" in r.stderr and "re-chunked" not in r.stderr


def _outcomes(db):
    """run name -> {item id: (question, answer, outcome id)} of the store at ``db``."""
    from self_improving_rag.memory import MemoryStore

    store = MemoryStore(db)
    try:
        out: dict = {}
        for r in store._rows("SELECT id, run_id, item_id, question, answer FROM outcomes"):
            out.setdefault(r["run_id"], {})[r["item_id"]] = (r["question"], r["answer"], r["id"])
        return out
    finally:
        store.close()


def _rows_of(results):
    return {r["id"]: r for r in map(json.loads, results.read_text().splitlines())}


def _labels(db):
    from self_improving_rag.memory import MemoryStore

    store = MemoryStore(db)
    try:
        return {r["outcome_id"]: r["label"] for r in store._rows("SELECT outcome_id, label FROM feedback")}
    finally:
        store.close()


def test_a_run_name_memory_holds_other_answers_under_records_its_own(tmp_path):
    """Memory keys a batch's answers by (run name, question id) and hands back the answer it holds:
    a second batch of the same name with other questions, or a re-run whose results folder was
    deleted, recorded none of its answers and put its gold labels on the old ones. The old answers
    are now kept under another run name, and the run records its own."""
    ov = fake_overrides(tmp_path)
    db = tmp_path / "memory" / "memory.db"
    first = _batch(tmp_path)
    assert run(["batch", str(first), "--json"], tmp_path, ov).returncode == 0
    before = _outcomes(db)["t"]
    labels_before = _labels(db)
    # Another batch file, same name, other questions with the same ids, another output folder.
    spec = yaml.safe_load(first.read_text())
    spec["questions"]["inline"] = [{"id": "a", "question": "Which engineer built the lighthouse of Marrow Point?",
                                    "answers": ["Clara Venn"]},
                                   {"id": "b", "question": "Who keeps the lighthouse of Marrow Point?", "answers": ["Tom"]}]
    spec["overrides"]["generator.replies"] = ["The engineer Clara Venn [1]."]
    spec["output_dir"] = str(tmp_path / "other-runs")
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(second), "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "held 2 answer(s) under run name t" in r.stderr and "they are kept under run name t@" in r.stderr
    now = _outcomes(db)
    archived = [k for k in now if k.startswith("t@")]
    assert len(archived) == 1 and now[archived[0]] == before  # the first batch's answers, kept as they were
    rows = _rows_of(tmp_path / "other-runs" / "t" / "results.jsonl")
    for item in ("a", "b"):  # each row's outcome is the answer it shows, to its question
        question, answer, oid = now["t"][item]
        assert rows[item]["outcome_id"] == oid and question == rows[item]["question"]
        assert answer == rows[item]["answer"] == "The engineer Clara Venn [1]."
    labels = _labels(db)
    assert labels[now["t"]["a"][2]] == 1 and labels[now["t"]["b"][2]] == 0  # the gold labels went to these answers
    assert {oid: labels.get(oid) for _, _, oid in before.values()} == {
        oid: labels_before.get(oid) for _, _, oid in before.values()}  # and the first batch's stay theirs
    assert labels_before[before["a"][2]] == 1
    # The first run's results deleted, then run again: its answers are recorded anew.
    import shutil

    shutil.rmtree(tmp_path / "runs" / "t")
    r = run(["batch", str(first), "--json"], tmp_path, ov)
    assert r.returncode == 0 and "they are kept under run name t@" in r.stderr, r.stderr
    rows = _rows_of(tmp_path / "runs" / "t" / "results.jsonl")
    now = _outcomes(db)
    assert {k: v[2] for k, v in now["t"].items()} == {k: r["outcome_id"] for k, r in rows.items()}
    assert len([k for k in now if k.startswith("t@")]) == 2 and sum(len(v) for v in now.values()) == 6


def test_an_interrupted_runs_unwritten_answers_are_asked_and_recorded_again(tmp_path):
    """A run killed between recording answers in memory and writing their rows (one per worker)
    resumes: those questions are asked again, and each row's outcome in memory is its answer."""
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    db = tmp_path / "memory" / "memory.db"
    assert run(["batch", str(f), "--json"], tmp_path, ov).returncode == 0
    results = tmp_path / "runs" / "t" / "results.jsonl"
    first_row = results.read_text().splitlines()[0]
    results.write_text("")  # two answers recorded (say, by two workers), neither written
    r = run(["batch", str(f), "--json", "--set", 'generator.replies=["Clara Venn, the engineer [1]."]'], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    rows = _rows_of(results)
    now = _outcomes(db)
    assert {k: v[2] for k, v in now["t"].items()} == {k: r["outcome_id"] for k, r in rows.items()}
    assert {v[1] for v in now["t"].values()} == {"Clara Venn, the engineer [1]."}
    assert json.loads(first_row)["outcome_id"] in {v[2] for k, v in now.items() if k.startswith("t@") for v in v.values()}


def test_a_policy_mapping_in_the_overrides_keeps_the_set_strategy_first(tmp_path):
    """overrides: {strategy.chunker: semantic, policy: {seed: 0}} pins the chunker: the policy
    mapping does not say where the first strategy comes from."""
    ov = fake_overrides(tmp_path)
    spec = yaml.safe_load(_batch(tmp_path).read_text())
    spec["overrides"].update({"strategy.chunker": "semantic", "policy": {"seed": 0}})
    f = tmp_path / "pinned.yaml"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json", "--limit", "1"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    saved = yaml.safe_load((tmp_path / "runs" / "t" / "config.yaml").read_text())
    assert saved["policy"]["first_from_memory"] is False and saved["strategy"]["chunker"] == "semantic"


def test_a_refused_resume_leaves_memory_as_it_was(tmp_path):
    """The answers a killed run recorded but did not write are moved aside only once the run goes
    ahead: a resume refused for other settings changes nothing in memory."""
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    db = tmp_path / "memory" / "memory.db"
    assert run(["batch", str(f), "--json"], tmp_path, ov).returncode == 0
    results = tmp_path / "runs" / "t" / "results.jsonl"
    results.write_text(results.read_text().splitlines()[0] + "\n")  # the second answer never written
    before = _outcomes(db)
    r = run(["batch", str(f), "--json", "--set", "strategy.top_k=3"], tmp_path, ov)
    assert "made with other settings" in _one_error_line(r)
    assert _outcomes(db) == before


def test_a_run_resumed_after_a_fit_is_scored_with_the_weights_it_started_with(tmp_path):
    """A run split over two commands, with a fit stored in between (by another command, or the
    automatic one), scores its later answers with the weights its first were scored with: its
    summary's AUROC and ECE pool the confidences of one model. A new run takes the new fit."""
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory import MemoryStore

    f = _batch(tmp_path)
    ov = fake_overrides(tmp_path)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0
    pinned = json.loads((tmp_path / "runs" / "t" / "calibration.json").read_text())
    assert pinned["fit_id"] is None  # no fit yet: the default weights
    with MemoryStore(tmp_path / "memory" / "memory.db") as store:
        fit_id = store.save_calibration({**DEFAULT_WEIGHTS, "bias": DEFAULT_WEIGHTS["bias"] - 3.0}, 2, {})
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert f"memory's newer fit #{fit_id} scores runs started from now on" in r.stderr
    rows = [json.loads(ln) for ln in (tmp_path / "runs" / "t" / "results.jsonl").read_text().splitlines()]
    reasons = [row["attempts"][0]["signals"]["confidence"]["reason"] for row in rows]
    assert len(reasons) == 2 and all("(default weights)" in why for why in reasons), reasons
    # A run started now is scored with the fit, and records it.
    spec = yaml.safe_load(f.read_text())
    f2 = tmp_path / "batch2.yaml"
    f2.write_text(yaml.safe_dump({**spec, "name": "t2"}))
    assert run(["batch", str(f2)], tmp_path, ov).returncode == 0
    assert json.loads((tmp_path / "runs" / "t2" / "calibration.json").read_text())["fit_id"] == fit_id
    rows = [json.loads(ln) for ln in (tmp_path / "runs" / "t2" / "results.jsonl").read_text().splitlines()]
    assert all("(fitted weights)" in row["attempts"][0]["signals"]["confidence"]["reason"] for row in rows)


def test_a_resume_whose_recorded_fit_memory_lacks_is_refused(tmp_path):
    f = _batch(tmp_path)
    ov = fake_overrides(tmp_path)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0
    (tmp_path / "runs" / "t" / "calibration.json").write_text(json.dumps({"fit_id": 99}))
    r = run(["batch", str(f)], tmp_path, ov)
    line = _one_error_line(r)
    assert "calibration fit #99" in line and "--memory" in line
    assert len((tmp_path / "runs" / "t" / "results.jsonl").read_text().splitlines()) == 1
    (tmp_path / "runs" / "t" / "calibration.json").write_text("{not json")
    assert "calibration.json is damaged" in _one_error_line(run(["batch", str(f)], tmp_path, ov))


def test_a_squad_corpus_holds_only_its_own_file_s_paragraphs(tmp_path):
    """Two SQuAD files with one name in different folders share runs/corpora/<stem>: the second
    run must not answer from the first one's paragraphs (nor an edited file from its old ones)."""
    def squad(folder, title, context, question, answer):
        (tmp_path / folder).mkdir(exist_ok=True)
        doc = {"version": "v2.0", "data": [{"title": title, "paragraphs": [{"context": context, "qas": [
            {"id": folder + "1", "question": question, "is_impossible": False,
             "answers": [{"text": answer, "answer_start": context.index(answer)}]}]}]}]}
        path = tmp_path / folder / "sq.json"
        path.write_text(json.dumps(doc))
        return path

    a = squad("a", "Varno", "Varno exports salted cod and tin.", "What does Varno export?", "salted cod")
    b = squad("b", "Mars", "Mars has two small moons.", "How many moons does Mars have?", "two")
    ov = batch_overrides(tmp_path)
    common = ["--output-dir", str(tmp_path / "runs"), "--retrieval-only", "--json"]
    assert run(["eval", "--dataset", str(a), *common], tmp_path, ov).returncode == 0
    r = run(["eval", "--dataset", str(b), "--name", "mars", *common], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "runs" / "corpora" / "sq").iterdir()] == ["mars_p00.txt"]
    from self_improving_rag.retrieval.index import CorpusIndex

    docs = {c.doc_id for c in CorpusIndex(tmp_path / "runs" / "mars" / "index").load_chunks("section")}
    assert docs == {"mars_p00"}


def test_a_separate_loop_off_run_of_another_slice_is_compared_on_the_shared_questions(tmp_path):
    """The loop run answered questions 1-2 earlier; a separate loop-off run with --limit 1 answers
    question 1 only: the comparison is made over question 1, for every run, and says so."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    ov = fake_overrides(tmp_path) + ["generator.replies=[\"Clara Venn built it [1].\"]"]
    common = ["eval", "--dataset", str(qa), "--corpus", str(write_corpus(tmp_path / "docs")),
              "--output-dir", str(tmp_path / "runs"), "--name", "cmp"]
    assert run(common, tmp_path, ov).returncode == 0
    r = run([*common, "--compare-no-retry", "--separate-no-retry-run", "--limit", "1", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "the comparison covers the 1 they all answered" in r.stderr
    by_run = {s["run"]: s for s in json.loads(r.stdout)}
    assert sorted(by_run) == ["cmp", "cmp-noloop", "cmp-plain"]
    assert {s["n"] for s in by_run.values()} == {1}
    # Each run's own summary keeps all of its questions.
    assert json.loads((tmp_path / "runs" / "cmp" / "summary.json").read_text())["n"] == 2


def test_runs_compared_are_summarised_on_their_shared_questions_only(tmp_path):
    """Every figure of a run compared on fewer questions comes from those questions (none is the
    whole run's), and runs that share no question are not compared."""
    from self_improving_rag.batch import summarise
    from self_improving_rag.batch.noloop import on_common_questions
    from self_improving_rag.errors import BatchError
    from self_improving_rag.evaluation.datasets import QAItem

    items = {k: QAItem(id=k, question=f"Q {k}?", answers=("x",), answerable=True) for k in "abcd"}

    def write(name, ids, answer):
        (tmp_path / name).mkdir()
        rows = [{"id": k, "question": f"Q {k}?", "answer": answer, "refused": False, "confidence": 0.9,
                 "gold_answers": ["x"], "answerable": True, "attempts": [], "timings_ms": {"total": 1.0},
                 "refusal_reason": None, "sources": []} for k in ids]
        (tmp_path / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"run": name, "grid_point": {}, "loop": True, **summarise(rows)}

    full = write("r", "ab", "x")
    half = write("r-noloop", "b", "y")
    out = {s["run"]: s for s in on_common_questions([full, half], tmp_path, items)}
    assert out["r"]["n"] == 1 and out["r"]["compared_on"] == 1 and out["r"]["correct_or_rightly_refused"] == 1.0
    assert out["r-noloop"]["correct_or_rightly_refused"] == 0.0
    other = write("s", "cd", "x")
    with pytest.raises(BatchError, match="share no question"):
        on_common_questions([full, other], tmp_path, items)


def test_a_separate_loop_off_run_is_scored_with_its_loop_runs_fit(tmp_path):
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory import MemoryStore

    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    ov = fake_overrides(tmp_path)
    common = ["eval", "--dataset", str(qa), "--corpus", str(write_corpus(tmp_path / "docs")),
              "--output-dir", str(tmp_path / "runs"), "--name", "cmp", "--set", "calibration.auto_fit=false"]
    assert run(common, tmp_path, ov).returncode == 0
    with MemoryStore(tmp_path / "memory" / "memory.db") as store:
        fit_id = store.save_calibration({**DEFAULT_WEIGHTS, "bias": DEFAULT_WEIGHTS["bias"] - 3.0}, 2, {})
    assert run([*common, "--compare-no-retry", "--separate-no-retry-run"], tmp_path, ov).returncode == 0
    assert json.loads((tmp_path / "runs" / "cmp" / "calibration.json").read_text())["fit_id"] is None
    assert json.loads((tmp_path / "runs" / "cmp-noloop" / "calibration.json").read_text())["fit_id"] is None
    rows = [json.loads(ln) for ln in (tmp_path / "runs" / "cmp-noloop" / "results.jsonl").read_text().splitlines()]
    assert all("(default weights)" in row["attempts"][0]["signals"]["confidence"]["reason"] for row in rows)
    assert fit_id is not None


def test_a_run_of_an_older_sirag_records_its_fit_at_its_first_resume(tmp_path):
    f = _batch(tmp_path)
    ov = fake_overrides(tmp_path)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0
    pin = tmp_path / "runs" / "t" / "calibration.json"
    pin.unlink()  # as a run made before runs recorded their fit
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    assert json.loads(pin.read_text())["fit_id"] is None and json.loads(pin.read_text())["from_resume"]


def test_a_resume_note_leaves_out_first_from_memory_either_way(tmp_path):
    f = _batch(tmp_path)
    ov = fake_overrides(tmp_path)
    assert run(["batch", str(f), "--limit", "1", "--set", "strategy.top_k=2"], tmp_path, ov).returncode == 0
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "strategy.top_k: 2 -> 5" in line and "first_from_memory" not in line


def test_squad_corpus_pruning_leaves_files_sirag_did_not_write(tmp_path):
    from self_improving_rag.batch import squad_corpus

    doc = {"version": "v2.0", "data": [{"title": "Mars", "paragraphs": [{"context": "Mars has two moons.", "qas": []}]}]}
    squad = tmp_path / "sq.json"
    squad.write_text(json.dumps(doc))
    out = tmp_path / "corpora" / "sq"
    out.mkdir(parents=True)
    (out / "varno_p00.txt").write_text("Varno exports cod.")
    (out / "my notes.txt").write_text("mine")
    squad_corpus(squad, out)
    assert sorted(p.name for p in out.iterdir()) == ["mars_p00.txt", "my notes.txt"]


def test_a_run_name_with_a_dot_keeps_its_whole_comparison_file_name(tmp_path):
    f = _batch(tmp_path, name="exp.v2", grid={"strategy.top_k": [2, 3]})
    r = run(["batch", str(f)], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "runs").iterdir() if "comparison" in p.name)
    assert {"exp.v2-comparison.json", "exp.v2-comparison.md"} <= set(names), names
    # With the loop off, the runs are NAME-...-noloop, and so is their comparison.
    r = run(["batch", str(f), "--no-retry"], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "runs" / "exp.v2-noloop-comparison.json").is_file()
    assert len(json.loads((tmp_path / "runs" / "exp.v2-comparison.json").read_text())) == 2


def test_a_grid_point_with_a_chunker_the_index_lacks_is_refused_before_any_run(tmp_path):
    f = _batch(tmp_path, overrides={"ingestion.chunkers": ["section", "fixed"]},
               grid={"strategy.chunker": ["section", "semantic"]})
    line = _one_error_line(run(["batch", str(f)], tmp_path, fake_overrides(tmp_path)))
    assert "strategy.chunker='semantic'" in line or "'semantic'" in line
    assert "ingestion.chunkers" in line and not (tmp_path / "runs").exists()


def test_with_no_corpus_a_grid_chunker_is_checked_against_the_index_itself(tmp_path):
    """A batch that only reads an index (no corpus: nothing is re-ingested) searches the chunkers
    that index holds, whatever ingestion.chunkers says now."""
    ov = batch_overrides(tmp_path)
    docs = write_corpus(tmp_path / "docs")
    assert run(["ingest", str(docs), "--index", str(tmp_path / "only-fixed"), "--set", "ingestion.chunkers=[fixed]"],
               tmp_path, ov).returncode == 0
    assert run(["ingest", str(docs), "--index", str(tmp_path / "all")], tmp_path, ov).returncode == 0

    def batch(index, **extra):
        spec = {"name": "t", "index": str(tmp_path / index), "questions": {"inline": ROWS},
                "output_dir": str(tmp_path / "runs"), **extra}
        f = tmp_path / f"{index}.yaml"
        f.write_text(yaml.safe_dump(spec))
        return f

    line = _one_error_line(run(["batch", str(batch("only-fixed", grid={"strategy.chunker": ["fixed", "section"]}))],
                               tmp_path, ov))
    assert "'section'" in line and "only-fixed" in line and "re-ingest" in line
    r = run(["batch", str(batch("all", overrides={"ingestion.chunkers": ["fixed"]},
                                grid={"strategy.chunker": ["section"]}))], tmp_path, ov)
    assert r.returncode == 0, r.stderr


def test_a_name_yaml_reads_as_another_type_says_to_quote_it(tmp_path):
    from self_improving_rag.batch import load_batch
    from self_improving_rag.errors import BatchError

    f = tmp_path / "b.yaml"
    for written, said in (("off", "the yes/no value false"), ("2024", "the number 2024")):
        f.write_text(f"name: {written}\nquestions:\n  inline:\n    - question: Who?\n")
        with pytest.raises(BatchError, match=f"YAML read it as {said}: quote"):
            load_batch(f)
    f.write_text("name: 'off'\nquestions:\n  inline:\n    - question: Who?\n")
    assert load_batch(f)[0].name == "off"


def test_an_automatic_inline_id_that_clashes_names_both_questions(tmp_path):
    from self_improving_rag.batch import load_batch, load_items
    from self_improving_rag.errors import BatchError

    f = tmp_path / "b.yaml"
    f.write_text("name: t\nquestions:\n  inline:\n    - {id: q002, question: 'Who?'}\n    - {question: 'What?'}\n")
    spec, base = load_batch(f)
    with pytest.raises(BatchError, match="inline question 2 has no id and gets 'q002' by its place, which inline "
                                         "question 1 names as its own"):
        load_items(spec, base)
    f.write_text("name: t\nquestions:\n  inline:\n    - {id: a, question: 'Who?'}\n    - {id: a, question: 'What?'}\n")
    spec, base = load_batch(f)
    with pytest.raises(Exception, match="duplicate id 'a'"):
        load_items(spec, base)


def test_an_inline_answer_yaml_reads_as_a_number_yes_no_or_date_says_to_quote_it(tmp_path):
    """`answers: [1523]` is a list, but of a number: the error names the value and says to quote
    it, instead of "must be a list of strings", which reads as if the list itself were wrong."""
    from self_improving_rag.batch import load_batch, load_items
    from self_improving_rag.errors import BatchError

    f = tmp_path / "b.yaml"
    for key, written, said in (("answers", "[1523]", "1523, which YAML reads as a number"),
                               ("answers", "[yes]", "True, which YAML reads as a yes/no value"),
                               ("evidence", "[2020-01-01]", "datetime.date(2020, 1, 1), which YAML reads as a date")):
        f.write_text(f"name: t\nquestions:\n  inline:\n    - question: When?\n      {key}: {written}\n")
        spec, base = load_batch(f)
        with pytest.raises(BatchError, match=rf"inline question 1: '{key}' holds {re.escape(said)}, not text; "
                                             "put the text as you wrote it in quotes"):
            load_items(spec, base)
    # An empty value has nothing to quote: following "quote it" gave 'question' must be non-empty.
    for key, written in (("question", "~"), ("answers", "[~]")):
        f.write_text(f"name: t\nquestions:\n  inline:\n    - question: When?\n      {key}: {written}\n"
                     if key != "question" else f"name: t\nquestions:\n  inline:\n    - question: {written}\n")
        spec, base = load_batch(f)
        with pytest.raises(BatchError, match=rf"'{key}' holds an empty value \(YAML reads it as null \(nothing\)\); "
                                             "give it text"):
            load_items(spec, base)
    f.write_text("name: t\nquestions:\n  inline:\n    - question: When?\n      answers: ['1523']\n      evidence: ~\n")
    spec, base = load_batch(f)
    assert load_items(spec, base)[0].answers == ("1523",)


def test_a_rerun_that_asks_nothing_says_so(tmp_path):
    """A rerun of a finished run prints the same summary as the run itself: a note says that
    nothing was asked again, so it does not read as a second run."""
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0 and "nothing was asked again" not in r.stderr, r.stderr
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: run t: the 2 question(s) asked for were all answered before, so nothing was asked again" in r.stderr
    # A question that could not be asked was not answered before: the note says so.
    spec = yaml.safe_load(f.read_text())
    spec["name"] = "u"
    spec["questions"]["inline"] = [ROWS[0], {"id": "c", "question": "?? !!", "answers": ["Clara Venn"]}]
    f.write_text(yaml.safe_dump(spec))
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    r = run(["batch", str(f)], tmp_path, ov)
    assert ("note: run u: the 2 question(s) asked for were all answered before (1 of them could not be asked), "
            "so nothing was asked again") in r.stderr, r.stderr


def test_a_question_that_could_not_be_asked_is_named_on_stderr(tmp_path):
    """An unusable question becomes an error row that counts as wrong; the run names it and why
    as it happens, not only as an errors= count at the end of the summary line."""
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    spec = yaml.safe_load(f.read_text())
    spec["questions"]["inline"] = [ROWS[0], {"id": "c", "question": "?? !!", "answers": ["Clara Venn"]}]
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: run t: question c could not be asked (the question has no letters or digits" in r.stderr
    assert "question a could not" not in r.stderr


def test_the_summary_line_says_n_a_for_a_figure_it_cannot_compute(capsys):
    """A figure a run cannot give (an AUROC with one class of answers, a refusal recall with no
    unanswerable question) reads "n/a", as the other commands print it, not Python's None."""
    from self_improving_rag.batch.report import print_summary

    print_summary({"run": "t", "n": 2, "em": 0.5, "confidence_auroc": None, "faithfulness_mean": None,
                    "refused": 1, "answered": 1,
                    "refusal": {"precision": 0.0, "recall": None, "f1": None, "false_refusal_rate": 1.0}})
    out = capsys.readouterr().out
    assert "None" not in out
    assert "run t: n=2, em=0.500, confidence_auroc=n/a, faithfulness_mean=n/a, refused=1, answered=1" in out
    assert "  refusal: precision=0.000, recall=n/a, f1=n/a, false_refusal_rate=1.000" in out


def test_a_set_of_a_key_the_grid_varies_is_refused_not_silently_replaced(tmp_path):
    # The grid point's value comes last: `--set strategy.top_k=9` ran top_k 2 and 3, saying nothing.
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path, grid={"strategy.top_k": [2, 3]})
    line = _one_error_line(run(["batch", str(f), "--set", "strategy.top_k=9"], tmp_path, ov))
    assert "strategy.top_k" in line and "--set" in line and "grid" in line, line
    assert not (tmp_path / "runs").exists()
    # A --set of another key, and the batch file's own overrides of a grid key (both in view), still run.
    f = _batch(tmp_path, grid={"generator.replies": [["Clara Venn [1]."], ["Osric [1]."]]})
    r = run(["batch", str(f), "--set", "strategy.top_k=4", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert [s["n"] for s in json.loads(r.stdout)] == [2, 2]


def test_a_file_where_an_output_folder_goes_is_named_with_the_fix(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    blocker = tmp_path / "out"
    blocker.write_text("notes\n")
    # Was: "error: .../out/t: Not a directory; check that path (...)", naming a path the user never gave.
    line = _one_error_line(run(["eval", str(f), "--output-dir", str(blocker)], tmp_path, ov))
    assert f"{blocker} is a file, not a folder" in line and "--output-dir" in line, line
    line = _one_error_line(run(["eval", str(f), "--output-dir", str(blocker / "sub")], tmp_path, ov))
    assert f"{blocker} is a file" in line, line
    assert blocker.read_text() == "notes\n"
    # A file where the run's own folder goes (was: ".../runs/t: File exists; check that path").
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "t").write_text("keep\n")
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert f"{tmp_path / 'runs' / 't'} is a file" in line and "name" in line, line
    assert (tmp_path / "runs" / "t").read_text() == "keep\n"


def test_a_key_left_empty_is_named_as_empty(tmp_path):
    # The example batch file has "# overrides:" with its entries commented out: uncommenting the key
    # alone made it null, reported as "Input should be a valid dictionary".
    ov = fake_overrides(tmp_path)
    docs = write_corpus(tmp_path / "docs")
    f = tmp_path / "batch.yaml"
    f.write_text(f"name: t\ncorpus: [{docs}]\nquestions:\n  inline:\n    - question: Who built it?\n"
                 "overrides:\n#  strategy.top_k: 6\n")
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "'overrides' is empty" in line and "remove the key" in line, line



def test_the_batch_files_log_dir_is_where_its_log_goes(tmp_path):
    # Logging was set up before the batch file was read: its overrides' paths.log_dir, recorded in
    # the run's config.yaml, was ignored and the log went to logs/ in the current folder.
    ov = [o for o in fake_overrides(tmp_path) if not o.startswith("paths.log_dir=")]
    logs = tmp_path / "batch-logs"
    f = _batch(tmp_path, overrides={"generator.replies": ["Clara Venn built it [1]."], "paths.log_dir": str(logs)})
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load((tmp_path / "runs" / "t" / "config.yaml").read_text())["paths"]["log_dir"] == str(logs)
    text = "".join(p.read_text() for p in logs.glob("*.jsonl"))
    assert "first attempt with" in text, "the engine's lines go to the batch file's log folder"


def test_an_index_folder_under_overrides_or_grid_is_refused_naming_index(tmp_path):
    # A batch gives every run its index: (else <output_dir>/<name>/index): a paths.index_dir under
    # overrides: was replaced by it unseen, and the run built another index than the one named.
    ov = fake_overrides(tmp_path)
    mine = tmp_path / "mine"
    replies = {"generator.replies": ["Clara Venn built it [1]."]}
    for overrides in ({**replies, "paths.index_dir": str(mine)}, {**replies, "paths": {"index_dir": str(mine)}}):
        f = _batch(tmp_path, overrides=overrides)
        line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
        assert f"overrides: sets paths.index_dir ({mine})" in line and f"write index: {mine} instead" in line, line
        assert not mine.exists() and not (tmp_path / "runs").exists()
    f = _batch(tmp_path, grid={"paths.index_dir": [str(mine), str(tmp_path / "other")]})
    line = _one_error_line(run(["eval", str(f), "--retrieval-only"], tmp_path, ov))
    assert "grid: varies paths.index_dir" in line and "its own index:" in line, line
    # Other paths.* settings there are used, as before.
    f = _batch(tmp_path, overrides={**replies, "paths.memory_db": str(tmp_path / "m.db")})
    assert run(["batch", str(f)], tmp_path, [o for o in ov if not o.startswith("paths.memory_db=")]).returncode == 0
    assert (tmp_path / "m.db").exists() and (tmp_path / "index").is_dir()


def test_a_resume_of_a_run_whose_config_yaml_is_gone_is_refused(tmp_path):
    # With no record of the settings there was nothing to compare: a resume with other settings
    # added its rows to results made with the old ones, in one results.jsonl.
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0
    run_dir = tmp_path / "runs" / "t"
    results = (run_dir / "results.jsonl").read_text()
    (run_dir / "config.yaml").unlink()
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov + ["strategy.top_k=7"]))
    assert f"{run_dir} already holds 1 result(s), but its config.yaml" in line and "is missing" in line, line
    assert "another name" in line and "--name NEW" in line, line
    (run_dir / "config.yaml").write_text("strategy: [unclosed\n")
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "cannot be read" in line, line
    assert (run_dir / "results.jsonl").read_text() == results
    assert (run_dir / "config.yaml").read_text() == "strategy: [unclosed\n"
    # A finished run asks nothing, so it is only summarised, as before.
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0


def test_resume_given_as_an_option_says_that_running_again_resumes(tmp_path):
    f = _batch(tmp_path)
    for command in ("eval", "batch"):
        r = run([command, str(f), "--resume"], tmp_path)
        assert r.returncode == 2 and "unrecognized arguments: --resume" in r.stderr, r.stderr
        assert "run the same batch again, under the same name" in r.stderr and "already answered" in r.stderr


def test_the_results_line_of_a_grid_names_its_comparison_files(tmp_path):
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path, grid={"strategy.top_k": [3, 5]})
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("results: "))
    assert line.endswith("; comparison: t-comparison.{json,md,png}"), line
    assert (tmp_path / "runs" / "t-comparison.json").is_file()
    r = run(["eval", str(f), "--compare-no-retry"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("results: "))
    assert line.endswith("; comparisons: t-comparison.{json,md,png}, t-loop-vs-noloop.{json,md,png}"), line


def test_retrieval_only_names_an_output_folder_that_is_a_file(tmp_path):
    # The index goes to <output_dir>/<name>/index by default: a file there was reported as an
    # index problem ("pass --index with a directory path").
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path, index=None)
    (tmp_path / "out").write_text("keep\n")
    line = _one_error_line(run(["eval", str(f), "--retrieval-only", "--output-dir", str(tmp_path / "out")],
                               tmp_path, ov))
    assert f"the output folder {tmp_path / 'out'} is a file" in line and "--output-dir" in line, line
    assert "--index" not in line, line
    assert (tmp_path / "out").read_text() == "keep\n"


def _run_configs(runs):
    return {p.parent.name: yaml.safe_load(p.read_text()) for p in sorted(runs.glob("*/config.yaml"))}


def test_a_grid_of_mappings_conflicts_only_with_the_keys_its_values_set(tmp_path):
    # Grid points are deep-merged: `strategy: [{top_k: 2}, {top_k: 4}]` with --set strategy.retriever=bm25
    # runs bm25 at each top_k, but was refused as "the grid varies strategy".
    ov = fake_overrides(tmp_path)
    f = _batch(tmp_path, grid={"strategy": [{"top_k": 2}, {"top_k": 4}]})
    r = run(["batch", str(f), "--set", "strategy.retriever=bm25", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    configs = _run_configs(tmp_path / "runs")
    assert sorted((c["strategy"]["retriever"], c["strategy"]["top_k"]) for c in configs.values()) == [
        ("bm25", 2), ("bm25", 4)], configs
    # A key the values do set is still refused, named as the values set it.
    line = _one_error_line(run(["batch", str(f), "--set", "strategy.top_k=9"], tmp_path, ov))
    assert "the grid varies strategy.top_k" in line and "drop the --set item" in line, line
    # A grid of paths mappings that leaves the index alone is not "varying the index".
    f = _batch(tmp_path, grid={"paths": [{"memory_db": str(tmp_path / "a.db")}, {"memory_db": str(tmp_path / "b.db")}]})
    r = run(["batch", str(f), "--json"], tmp_path, [o for o in ov if not o.startswith("paths.memory_db=")])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.db").is_file() and (tmp_path / "b.db").is_file()
    f = _batch(tmp_path, grid={"paths": [{"index_dir": str(tmp_path / "i1")}, {"index_dir": str(tmp_path / "i2")}]})
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "grid: varies paths" in line and "its own index:" in line, line


SQUAD = {"version": "v2.0", "data": [{"title": "Lamp", "paragraphs": [{
    "context": "The lighthouse was built by Clara Venn in 1890.",
    "qas": [{"id": "s1", "question": "Who built the lighthouse?", "is_impossible": False,
             "answers": [{"text": "Clara Venn", "answer_start": 28}]}]}]}]}


@pytest.mark.parametrize("extra", [[], ["--retrieval-only"]])
def test_a_squad_batch_whose_output_folder_is_a_file_names_the_output_folder(tmp_path, extra):
    # The SQuAD paragraphs are written under <output_dir>/corpora/ before the folders were checked:
    # the error was a bare ".../outfile/corpora/sq: Not a directory". batch_overrides: with
    # fake_overrides' paths.index_dir the index is that folder, and "no sqidx" could not fail.
    ov = batch_overrides(tmp_path)
    (tmp_path / "sq.json").write_text(json.dumps(SQUAD))
    (tmp_path / "outfile").write_text("keep\n")
    f = tmp_path / "sq.yaml"
    f.write_text(yaml.safe_dump({"name": "sq", "questions": {"file": "sq.json"}, "index": "sqidx",
                                 "output_dir": "outfile"}))
    line = _one_error_line(run(["eval", str(f), *extra], tmp_path, ov))
    assert f"the output folder {tmp_path / 'outfile'} is a file" in line and "Not a directory" not in line, line
    assert (tmp_path / "outfile").read_text() == "keep\n" and not (tmp_path / "sqidx").exists()
    # A file where the dataset's paragraph folder goes is named too.
    (tmp_path / "out" / "corpora").mkdir(parents=True)
    (tmp_path / "out" / "corpora" / "sq").write_text("keep\n")
    line = _one_error_line(run(["eval", str(f), "--output-dir", str(tmp_path / "out"), *extra], tmp_path, ov))
    assert f"{tmp_path / 'out' / 'corpora' / 'sq'} is a file" in line and "Not a directory" not in line, line


def test_a_log_dir_in_the_overrides_does_not_refuse_a_batch_its_grid_mends(tmp_path):
    # overrides: ingestion.fixed.size 20 is valid only with each grid point's overlap; paths.log_dir
    # there made the whole config be validated with no grid point applied, and the batch refused.
    ov = [o for o in fake_overrides(tmp_path) if not o.startswith(("paths.log_dir=", "ingestion.fixed."))]
    logs = tmp_path / "batch-logs"
    replies = {"generator.replies": ["Clara Venn built it [1]."]}
    grid = {"ingestion.fixed.overlap": [2, 5]}
    f = _batch(tmp_path, overrides={**replies, "ingestion.fixed.size": 20}, grid=grid)
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    f = _batch(tmp_path, name="t2", grid=grid,
               overrides={**replies, "ingestion.fixed.size": 20, "paths.log_dir": str(logs)})
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "first attempt with" in "".join(p.read_text() for p in logs.glob("*.jsonl"))


def test_an_index_dir_override_suggests_the_index_as_read_from_the_batch_files_folder(tmp_path):
    # paths.index_dir is read from the current folder, index: from the batch file's: the value as
    # given, written as index:, would point elsewhere.
    ov = fake_overrides(tmp_path)
    sub = tmp_path / "sub"
    sub.mkdir()
    spec = {"name": "t", "corpus": [str(write_corpus(tmp_path / "docs"))], "questions": {"inline": ROWS}}
    for value, suggested in (("myidx", str(tmp_path / "myidx")), ("sub/idx", "idx")):
        (sub / "b.yaml").write_text(yaml.safe_dump({**spec, "overrides": {"paths.index_dir": value}}))
        line = _one_error_line(run(["batch", "sub/b.yaml"], tmp_path, ov))
        assert f"write index: {suggested} instead" in line, line


def test_a_grid_of_memory_stores_with_memory_given_says_to_drop_memory(tmp_path):
    ov = [o for o in fake_overrides(tmp_path) if not o.startswith("paths.memory_db=")]
    f = _batch(tmp_path, grid={"paths.memory_db": [str(tmp_path / "a.db"), str(tmp_path / "b.db")]})
    line = _one_error_line(run(["batch", str(f), "--memory", str(tmp_path / "c.db")], tmp_path, ov))
    assert "given with --memory" in line and "drop --memory" in line and "--set" not in line, line
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov + [f"paths.memory_db={tmp_path / 'c.db'}"]))
    assert "given with --set" in line and "drop the --set item" in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("corpus", ["\n  - docs\n  -\n", " [docs, ~]\n"])
def test_an_empty_list_item_is_named_as_an_item_not_a_key(tmp_path, corpus):
    f = tmp_path / "b.yaml"
    f.write_text(f"name: t\nquestions:\n  inline:\n    - question: Who?\ncorpus:{corpus}")
    line = _one_error_line(run(["batch", str(f)], tmp_path, fake_overrides(tmp_path)))
    assert "item 2 of 'corpus' is empty" in line and "remove the item" in line, line
    assert "key" not in line.split(";")[0], line


def test_an_override_yaml_reads_as_a_date_is_text_not_an_internal_error(tmp_path):
    ov = [o for o in fake_overrides(tmp_path) if not o.startswith("paths.log_dir=")]
    docs = write_corpus(tmp_path / "docs")
    head = f"name: t\ncorpus: [{docs}]\nquestions:\n  inline:\n    - question: Who built the lighthouse?\n"
    f = tmp_path / "b.yaml"
    f.write_text(head + "overrides:\n  some.key: 2024-01-01\n")
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert "internal error" not in line and "some" in line, line
    # A setting that takes text takes it as written (a log folder named 2024-01-01, in a grid too).
    f.write_text(head + "overrides:\n  paths.log_dir: 2024-01-01\n  generator.replies: ['Clara Venn [1].']\n"
                 "grid:\n  strategy.top_k: [2]\n  generator.replies: [[1999-12-31]]\n")
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "2024-01-01").is_dir()


def _index_built(folder) -> bool:
    return (folder / "CURRENT").is_file()


def test_set_paths_index_dir_names_a_batchs_index_as_index_does(tmp_path):
    """For batch and eval, --set paths.index_dir=DIR was replaced unseen by the batch's own index
    folder (its index:, else <output_dir>/<name>/index): it means --index DIR now, and with an
    --index naming another folder it is refused, before anything is written."""
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path)  # index: tmp_path/index
    mine = tmp_path / "mine"
    r = run(["batch", str(f), "--json", "--limit", "1", "--set", f"paths.index_dir={mine}"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(mine) and not (tmp_path / "index").exists()
    assert yaml.safe_load((tmp_path / "runs" / "t" / "config.yaml").read_text())["paths"]["index_dir"] == str(mine)
    # eval --dataset (no index: of its own: <output_dir>/<name>/index otherwise), and --retrieval-only.
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    r = run(["eval", "--dataset", str(qa), "--corpus", str(tmp_path / "docs"), "--output-dir", str(tmp_path / "runs"),
             "--limit", "1", "--json", "--set", f"paths.index_dir={tmp_path / 'mine2'}"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(tmp_path / "mine2") and not (tmp_path / "runs" / "qa" / "index").exists()
    r = run(["eval", str(f), "--retrieval-only", "--json", "--set", f"paths.index_dir={tmp_path / 'mine3'}"],
            tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(tmp_path / "mine3") and not (tmp_path / "index").exists()
    # Like --index, it names the user's index: one built from other documents is not re-ingested.
    other = tmp_path / "other"
    other.mkdir()
    (other / "mill.txt").write_text("The miller Anna Grove pressed cider in the red barn.\n")
    assert run(["ingest", str(other), "--index", str(tmp_path / "theirs")], tmp_path, ov).returncode == 0
    line = _one_error_line(run(["batch", str(f), "--set", f"paths.index_dir={tmp_path / 'theirs'}"], tmp_path, ov))
    assert "(--set paths.index_dir) was built from" in line and "--index" in line, line
    # --index and --set naming two folders: one line naming both, nothing written.
    before = sorted(tmp_path.rglob("*"))
    for cmd in (["batch", str(f)], ["eval", str(f)], ["eval", str(f), "--retrieval-only"],
                ["eval", "--dataset", str(qa), "--corpus", str(tmp_path / "docs"), "--name", "d"]):
        line = _one_error_line(run([*cmd, "--index", str(tmp_path / "a"), "--set", f"paths.index_dir={tmp_path / 'b'}"],
                                   tmp_path, ov))
        assert f"--index {tmp_path / 'a'} and --set paths.index_dir={tmp_path / 'b'}" in line, line
        assert "give the folder once" in line, line
    assert sorted(tmp_path.rglob("*")) == before
    # The same folder both ways is one index.
    r = run(["batch", str(f), "--json", "--limit", "1", "--index", str(mine), "--set", f"paths.index_dir={mine}"],
            tmp_path, ov)
    assert r.returncode == 0, r.stderr


def test_a_config_files_index_dir_is_the_index_of_a_batch_that_names_none(tmp_path):
    """A --config file's paths.index_dir was replaced unseen too: it is the index of a batch with no
    index: (and no --index); the batch file's index: wins over it; the packaged default
    (index/default, as in a copy of configs/default.yaml) leaves a batch its own folder."""
    ov = batch_overrides(tmp_path)
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(f"paths:\n  index_dir: {tmp_path / 'cfgidx'}\n")
    f = _batch(tmp_path, index=None)
    r = run(["batch", str(f), "--json", "--limit", "1", "--config", str(cfg)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(tmp_path / "cfgidx") and not (tmp_path / "runs" / "t" / "index").exists()
    f = _batch(tmp_path)  # index: tmp_path/index
    r = run(["eval", str(f), "--retrieval-only", "--json", "--config", str(cfg), "--set", "generator.replies=[]"],
            tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(tmp_path / "index")
    default = tmp_path / "default.yaml"
    default.write_text("paths:\n  index_dir: index/default\n")
    f = _batch(tmp_path, index=None, name="own")
    r = run(["eval", str(f), "--retrieval-only", "--json", "--config", str(default)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert _index_built(tmp_path / "runs" / "own" / "index") and not (tmp_path / "index" / "default").exists()


def test_a_refused_squad_batch_leaves_the_output_folder_as_it_was(tmp_path):
    """A SQuAD file's paragraphs were written under <output_dir>/corpora/ before the grid and the
    settings were checked: a refused batch left them behind."""
    context = "The lighthouse of Marrow Point was built in 1852 by the engineer Clara Venn."
    doc = {"version": "v2.0", "data": [{"title": "Harbour", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "Who built the lighthouse?", "is_impossible": False,
         "answers": [{"text": "Clara Venn", "answer_start": context.index("Clara Venn")}]}]}]}]}
    squad = tmp_path / "sq.json"
    squad.write_text(json.dumps(doc))
    out = tmp_path / "runs"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "blocked").write_text("a file where a run's folder goes\n")

    def batch(n, **extra):
        f = tmp_path / f"b{n}.yaml"
        f.write_text(yaml.safe_dump({"name": "sq", "questions": {"file": str(squad)}, "output_dir": str(out),
                                     **extra}))
        return f

    def snapshot():
        return sorted((str(p.relative_to(out)), p.read_bytes() if p.is_file() else None) for p in out.rglob("*"))

    before = snapshot()
    ov = batch_overrides(tmp_path)
    cases = [
        (["batch", str(batch(1, grid={"strategy.top_k": [3, "abc"]}))], "strategy.top_k"),
        (["batch", str(batch(2, overrides={"ingestion.chunkers": ["fixed"]},
                             grid={"strategy.chunker": ["fixed", "semantic"]}))], "'semantic'"),
        (["eval", str(batch(3, grid={"strategy.top_k": [2, 3]})), "--set", "strategy.top_k=4"], "the grid varies"),
        (["eval", str(batch(4, overrides={"strategy.top_k": "abc"})), "--retrieval-only"], "strategy.top_k"),
        (["eval", "--dataset", str(squad), "--output-dir", str(out), "--name", "blocked"], "is a file"),
    ]
    for argv, word in cases:
        line = _one_error_line(run(argv, tmp_path, ov))
        assert word in line, line
        assert snapshot() == before, argv
    # A batch that goes ahead writes them.
    r = run(["eval", "--dataset", str(squad), "--output-dir", str(out), "--retrieval-only", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (out / "corpora" / "sq").iterdir()] == ["harbour_p00.txt"]


def test_a_resume_refused_for_another_index_names_the_runs_own(tmp_path):
    """A run started before --set paths.index_dir (or a --config file's) named a batch's index
    recorded the batch's own folder; the same command line now names another, and the refusal
    said only "Run with the same settings": it names --index with the run's own folder, which
    then resumes the run."""
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path, index=None)
    assert run(["batch", str(f), "--limit", "1"], tmp_path, ov).returncode == 0
    own = tmp_path / "runs" / "t" / "index"
    line = _one_error_line(run(["batch", str(f), "--set", f"paths.index_dir={tmp_path / 'mine'}"], tmp_path, ov))
    assert f"--index {own} in place of the --set paths.index_dir item" in line, line
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(f"paths:\n  index_dir: {tmp_path / 'mine'}\n")
    line = _one_error_line(run(["batch", str(f), "--config", str(cfg)], tmp_path, ov))
    assert f"--index {own}, which replaces the --config file's paths.index_dir" in line, line
    r = run(["batch", str(f), "--json", "--config", str(cfg), "--index", str(own)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["n"] == 2
    assert not (tmp_path / "mine").exists()


def test_a_config_file_naming_the_packaged_default_index_is_not_followed_silently(tmp_path):
    """A --config file's paths.index_dir index/default (the packaged default) is not a batch's index:
    a user who wrote it to run on that folder got the batch's own folder without a word. The note
    names the folder used and --index index/default; a file that leaves the key out, or a batch
    with an index: of its own, gets none."""
    ov = batch_overrides(tmp_path)
    default = tmp_path / "default.yaml"
    default.write_text("paths:\n  index_dir: index/default\n")
    f = _batch(tmp_path, index=None)
    r = run(["eval", str(f), "--retrieval-only", "--json", "--config", str(default)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "packaged default" in ln]
    assert len(notes) == 1 and str(tmp_path / "runs" / "t" / "index") in notes[0], r.stderr
    assert "--index index/default" in notes[0], notes
    other = tmp_path / "other.yaml"
    other.write_text("strategy:\n  top_k: 4\n")
    for argv in (["eval", str(f), "--retrieval-only", "--json", "--config", str(other)],
                 ["eval", str(_batch(tmp_path)), "--retrieval-only", "--json", "--config", str(default)]):
        r = run(argv, tmp_path, ov)
        assert r.returncode == 0 and "packaged default" not in r.stderr, r.stderr


def test_a_missing_corpus_path_refuses_the_batch_before_anything_is_written(tmp_path):
    # The path was found missing only by the ingest, after the memory store (memory/memory.db)
    # and the output folder (runs/) had been made: a refused batch left them behind.
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path)
    spec = yaml.safe_load(f.read_text())
    f.write_text(yaml.safe_dump({**spec, "corpus": [spec["corpus"][0], "no-such-docs"]}))
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert not (tmp_path / "memory").exists() and not (tmp_path / "runs").exists()
    assert f"the corpus path {tmp_path / 'no-such-docs'} does not exist; nothing was changed" in line, line
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    line = _one_error_line(run(["eval", "--dataset", str(qa), "--corpus", "missing-docs"], tmp_path, ov))
    assert "missing-docs" in line and "--corpus" in line, line
    assert not (tmp_path / "memory").exists() and not (tmp_path / "runs").exists()
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize("body, said", [
    # The most natural slips of a new user: pydantic said only "Input should be a valid list" (or
    # named its own class, "instance of QuestionsSpec"), with no word of how to write the key.
    ("corpus: docs\nquestions: {file: q.jsonl}\n", "'corpus' must be a list, not a text: write corpus: [docs]"),
    ("questions: q.jsonl\n", "'questions' must be a mapping, not a text: write questions: {file: q.jsonl}"),
    ("questions: {file: q.jsonl}\noverrides: [strategy.top_k=3]\n",
     "'overrides' must be a mapping, not a list: write overrides: {strategy.top_k: 6}"),
    ("questions: {file: q.jsonl}\ngrid: {strategy.top_k: 3}\n",
     "'grid.strategy.top_k' must be a list of values, one run each, not a number: write strategy.top_k: [3]"),
    ("questions:\n  inline: Who built it?\n", "'questions.inline' must be a list, not a text: write inline: ["),
    ("questions:\n  inline:\n    - Who built it?\n",
     "'questions.inline.0' must be a mapping with question: (and optional answers:), not a text: "
     'write {question: "Who built it?"}'),
    ('corpus: "my docs: v2"\nquestions: {file: q.jsonl}\n', """write corpus: ["my docs: v2"]"""),
    # What it says to write reads back as what was meant: it said corpus: [2024] (a number again),
    # corpus: [True] (Python's spelling, a yes/no value again), strategy.chunker: [on] (YAML's yes).
    ('corpus: "2024"\nquestions: {file: q.jsonl}\n', 'write corpus: ["2024"]'),
    ("corpus: 2024\nquestions: {file: q.jsonl}\n", 'write corpus: ["2024"]'),
    ("corpus: yes\nquestions: {file: q.jsonl}\n", "not a yes/no value: write corpus: [docs] (or one"),
    ('questions: {file: q.jsonl}\ngrid: {retrieval.reranker: "off"}\n', 'write retrieval.reranker: ["off"]'),
    ("questions: {file: q.jsonl}\ngrid: {loop.enabled: false}\n", "write loop.enabled: [false]"),
    ('questions: "null"\n', 'write questions: {file: "null"}'),
    ('questions:\n  inline:\n    - "yes"\n', 'write {question: "yes"}'),
])
def test_a_key_of_the_wrong_shape_says_how_to_write_it(tmp_path, body, said):
    from self_improving_rag.batch import load_batch
    from self_improving_rag.errors import BatchError

    f = tmp_path / "b.yaml"
    f.write_text("name: t\n" + body)
    with pytest.raises(BatchError) as info:
        load_batch(f)
    assert said in str(info.value) and "QuestionsSpec" not in str(info.value), str(info.value)


def test_a_finished_run_is_summarised_again_after_its_documents_moved_away(tmp_path):
    # A finished run is only summarised again (nothing is ingested or asked), so a corpus path gone
    # since does not stop it; e7c8c29's early check refused it ("the corpus path ... does not
    # exist"). A run with questions left still needs its documents and is refused as before.
    ov = batch_overrides(tmp_path)
    f = _batch(tmp_path)
    assert run(["batch", str(f)], tmp_path, ov).returncode == 0
    (tmp_path / "docs").rename(tmp_path / "docs-moved")
    r = run(["batch", str(f)], tmp_path, ov)
    assert r.returncode == 0 and "were all answered before" in r.stderr and "run t: n=2" in r.stdout, r.stderr
    spec = yaml.safe_load(f.read_text())
    rows = spec["questions"]["inline"]
    f.write_text(yaml.safe_dump({**spec, "questions": {"inline": rows + [{**rows[1], "id": "c"}]}}))
    line = _one_error_line(run(["batch", str(f)], tmp_path, ov))
    assert f"the corpus path {tmp_path / 'docs'} does not exist" in line, line
