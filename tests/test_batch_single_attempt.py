"""The single-attempt (loop-off) view of a loop-on run: decision.acceptable, batch.single_attempt_row,
derive_single_attempt_run, and ``sirag eval --compare-no-retry`` / ``--separate-no-retry-run`` /
``--offset`` through the real CLI entry point (in-process, with the hash embedder and scripted generator)."""

from __future__ import annotations

import copy
import re
import json
from pathlib import Path

import pytest
import yaml

from self_improving_rag import batch
from self_improving_rag.batch.report import print_summary
from self_improving_rag.batch.runner import ask_row
from self_improving_rag.decision import acceptable
from self_improving_rag.config import load_config
from self_improving_rag.evaluation.datasets import QAItem
from tests.conftest import fake_overrides, main_in_process, write_corpus

REFUSE = "I cannot answer this from the documents."
GOOD = "Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."
MADE_UP = "Tobias Lune saved eleven sailors [1]. He was later crowned king of Portugal in Lisbon [1]."
QUESTION = "Who saved the sailors of the Greyling in the storm?"


# -- 1. acceptable and outcome.finish -------------------------------------------------------

@pytest.mark.parametrize("answer, conf, failure, threshold, expected", [
    ("Clara Venn", 0.5, "NONE", 0.5, True),  # the threshold itself clears it
    ("Clara Venn", 0.49, "NONE", 0.5, False),
    ("Clara Venn", 0.9, "LOW_CONFIDENCE", 0.5, True),  # only unsupported claims or missing evidence veto
    ("Clara Venn", 0.99, "HALLUCINATION_RISK", 0.5, False),
    ("Clara Venn", 0.99, "WEAK_RETRIEVAL", 0.5, False),  # its evidence was not found
    ("Clara Venn", 0.99, "REDUNDANT_CONTEXT", 0.5, True),
    (None, 0.99, "NONE", 0.5, False),
    ("Clara Venn", None, "NONE", 0.5, False),  # None counts as 0
    ("Clara Venn", None, "NONE", 0.0, True),
])
def test_acceptable(answer, conf, failure, threshold, expected):
    assert acceptable(answer, conf, failure, threshold) is expected


def test_finish_refuses_a_confident_hallucination(make_engine):
    engine, _, _ = make_engine([MADE_UP])
    ans = engine.ask(QUESTION, loop=False)
    att = ans.attempts[0]
    assert att.attribution.failure == "HALLUCINATION_RISK"
    assert att.answer is not None and att.signals.confidence.value >= engine.config.loop.answer_threshold
    assert ans.refused and ans.answer is None and ans.chosen_attempt is None


def test_finish_chooses_through_acceptable(make_engine, monkeypatch):
    engine, _, _ = make_engine([GOOD])
    assert not engine.ask(QUESTION, loop=False).refused
    seen = []
    monkeypatch.setattr("self_improving_rag.decision.acceptable", lambda *a: seen.append(a) or False)
    ans = engine.ask(QUESTION, loop=False)
    assert ans.refused and ans.answer is None
    assert seen and seen[0][0] == GOOD and seen[0][2] == "NONE" and seen[0][3] == engine.config.loop.answer_threshold


# -- 2. single_attempt_row and derive_single_attempt_run ----------------------------------------

def attempt(number: int, answer: str | None, conf: float | None, failure: str, tokens: int = 100) -> dict:
    return {"number": number, "answer": answer, "failure": failure, "failure_reason": f"why {number}",
            "signals": {"confidence": {"value": conf}, "faithfulness": {"value": 1.0}},
            "timings_ms": {"retrieve": 1.0 * number, "total": 2.0 * number}, "prompt_tokens": tokens}


def loop_row(rid: str, attempts: list[dict], gold=("Clara Venn",), chosen: int | None = None) -> dict:
    pick = next((a for a in attempts if a["number"] == chosen), None)
    return {"id": rid, "question": f"question {rid}?", "answer": pick and pick["answer"], "refused": pick is None,
            "confidence": (pick or attempts[-1])["signals"]["confidence"]["value"] or 0.0, "chosen_attempt": chosen,
            "attempts": attempts, "timings_ms": {"retrieve": 9.0, "total": 99.0}, "gold_answers": list(gold),
            "answerable": bool(gold), "refusal_reason": None if pick else "loop refused", "evidence_hit": None}


def test_confident_first_answer_is_kept():
    row = loop_row("a", [attempt(1, "Clara Venn built it [1].", 0.8, "NONE", 77)], chosen=1)
    before = copy.deepcopy(row)
    out = batch.single_attempt_row(row, 0.5)
    assert row == before, "the loop-on row must not be changed"
    assert out["answer"] == "Clara Venn built it [1]." and out["refused"] is False and out["confidence"] == 0.8
    assert out["chosen_attempt"] == 1 and out["refusal_reason"] is None and out["derived_from_first_attempt"] is True
    assert out["timings_ms"] == {"retrieve": 1.0, "total": 2.0} and len(out["attempts"]) == 1
    assert batch.grade(out)["correct"] is True


@pytest.mark.parametrize("first", [
    attempt(1, "Clara Venn built it [1].", 0.3, "LOW_CONFIDENCE"),  # below the threshold
    attempt(1, "Clara Venn built it [1].", 0.95, "HALLUCINATION_RISK"),  # flagged, however confident
    attempt(1, None, 0.9, "MISSED_ANSWER"),  # the model refused
    attempt(1, "Clara Venn built it [1].", None, "NONE"),  # no confidence at all
])
def test_unacceptable_first_attempt_becomes_a_refusal(first):
    row = loop_row("b", [first, attempt(2, "Clara Venn built it [1].", 0.9, "NONE")], chosen=2)
    out = batch.single_attempt_row(row, 0.5)
    assert out["refused"] is True and out["answer"] is None and out["chosen_attempt"] is None
    assert [a["number"] for a in out["attempts"]] == [1]
    assert out["confidence"] == (first["signals"]["confidence"]["value"] or 0.0)
    assert out["refusal_reason"] == f"single attempt: {first['failure']}: why 1"
    assert batch.grade(out)["correct"] is False and batch.grade(row)["correct"] is True


def test_row_rescued_on_attempt_two_by_the_real_loop_is_wrong_alone(make_engine):
    engine, _, _ = make_engine([REFUSE, GOOD])
    item = QAItem(id="g1", question=QUESTION, answers=("Tobias Lune",), answerable=True)
    row = json.loads(json.dumps(ask_row(engine, item, "r", True)))  # as stored in results.jsonl
    assert row["chosen_attempt"] == 2 and row["grade"]["correct"] is True and len(row["attempts"]) == 2
    out = batch.single_attempt_row(row, engine.config.loop.answer_threshold)
    assert out["refused"] is True and out["answer"] is None and len(out["attempts"]) == 1
    assert out["attempts"][0]["number"] == 1 and out["attempts"][0]["answer"] is None
    assert "grade" not in out and batch.grade(out)["correct"] is False


def test_derive_single_attempt_run_writes_rows_and_summary(tmp_path):
    rows = [
        loop_row("a", [attempt(1, "Clara Venn built it [1].", 0.9, "NONE", 100)], chosen=1),
        loop_row("b", [attempt(1, None, 0.2, "MISSED_ANSWER", 120), attempt(2, "Tobias Lune [1].", 0.95, "NONE", 500)],
                 gold=("Tobias Lune",), chosen=2),
        loop_row("c", [attempt(1, "Dr. Pim [1].", 0.8, "HALLUCINATION_RISK", 140), attempt(2, None, 0.1, "MISSED_ANSWER")],
                 gold=(), chosen=None),
    ]
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    for r in rows:
        batch.append_row(run / "results.jsonl", r)
    original = (run / "results.jsonl").read_bytes()
    assert batch.summarise(copy.deepcopy(rows))["correct_or_rightly_refused"] == 1.0  # the loop got all three
    s = batch.derive_single_attempt_run(run, load_config(overrides=["loop.target_precision=null"]).loop)
    assert (run / "results.jsonl").read_bytes() == original
    out_dir = tmp_path / "runs" / "demo-single"
    derived = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["id"], r["refused"], len(r["attempts"])) for r in derived] == [("a", False, 1), ("b", True, 1), ("c", True, 1)]
    assert json.loads((out_dir / "summary.json").read_text()) == s
    assert s["run"] == "demo-single" and s["derived_from"] == "demo" and s["loop"] is False
    assert (s["n"], s["answered"], s["refused"]) == (3, 1, 2)
    assert s["correct_or_rightly_refused"] == pytest.approx(2 / 3)
    assert s["attempts_per_question"] == 1.0 and s["prompt_tokens_per_question"] == 120.0
    assert s["first_attempt_success"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("first, gold, refused, correct", [
    # Plain RAG keeps the model's answer whatever the checks said: low confidence, a flagged
    # made-up claim, an answer to an unanswerable question (wrong).
    (attempt(1, "Clara Venn built it [1].", 0.1, "LOW_CONFIDENCE"), ("Clara Venn",), False, True),
    (attempt(1, "Tobias Lune built it [1].", 0.95, "HALLUCINATION_RISK"), ("Clara Venn",), False, False),
    (attempt(1, "Clara Venn built it [1].", 0.9, "NONE"), (), False, False),
    # It declines only where the model declined, or said nothing.
    ({**attempt(1, None, 0.9, "MISSED_ANSWER"), "signals": {"confidence": {"value": 0.9}, "refusal": True}},
     (), True, True),
    (attempt(1, "  ", 0.9, "NONE"), ("Clara Venn",), True, False),
])
def test_plain_attempt_row_answers_as_the_model_did(first, gold, refused, correct):
    row = loop_row("p", [first, attempt(2, "Clara Venn built it [1].", 0.9, "NONE")], gold=gold, chosen=2)
    before = copy.deepcopy(row)
    out = batch.plain_attempt_row(row)
    assert row == before, "the loop-on row must not be changed"
    assert out["refused"] is refused and [a["number"] for a in out["attempts"]] == [1]
    assert out["answer"] == (None if refused else first["answer"])
    assert out["chosen_attempt"] == (None if refused else 1) and out["outcome_id"] is None
    assert batch.grade(out)["correct"] is correct


def test_error_row_without_attempts_is_derived_as_a_refusal():
    row = {"id": "e", "question": "?!?", "answer": None, "refused": True, "refusal_reason": "error: bad question",
           "confidence": 0.0, "sources": [], "attempts": [], "timings_ms": {}, "error": "bad question",
           "gold_answers": ["x"], "answerable": True, "evidence_hit": None}
    out = batch.single_attempt_row(row, 0.5)
    assert out["refused"] is True and out["answer"] is None and out["attempts"] == []
    plain = batch.plain_attempt_row(row)
    assert plain["refused"] is True and plain["answer"] is None and plain["attempts"] == []


# -- 3. sirag eval --compare-no-retry / --separate-no-retry-run / --offset ------------------------

QUESTIONS = ["Who saved the sailors of the Greyling?", "Who rowed out alone in the storm of 1887?",
             "Who saved eleven sailors from the wreck?", "Who kept the silver medal in a tin box?",
             "Who rescued the crew of the schooner Greyling?"]


@pytest.fixture
def world(tmp_path: Path) -> Path:
    docs = write_corpus(tmp_path / "docs")
    items = [{"id": f"q{i}", "question": q, "answers": ["Tobias Lune"]} for i, q in enumerate(QUESTIONS, 1)]
    spec = {"name": "five", "corpus": [str(docs)], "index": str(tmp_path / "index"),
            "output_dir": str(tmp_path / "runs"), "questions": {"inline": items}}
    (tmp_path / "five.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return tmp_path


def sirag(world: Path, *argv: str) -> int:
    """``sirag ARGV`` in-process with the fakes; the first question of each run gets REFUSE, then GOOD."""
    sets = [*fake_overrides(world), "generator.replies=" + json.dumps([REFUSE, GOOD])]
    return main_in_process([*argv, *[x for s in sets for x in ("--set", s)]])


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]


def test_eval_offset_limit_and_derived_comparison(world, capsys):
    assert sirag(world, "eval", str(world / "five.yaml"), "--offset", "2", "--limit", "2", "--compare-no-retry",
                 "--json") == 0
    summaries = json.loads(capsys.readouterr().out)
    runs = world / "runs"
    loop_rows = rows_of(runs / "five")
    assert [r["id"] for r in loop_rows] == ["q3", "q4"]
    assert [r["question"] for r in loop_rows] == QUESTIONS[2:4]
    assert [(r["chosen_attempt"], r["refused"]) for r in loop_rows] == [(2, False), (1, False)]  # q3 rescued
    assert not (runs / "five-noloop").exists(), "the loop-off figures are derived, not run again"
    single = rows_of(runs / "five-single")
    assert [(r["id"], r["refused"], len(r["attempts"])) for r in single] == [("q3", True, 1), ("q4", False, 1)]
    assert [s["run"] for s in summaries] == ["five", "five-single", "five-plain"]
    assert summaries[1]["derived_from"] == "five" and summaries[1]["loop"] is False
    assert summaries[0]["correct_or_rightly_refused"] == 1.0 and summaries[1]["correct_or_rightly_refused"] == 0.5
    assert summaries[0]["attempts_per_question"] == 1.5 and summaries[1]["attempts_per_question"] == 1.0
    # Plain RAG: q3's first reply declines (the model's own refusal), q4's answer is given as it is.
    plain = rows_of(runs / "five-plain")
    assert [(r["id"], r["refused"], r["answer"]) for r in plain] == [("q3", True, None), ("q4", False, GOOD)]
    assert summaries[2]["derived_from"] == "five" and summaries[2]["correct_or_rightly_refused"] == 0.5
    table = json.loads((runs / "five-loop-vs-noloop.json").read_text())
    assert [(r["run"], r["n"]) for r in table] == [("five", 2), ("five-single", 2), ("five-plain", 2)]
    md = (runs / "five-loop-vs-noloop.md").read_text()
    assert "| five |" in md and "| five-single |" in md and "| five-plain |" in md


def test_eval_separate_no_retry_run_runs_the_loop_off(world, capsys):
    assert sirag(world, "eval", str(world / "five.yaml"), "--offset", "2", "--limit", "2", "--compare-no-retry",
                 "--separate-no-retry-run", "--json") == 0
    summaries = json.loads(capsys.readouterr().out)
    runs = world / "runs"
    assert [s["run"] for s in summaries] == ["five", "five-noloop", "five-plain"] and summaries[1]["loop"] is False
    assert not (runs / "five-single").exists()
    noloop = rows_of(runs / "five-noloop")
    assert len(noloop) == len(rows_of(runs / "five")) == 2
    assert [(r["id"], r["refused"], len(r["attempts"])) for r in noloop] == [("q3", True, 1), ("q4", False, 1)]
    table = json.loads((runs / "five-loop-vs-noloop.json").read_text())
    assert [r["run"] for r in table] == ["five", "five-noloop", "five-plain"]


def test_eval_name_overrides_the_batch_files_name(world, capsys):
    # A second run of the same batch must not resume (and silently skip) the first one's folder.
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--json") == 0
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "2", "--name", "five-again", "--json") == 0
    summaries = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [s["run"] for s in summaries] == ["five-again"]
    assert [r["id"] for r in rows_of(world / "runs" / "five")] == ["q1"]
    assert [r["id"] for r in rows_of(world / "runs" / "five-again")] == ["q1", "q2"]


def test_batch_yaml_offset_key_and_cli_override(world, capsys):
    spec = yaml.safe_load((world / "five.yaml").read_text())
    (world / "five.yaml").write_text(yaml.safe_dump({**spec, "offset": 3, "limit": 1}))
    assert sirag(world, "batch", str(world / "five.yaml"), "--json") == 0
    assert [r["id"] for r in rows_of(world / "runs" / "five")] == ["q4"]
    assert sirag(world, "batch", str(world / "five.yaml"), "--offset", "0", "--limit", "2", "--json") == 0
    assert sorted(r["id"] for r in rows_of(world / "runs" / "five")) == ["q1", "q2", "q4"]
    capsys.readouterr()


def test_negative_cli_offset_is_a_user_error(world, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse rejects it: one error line, exit 2
        sirag(world, "batch", str(world / "five.yaml"), "--offset", "-1")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--offset: must be 0 or more, got -1" in err and "Traceback" not in err
    assert not (world / "runs" / "five").exists()


def test_inline_questions_keep_evidence_book_and_are_checked() -> None:
    from self_improving_rag.batch import BatchSpec, QuestionsSpec, load_items
    from self_improving_rag.errors import InputError

    spec = BatchSpec(name="inline", questions=QuestionsSpec(inline=[
        {"question": "Who built the lighthouse?", "answers": ["Clara Venn"], "evidence": ["built by Clara Venn"],
         "book": "harbour", "difficulty": "easy"},
        {"question": "What is the keeper's dog called?"},
        {"question": "What did the keeper dream?", "answerable": False},
    ]))
    first, second, third = load_items(spec, Path("."))
    assert (first.id, first.evidence, first.book, first.meta["difficulty"]) == (
        "q001", ("built by Clara Venn",), "harbour", "easy")
    # No gold given: asked but not graded (so never labelled wrong in memory); said unanswerable: graded.
    assert (second.id, second.answers, second.answerable) == ("q002", (), None)
    assert batch.grade({"answerable": None, "answer": "Rex", "refused": False}) == {}
    assert (third.answers, third.answerable) == ((), False)
    bad = BatchSpec(name="inline", questions=QuestionsSpec(inline=[{"question": "Q?", "answers": "Clara"}]))
    with pytest.raises(InputError, match="'answers' must be a list"):
        load_items(bad, Path("."))
    dup = BatchSpec(name="inline", questions=QuestionsSpec(inline=[{"id": "a", "question": "Q?"}, {"id": "a", "question": "R?"}]))
    with pytest.raises(InputError, match="duplicate id"):
        load_items(dup, Path("."))


def test_command_line_set_wins_over_the_batch_file_and_a_grid_point_wins_over_both() -> None:
    from self_improving_rag.batch import BatchSpec, QuestionsSpec, resolved_config
    from self_improving_rag.config import Config

    spec = BatchSpec(name="p", questions=QuestionsSpec(inline=[{"question": "Q?"}]),
                     overrides={"strategy.top_k": 7, "strategy.prompt": "strict"})
    cfg = resolved_config(Config(), spec, {}, "idx", ["strategy.top_k=3"])
    assert (cfg.strategy.top_k, cfg.strategy.prompt, cfg.paths.index_dir) == (3, "strict", "idx")
    assert resolved_config(Config(), spec, {"strategy.top_k": 9}, "idx", ["strategy.top_k=3"]).strategy.top_k == 9
    assert resolved_config(Config(), spec, {}, "idx").strategy.top_k == 7


def _row(answerable: bool, refused: bool, answer: str | None, conf: float) -> dict:
    attempt = {"number": 1, "failure": "NONE", "prompt_tokens": 10,
               "signals": {"faithfulness": {"value": None if refused else 1.0}}}
    return {"answerable": answerable, "refused": refused, "answer": answer, "gold_answers": ["Clara Venn"] if answerable else [],
            "confidence": conf, "attempts": [attempt], "chosen_attempt": None if refused else 1,
            "timings_ms": {"total": 1.0}}


def test_summary_measures_calibration_on_answers_apart_from_refusals():
    rows = [_row(True, False, "Clara Venn [1]", 0.9), _row(True, False, "Tobias Lune [1]", 0.2),
            _row(False, True, None, 0.1), _row(False, True, None, 0.3), _row(False, False, "Gull Island [1]", 0.6)]
    s = batch.summarise(rows)
    # The answers alone, the one to an unanswerable question included (wrong): right at 0.9,
    # wrong at 0.2 and 0.6, ranked perfectly; ECE = (0.1 + 0.2 + 0.6) / 3.
    assert s["confidence_auroc_answered"] == 1.0
    # Three answers are too few for an interval: every draw would repeat them (1.00–1.00).
    assert s["confidence_auroc_answered_interval"] is None
    assert s["ece_answered"] == pytest.approx(0.3)
    # All rows also count the two right refusals as "correct" at confidences 0.1 and 0.3.
    assert s["ece"] > 0.4
    # What the user got: three answers returned, one right; the withheld ones count nowhere here.
    assert (s["answered_right"], s["answered_wrong"], s["answered_accuracy"]) == (1, 2, pytest.approx(1 / 3))


def test_a_wrong_answer_withheld_shows_in_the_answers_returned_not_in_the_score(capsys):
    """Withholding a wrong answer to an answerable question leaves correct_or_rightly_refused
    as it was; the answers returned say what the user was spared."""
    given = [_row(True, False, "Clara Venn [1]", 0.9), _row(True, False, "Tobias Lune [1]", 0.6)]
    withheld = [_row(True, False, "Clara Venn [1]", 0.9), _row(True, True, None, 0.2)]
    a, b = batch.summarise(copy.deepcopy(given)), batch.summarise(copy.deepcopy(withheld))
    assert a["correct_or_rightly_refused"] == b["correct_or_rightly_refused"] == 0.5
    assert (a["answered_wrong"], a["answered_accuracy"]) == (1, 0.5)
    assert (b["answered_wrong"], b["answered_accuracy"]) == (0, 1.0)
    print_summary({"run": "t", **b})
    out = capsys.readouterr().out
    assert "answered_accuracy=1.000" in out and "refused=1, answered=1, answered_right=1, answered_wrong=0" in out
    assert "answered_accuracy" in batch.COMPARE_KEYS


def test_summary_counts_error_rows_apart_from_refusals():
    # Two questions the engine could not process (too long, no words): wrong in the score, but
    # neither a refusal by judgement nor a confidence to calibrate.
    ok = [_row(True, False, "Clara Venn [1]", 0.9), _row(False, True, None, 0.1)]
    errors = [{**_row(True, True, None, 0.0), "attempts": [], "error": "question too long"},
              {**_row(False, True, None, 0.0), "attempts": [], "error": "no words"}]
    s = batch.summarise(copy.deepcopy(ok + errors))
    base = batch.summarise(copy.deepcopy(ok))
    assert (s["n"], s["errors"], s["refused"], s["answered"]) == (4, 2, 1, 1)
    assert s["correct_or_rightly_refused"] == 0.5 and base["correct_or_rightly_refused"] == 1.0
    assert s["refusal"] == base["refusal"]  # the unanswerable error row is no right refusal
    assert s["confidence_auroc"] == base["confidence_auroc"] and s["ece"] == base["ece"]
    assert s["em"] == 0.5  # the answerable error row scores 0
    # The costs per question are over the questions the engine took: an error row has no attempts.
    for key in ("attempts_per_question", "prompt_tokens_per_question", "first_attempt_success"):
        assert s[key] == base[key], key
    assert (s["attempts_per_question"], s["prompt_tokens_per_question"]) == (1.0, 10.0)
    assert batch.summarise(copy.deepcopy(errors))["attempts_per_question"] is None


def test_markdown_table_cells_keep_their_pipes_inside():
    md = batch.markdown_table([{"strategy": "c=section|r=hybrid|k=5", "recall": 0.8, "note": None}])
    header, rule, row = md.strip().splitlines()
    # Unescaped pipes delimit cells: three cells in every line.
    count = lambda line: len(re.findall(r"(?<!\\)\|", line)) - 1  # noqa: E731
    assert count(header) == count(row) == 3 and rule == "|---|---|---|"
    assert "c=section\\|r=hybrid\\|k=5" in row and "0.800" in row


def test_compare_never_overwrites_a_run_that_owns_the_derived_folder(world, capsys):
    # A real run named five-plain exists: deriving five's plain-RAG figures there would overwrite it.
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--name", "five-plain") == 0
    runs = world / "runs"
    before = {p.name: p.read_bytes() for p in (runs / "five-plain").iterdir() if p.is_file()}
    capsys.readouterr()
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--compare-no-retry") == 2
    err = capsys.readouterr().err
    assert "five-plain already holds something else (a run of its own)" in err and "--name" in err
    assert {p.name: p.read_bytes() for p in (runs / "five-plain").iterdir() if p.is_file()} == before
    assert not (runs / "five").exists(), "refused before the run started"
    # Derived folders of this run are rewritten by a second comparison, as before.
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--compare-no-retry", "--name", "other") == 0
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "2", "--compare-no-retry", "--name", "other") == 0
    assert len(rows_of(runs / "other-plain")) == 2
    # A derived folder of another run is not taken over either.
    (runs / "x-single").mkdir()
    (runs / "x-single" / "summary.json").write_text(json.dumps({"derived_from": "y"}), encoding="utf-8")
    from self_improving_rag.errors import BatchError

    with pytest.raises(BatchError, match="derived from run y"):
        batch.derive_single_attempt_run(runs / "x", load_config(overrides=["loop.target_precision=null"]).loop)


def test_a_damaged_run_config_is_named_by_the_comparison(world, capsys):
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1") == 0
    cfg = world / "runs" / "five" / "config.yaml"
    cfg.write_text("loop: [unclosed\n", encoding="utf-8")
    capsys.readouterr()
    # The run is finished, so the comparison only derives its figures: it needs the run's settings.
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--compare-no-retry") == 2
    err = capsys.readouterr().err
    assert f"{cfg} cannot be read as the run's settings" in err and "internal error" not in err
    assert cfg.read_text(encoding="utf-8") == "loop: [unclosed\n"


def test_an_eval_settles_the_confidence_weights_once_before_its_runs(world, capsys):
    """With enough labels in memory the weights are fitted before the runs; the gold labels the
    loop run writes do not calibrate its loop-off comparison, only the next command."""
    from self_improving_rag.memory import MemoryStore
    from tests.memory.memory_testkit import add_labelled_answers

    db = world / "memory" / "memory.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    with MemoryStore(db) as store:
        add_labelled_answers(store, 30, 30)
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "2", "--compare-no-retry",
                 "--separate-no-retry-run", "--set", "calibration.auto_refit_after=1", "--json") == 0
    err = capsys.readouterr().err
    assert err.count("confidence calibrated on the 60 labelled answers in memory") == 1
    with MemoryStore(db, read_only=True) as store:
        # Labelled after the runs: the loop run's two answers and the loop-off run's one (q1 declined).
        assert store.labelled_answers() == 63
        fit = store.latest_calibration()
        assert fit["id"] == 1 and fit["n"] == 60  # and made no second fit
    for run in ("five", "five-noloop"):
        run_cfg = yaml.safe_load((world / "runs" / run / "config.yaml").read_text())
        assert run_cfg["calibration"]["auto_fit"] is False
        assert all("(fitted weights)" in r["attempts"][0]["signals"]["confidence"]["reason"] for r in rows_of(world / "runs" / run))
    # The next command starts from the labels the eval wrote.
    assert sirag(world, "eval", str(world / "five.yaml"), "--limit", "1", "--name", "again",
                 "--set", "calibration.auto_refit_after=1", "--json") == 0
    assert "confidence calibrated on the 63 labelled answers in memory" in capsys.readouterr().err
    with MemoryStore(db, read_only=True) as store:
        assert store.latest_calibration()["n"] == 63


def test_plain_rag_returns_an_answer_that_only_echoes_the_question(make_engine):
    """The engine withholds an answer that only echoes the question (its refusal signal) and keeps
    the model's words as raw_answer; plain RAG has no such check: only the model's own decline
    (or nothing said) is withheld."""
    engine, _, _ = make_engine(["The Greyling [1].", GOOD])
    item = QAItem(id="e1", question=QUESTION, answers=(), answerable=False)
    row = json.loads(json.dumps(ask_row(engine, item, "r", True)))  # as stored in results.jsonl
    first = row["attempts"][0]
    assert first["answer"] is None and first["raw_answer"] == "The Greyling [1]."  # withheld by the engine
    out = batch.plain_attempt_row(row)
    assert out["refused"] is False and out["answer"] == "The Greyling [1]."
    assert batch.grade(out)["correct"] is False  # an answer to an unanswerable question
    declined = attempt(1, "I cannot answer this from the documents.", 0.1, "MISSED_ANSWER")
    declined["signals"]["refusal"] = True
    out = batch.plain_attempt_row(loop_row("v", [declined], gold=(), chosen=None))
    assert out["refused"] is True and out["refusal_reason"] == "plain RAG: the model declined"


def test_aurc_covers_every_question_and_the_answers_alone():
    """Selective answering over all questions: an answer to an unanswerable question is a wrong
    answer (it used to be left out of the AURC); aurc_answered ranks the answers alone."""
    from self_improving_rag.evaluation.confidence_metrics import risk_coverage

    rows = [loop_row("a", [attempt(1, "Clara Venn [1].", 0.9, "NONE")], chosen=1),
            loop_row("b", [attempt(1, "Clara Venn [1].", 0.97, "NONE")], gold=(), chosen=1),  # unanswerable
            loop_row("c", [attempt(1, "Tom [1].", 0.6, "NONE")], chosen=1),
            loop_row("d", [attempt(1, None, 0.2, "MISSED_ANSWER")], gold=(), chosen=None)]  # rightly refused
    s = batch.summarise(rows)
    assert s["aurc"] == pytest.approx(risk_coverage([0.9, 0.97, 0.6, 0.0], [1, 0, 0, 1])["aurc"])
    assert s["aurc_answered"] == pytest.approx(risk_coverage([0.9, 0.97, 0.6], [1, 0, 0])["aurc"])
    assert s["risk_coverage_curve"][-1]["coverage"] == pytest.approx(1.0)
    # A refusal comes after every answer, also one at confidence 0.
    rows[2] = loop_row("c", [attempt(1, "Tom [1].", 0.0, "NONE")], chosen=1)
    assert batch.summarise(rows)["aurc"] == pytest.approx(risk_coverage([0.9, 0.97, 0.0, -1.0], [1, 0, 0, 1])["aurc"])
    assert "aurc_answered" in batch.COMPARE_KEYS


def test_plain_rag_with_nothing_retrieved_says_the_model_was_not_asked(tmp_path, make_engine):
    """BM25 finds no passage for a question none of whose words the corpus holds, so the engine
    does not ask the model: the plain-RAG row says so, not that the model declined."""
    from self_improving_rag.config import load_config

    cfg = load_config(None, fake_overrides(tmp_path) + ["strategy.retriever=bm25"])
    engine, gen, _ = make_engine([GOOD], config=cfg)
    item = QAItem(id="n1", question="What colour is the moon on Tuesdays?", answers=(), answerable=False)
    row = json.loads(json.dumps(ask_row(engine, item, "r", False)))  # as stored in results.jsonl
    assert not gen.history
    out = batch.plain_attempt_row(row)
    assert out["refused"] is True and out["answer"] is None
    assert out["refusal_reason"] == ("plain RAG: retrieval found no passage for the question, so the model "
                                     "was not asked")
