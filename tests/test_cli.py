"""The real CLI, run as a subprocess with the deterministic fakes."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from self_improving_rag.cli.app import build_parser
from self_improving_rag.cli.common import COMMANDS
from self_improving_rag.config import Config
from tests.conftest import batch_overrides, fake_overrides, main_in_process, write_corpus

REPO = Path(__file__).resolve().parents[1]


def run(args, cwd, overrides=(), input=None):
    cmd = [sys.executable, "-m", "self_improving_rag.cli", *args]
    for o in overrides:
        cmd += ["--set", o]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, input=input, timeout=120)


def test_every_command_has_help_with_an_example():
    build_parser()
    for name, fn in COMMANDS.items():
        assert fn.__doc__ and "Example" in fn.__doc__, f"{name} needs a docstring with an example"
    for name in COMMANDS:
        r = subprocess.run([sys.executable, "-m", "self_improving_rag.cli", name, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "usage: sirag" in r.stdout


def test_every_memory_action_is_a_subcommand_with_help_and_an_example(capsys):
    from self_improving_rag.cli.memory import ACTIONS

    parser = build_parser()
    for name, (fn, _) in ACTIONS.items():
        assert fn.__doc__ and "Example: sirag memory " + name in fn.__doc__, f"memory {name} needs an example"
        with pytest.raises(SystemExit) as info:
            parser.parse_args(["memory", name, "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0 and out.startswith(f"usage: sirag memory {name} "), out
    # Each shows its own options only: another action's is refused by name, not offered.
    with pytest.raises(SystemExit):
        parser.parse_args(["memory", "stats", "--help"])
    assert "--csv" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["memory", "export", "--help"])
    assert "--csv" in capsys.readouterr().out


def test_packaged_default_yaml_matches_the_models():
    text = (REPO / "self_improving_rag" / "configs" / "default.yaml").read_text()
    assert Config.model_validate(yaml.safe_load(text)) == Config()
    assert (REPO / "configs" / "default.yaml").read_text() == text


def test_ingest_ask_json_and_memory(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built the lighthouse in 1852 [1]."]']
    r = run(["ingest", str(docs)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "indexed 2 document(s)" in r.stdout
    r = run(["ask", "Who built the lighthouse of Marrow Point?", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["answer"].startswith("Clara Venn") and data["refused"] is False
    assert data["sources"][0]["doc"] == "harbour"
    assert data["attempts"][0]["failure"] == "NONE"
    r = run(["ask", "Who built the lighthouse of Marrow Point?"], tmp_path, ov)
    assert r.returncode == 0 and "Clara Venn" in r.stdout and "sources:" in r.stdout
    r = run(["memory", "stats", "--json"], tmp_path, ov)
    stats = json.loads(r.stdout)
    assert stats["outcomes"] == 2
    assert stats["corpora"] == {str((tmp_path / "index").resolve()): 2}
    assert stats["calibration"] == {"weights": "default", "fitted_on": 0, "corpus_fits": {}, "labelled_answers": 0,
                                    "new_since_weights": 0,
                                    "automatic_fit": "after 50 more labelled answers"}
    r = run(["memory", "search", "lighthouse"], tmp_path, ov)
    assert r.returncode == 0 and "lighthouse" in r.stdout.lower()
    r = run(["memory", "search", "xyzzyq"], tmp_path, ov)
    assert r.returncode == 0 and r.stdout.strip() == "(no outcome matches 'xyzzyq')"
    r = run(["memory", "search", "built", "lighthouse"], tmp_path, ov)  # several words, one search
    assert r.returncode == 0 and "lighthouse" in r.stdout.lower()
    # --stream shows every attempt's text, each followed by its diagnosis.
    r = run(["ask", "Who built the lighthouse of Marrow Point?", "--stream", "--no-memory"], tmp_path,
            fake_overrides(tmp_path) + ['generator.replies=["I cannot answer this from the documents.", '
                                        '"Clara Venn built the lighthouse in 1852 [1]."]', "policy.stop_below=0"])
    assert r.returncode == 0, r.stderr
    first, second = r.stderr.index("I cannot answer"), r.stderr.index("Clara Venn built")
    assert first < r.stderr.index("[attempt 1:") < second < r.stderr.index("[attempt 2: NONE]")
    # --no-memory writes nothing but still scores with the stored calibration fit.
    from self_improving_rag.confidence import DEFAULT_WEIGHTS
    from self_improving_rag.memory import MemoryStore

    store = MemoryStore(tmp_path / "memory" / "memory.db")
    store.save_calibration({**DEFAULT_WEIGHTS, "bias": -8.0}, 20, {})
    store.close()
    r = run(["ask", "Who built the lighthouse of Marrow Point?", "--json", "--no-memory"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["refused"] is True
    r = run(["memory", "stats", "--json"], tmp_path, ov)
    assert json.loads(r.stdout)["outcomes"] == 2
    # A fit stored without its model (as an older version stored it) refitted every weight.
    assert json.loads(r.stdout)["calibration"]["weights"] == "fit 1 (full)"
    r = run(["memory", "stats"], tmp_path, ov + ["calibration.auto_fit=false"])
    assert ("calibration: weights fit 1 (full), fitted_on 20, corpus_fits none, labelled_answers 0, new_since_weights 0, "
            "automatic_fit off\n") in r.stdout
    assert f"corpora:\n  {(tmp_path / 'index').resolve()}: 2\n" in r.stdout
    oid = data["outcome_id"]
    r = run(["feedback", oid[:10], "--correct"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    r = run(["memory", "show", oid[:10]], tmp_path, ov)
    assert json.loads(r.stdout)["id"] == oid
    r = run(["memory", "report", "--html", str(tmp_path / "r.html")], tmp_path, ov)
    assert r.returncode == 0 and (tmp_path / "r.html").stat().st_size > 1000
    r = run(["search", "Who built the lighthouse?", "--json", "--chunker", "fixed", "--retriever", "bm25"], tmp_path, ov)
    hits = json.loads(r.stdout)["hits"]
    assert "Clara Venn" in hits[0]["text"] and "bm25" in hits[0]["scores"]
    # With query_rewrite: keywords, search retrieves as an attempt would: for the question and the
    # generator's keywords, shown with the hits.
    r = run(["search", "Who built it?", "--json", "--chunker", "fixed", "--retriever", "bm25", "--set",
             "strategy.query_rewrite=keywords"], tmp_path, ov)
    data = json.loads(r.stdout)
    # (the scripted generator's reply stands in for the keywords)
    assert data["query"] == "Who built it? Clara Venn built the lighthouse in 1852 [1]."
    assert data["strategy"]["query_rewrite"] == "keywords"
    assert "Clara Venn" in data["hits"][0]["text"]
    r = run(["search", "Who built it?", "--chunker", "fixed", "--retriever", "bm25", "--set",
             "strategy.query_rewrite=keywords"], tmp_path, ov)
    assert "query (rewritten): Who built it? Clara Venn built the lighthouse in 1852 [1]." in r.stdout
    r = run(["stats", "--json"], tmp_path, ov)
    assert set(json.loads(r.stdout)["chunkers"]) == {"fixed", "section", "semantic"}
    # The histogram is drawn only when --png names its file, as the help says.
    assert not list(tmp_path.rglob("*.png"))
    r = run(["--help"], tmp_path)
    assert "with --png, a histogram PNG" in " ".join(r.stdout.split())
    logs = list((tmp_path / "logs").glob("*.jsonl"))
    assert logs and all(json.loads(line) for line in logs[0].read_text().splitlines())


def test_user_errors_are_one_line_with_exit_2(tmp_path):
    ov = fake_overrides(tmp_path)
    r = run(["ask", "Who built the lighthouse?"], tmp_path, ov)
    assert r.returncode == 2 and r.stderr.startswith("error: no index") and "sirag ingest" in r.stderr
    assert not (tmp_path / "memory").exists()  # no empty store is left behind by a question that failed
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategy:\n  top_kk: 3\n")
    r = run(["ask", "Who?", "--config", str(bad)], tmp_path, ov)
    assert r.returncode == 2 and "strategy.top_kk" in r.stderr and str(bad) in r.stderr
    assert "Traceback" not in r.stderr


def test_a_resume_never_mixes_in_answers_to_other_questions(tmp_path):
    """A run folder keyed by a dataset's name: another dataset with the same name (same ids, other
    questions) is refused, edited gold is graded as it is now, and rows for questions outside
    this call are not summarised."""
    docs = write_corpus(tmp_path / "docs")
    rows = [
        {"id": "a", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"], "answerable": True},
        {"id": "b", "question": "How many apple trees grow in the orchard?", "answers": ["Clara"], "answerable": True},
        {"id": "c", "question": "What is the name of the harbour master's dog?", "answers": [], "answerable": False},
    ]
    qa = tmp_path / "dev" / "qa.jsonl"
    qa.parent.mkdir()
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built it [1]."]']
    base = ["eval", "--dataset", str(qa), "--corpus", str(docs), "--json", "--output-dir", str(tmp_path / "runs")]
    r = run(base, tmp_path, ov)
    assert r.returncode == 0, r.stderr
    res = tmp_path / "runs" / "qa" / "results.jsonl"
    before = res.read_bytes()
    # Another file named qa.jsonl, with an id whose question is different: refused, nothing changed.
    other = tmp_path / "test" / "qa.jsonl"
    other.parent.mkdir()
    other.write_text(json.dumps({**rows[0], "question": "Who painted the harbour?"}) + "\n")
    r = run(["eval", "--dataset", str(other), *base[3:]], tmp_path, ov)
    assert r.returncode == 2 and "whose text is different" in r.stderr and "--name" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and res.read_bytes() == before
    # Gold edited since: graded with the current gold (b's answer "Clara" no longer matches).
    qa.write_text("".join(json.dumps({**x, "answers": ["sixty"]} if x["id"] == "b" else x) + "\n" for x in rows))
    r = run(base, tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "gold answers of 1 question(s) changed" in r.stderr
    summary = json.loads(r.stdout)[0]
    assert summary["n"] == 3 and summary["contains"] == 0.5  # b, answered "Clara ...", is now wrong (was right)
    # --compare-no-retry's derived runs summarise the same questions with the same gold.
    r = run([*base, "--compare-no-retry"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    by_run = {s["run"]: s for s in json.loads(r.stdout)}
    assert {s["n"] for s in by_run.values()} == {3}
    assert by_run["qa-plain"]["contains"] == by_run["qa-single"]["contains"] == 0.5
    # A slice still summarises every question the run answered (as --help says) ...
    r = run([*base, "--limit", "1"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["n"] == 3
    # ... but not questions the dataset no longer has.
    qa.write_text("".join(json.dumps(x) + "\n" for x in rows[:2]))
    r = run(base, tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["n"] == 2 and "1 result(s) for question ids this dataset no longer has" in r.stderr
    r = run([*base, "--compare-no-retry"], tmp_path, ov)
    assert {s["n"] for s in json.loads(r.stdout)} == {2}
    assert res.read_bytes() == before  # nothing was asked again or rewritten


def test_batch_and_eval_resume(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    qa = tmp_path / "qa.jsonl"
    rows = [
        {"id": "a", "question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"], "answerable": True},
        {"id": "b", "question": "How many apple trees grow in the orchard?", "answers": ["sixty"], "answerable": True},
        {"id": "c", "question": "What is the name of the harbour master's dog?", "answers": [], "answerable": False},
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"name": "tiny", "corpus": [str(docs)], "index": str(tmp_path / "index"),
            "questions": {"file": str(qa)}, "output_dir": str(tmp_path / "runs"),
            "overrides": {"generator.replies": ["Clara Venn built it [1]."]}}
    f = tmp_path / "batch.yaml"
    f.write_text(yaml.safe_dump(spec))
    ov = batch_overrides(tmp_path)
    r = run(["eval", str(f), "--json", "--limit", "2"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    res = tmp_path / "runs" / "tiny" / "results.jsonl"
    assert len(res.read_text().splitlines()) == 2
    # Resuming with other settings would mix two configurations in one run: refused, nothing written.
    before = res.read_bytes(), (tmp_path / "runs" / "tiny" / "config.yaml").read_bytes()
    r = run(["eval", str(f), "--json"], tmp_path, ov + ["strategy.top_k=2"])
    assert r.returncode == 2 and "other settings (" in r.stderr and "strategy.top_k: 5 -> 2" in r.stderr
    # A strategy set with --set also pins the first attempt to it (policy.first_from_memory), a
    # setting sirag changed, not the user: it is not named.
    assert "first_from_memory" not in r.stderr and "--name" in r.stderr
    assert (res.read_bytes(), (tmp_path / "runs" / "tiny" / "config.yaml").read_bytes()) == before
    # Settings that cannot change an answer may change on resume.
    r = run(["eval", str(f), "--json"], tmp_path, ov + ["generator.n_threads=1"])
    summary = json.loads(r.stdout)[0]
    lines = [json.loads(x) for x in res.read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == ["a", "b", "c"]
    assert lines[0]["grade"]["correct"] is True
    assert summary["n"] == 3 and "refusal" in summary and "ece" in summary
    assert (tmp_path / "runs" / "tiny" / "config.yaml").exists()
    # A finished run is only summarised again, whatever the settings now; its config.yaml stays.
    before = res.read_bytes(), (tmp_path / "runs" / "tiny" / "config.yaml").read_bytes()
    r = run(["eval", str(f), "--json"], tmp_path, ov + ["strategy.top_k=2"])
    assert r.returncode == 0, r.stderr
    assert (res.read_bytes(), (tmp_path / "runs" / "tiny" / "config.yaml").read_bytes()) == before
    # Counts and names that cannot be meant are refused before any work.
    for args in (["--limit", "0"], ["--limit", "-1"], ["--workers", "0"], ["--workers", "65"], ["--name", "../x y"]):
        r = run(["eval", str(f), *args], tmp_path, ov)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
    # --index is honoured by a batch file run (a new index folder gets built there).
    spec["name"] = "tiny2"
    f.write_text(yaml.safe_dump(spec))
    r = run(["batch", str(f), "--json", "--limit", "1", "--index", str(tmp_path / "other-index")], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "other-index").is_dir()
    # eval's --output-dir and --corpus replace the batch file's, as --index does.
    other_docs = tmp_path / "docs2"
    other_docs.mkdir()
    (other_docs / "cidermill.txt").write_text("The miller Anna Grove pressed cider in the red barn.\n")
    r = run(["eval", str(f), "--json", "--limit", "1", "--output-dir", str(tmp_path / "runs2"),
             "--corpus", str(other_docs), "--index", str(tmp_path / "index2")], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "runs2" / "tiny2" / "results.jsonl").is_file()
    r = run(["search", "Who pressed cider?", "--json", "--index", str(tmp_path / "index2")], tmp_path, ov)
    assert {h["doc"] for h in json.loads(r.stdout)["hits"]} == {"cidermill"}
    # --offset counts for --retrieval-only too (only a and b have evidence to find: one is left).
    rows_ev = [{**row, "evidence": [ev]} for row, ev in zip(rows[:2], ["built in 1852 by the engineer Clara Venn",
                                                                      "sixty apple trees"])]
    qa.write_text("".join(json.dumps(x) + "\n" for x in rows_ev))
    r = run(["eval", str(f), "--json", "--retrieval-only", "--offset", "1"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert {row["n"] for row in json.loads(r.stdout)["rows"]} == {1}


def test_feedback_calibrate_and_memory_analysis_commands(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built the lighthouse in 1852 [1]."]']
    assert run(["ingest", str(docs)], tmp_path, ov).returncode == 0
    questions = ["Who built the lighthouse of Marrow Point?", "Who kept the light?", "What did the council give Tobias?",
                 "Who sells herring?", "Where is the bell?", "When was the lighthouse built?"]
    ids = []
    for q in questions:
        r = run(["ask", q, "--json"], tmp_path, ov)
        assert r.returncode == 0, r.stderr
        ids.append(json.loads(r.stdout)["outcome_id"])
    for i, oid in enumerate(ids):
        assert run(["feedback", oid[:10], "--correct" if i in (0, 5) else "--wrong"], tmp_path, ov).returncode == 0
    r = run(["calibrate", "--min-labels", "20"], tmp_path, ov)
    assert r.returncode == 2 and "6 labelled" in r.stderr and "Traceback" not in r.stderr
    r = run(["calibrate", "--min-labels", "4", "--dry-run", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    fit = json.loads(r.stdout)
    assert fit["n"] == 6 and {"auroc", "ece"} <= set(fit["in_sample_after"])
    # The default weights were fitted on nothing: their AUROC has an interval, the in-sample fit's none.
    assert set(fit["in_sample_before"]) - set(fit["in_sample_after"]) == {"auroc_interval"}
    r = run(["calibrate", "--min-labels", "4"], tmp_path, ov)
    assert r.returncode == 0 and "AUROC" in r.stdout and "ECE" in r.stdout and "stored as fit 1" in r.stdout, r.stdout
    model = re.search(r"^model: (scaled|full)\b.*\(chosen from the labels: the lower cross-fitted Brier score; "
                      r"each held-out fold chose its own\)$", r.stdout, re.M)
    assert model, r.stdout
    # The full refit's penalty is said only where the stored fit is a full refit.
    assert ("pull toward the default weights: l2 " in r.stdout) == (model.group(1) == "full"), r.stdout
    r = run(["memory", "strategies", "--json"], tmp_path, ov)
    rows = json.loads(r.stdout)
    assert rows[0]["attempts"] == 6 and 0 <= rows[0]["success_rate"] <= 1
    # The footnote says how the policy counts labels.
    r = run(["memory", "strategies"], tmp_path, ov)
    assert r.returncode == 0 and "only through the confidence weights a calibration fits" in r.stdout, r.stdout
    # A removed setting is named in a warning and ignored.
    r = run(["memory", "strategies"], tmp_path, ov + ["policy.use_labels=true"])
    assert r.returncode == 0 and "only through the confidence weights a calibration fits" in r.stdout, r.stdout
    assert ("warning: policy.use_labels is no longer a setting (removed); it is ignored (--set policy.use_labels=true)"
            in r.stderr.splitlines()), r.stderr
    r = run(["memory", "failures", "--json"], tmp_path, ov)
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), list)
    r = run(["memory", "export", "--csv", str(tmp_path / "o.csv"), "--json-file", str(tmp_path / "o.json")], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert len((tmp_path / "o.csv").read_text().splitlines()) == 1 + 6  # header + one row per attempt
    assert len(json.loads((tmp_path / "o.json").read_text())) == 6
    r = run(["memory", "export"], tmp_path, ov)
    assert r.returncode == 2 and "--csv FILE" in r.stderr and "--json for JSON on stdout" in r.stderr
    r = run(["memory", "export", "--json"], tmp_path, ov)  # the JSON export on stdout, as the file holds it
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((tmp_path / "o.json").read_text())
    r = run(["memory", "stats", "--html", str(tmp_path / "r.html"), "--csv", str(tmp_path / "s.csv")], tmp_path, ov)
    assert r.returncode == 2 and "--csv to memory export; --html to memory report" in r.stderr, r.stderr
    r = run(["memory", "export", "--csv", str(tmp_path / "o.csv"), "--json-file", str(tmp_path / "o.csv")], tmp_path, ov)
    assert r.returncode == 2 and "same file" in r.stderr
    assert len((tmp_path / "o.csv").read_text().splitlines()) == 1 + 6  # the CSV is untouched


def test_commands_that_read_memory_refuse_to_create_destroy_or_adopt_a_database(tmp_path):
    import sqlite3

    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built the lighthouse in 1852 [1]."]']
    assert run(["ingest", str(docs)], tmp_path, ov).returncode == 0
    r = run(["ask", "Who built the lighthouse of Marrow Point?", "--json"], tmp_path, ov)
    oid = json.loads(r.stdout)["outcome_id"]
    db = next((tmp_path / "memory").glob("*.db"))
    before = db.read_bytes()
    # Exporting or reporting onto the store itself, or into a folder, is refused; the store is untouched.
    for args in (["memory", "export", "--json-file", str(db)], ["memory", "export", "--csv", f"{db}-wal"],
                 ["memory", "report", "--html", str(db)], ["memory", "export", "--csv", str(tmp_path)],
                 ["memory", "export", "--csv", str(db / "o.csv")]):
        r = run(args, tmp_path, ov)
        assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert db.read_bytes() == before
    assert "memory database itself" in run(["memory", "export", "--json-file", str(db)], tmp_path, ov).stderr
    # A missing folder for an output file is created, as before.
    r = run(["memory", "export", "--csv", str(tmp_path / "new" / "dir" / "o.csv")], tmp_path, ov)
    assert r.returncode == 0 and (tmp_path / "new" / "dir" / "o.csv").is_file(), r.stderr
    # A mistyped --memory path is reported, not created.
    for args in (["feedback", oid, "--correct"], ["calibrate"], ["memory", "stats"]):
        r = run(args + ["--memory", str(tmp_path / "typo.db")], tmp_path, ov)
        assert r.returncode != 0 and "no memory store at" in r.stderr, (args, r.stderr)
    assert not (tmp_path / "typo.db").exists()
    # Somebody else's SQLite file, or an empty file, is not adopted as a store.
    foreign = tmp_path / "other.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE foo (x)")
    con.commit()
    con.close()
    r = run(["memory", "stats", "--memory", str(foreign)], tmp_path, ov)
    assert r.returncode != 0 and "not a sirag memory store" in r.stderr and "foo" in r.stderr
    con = sqlite3.connect(foreign)
    assert [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["foo"]
    con.close()
    (tmp_path / "empty.db").write_bytes(b"")
    r = run(["memory", "stats", "--memory", str(tmp_path / "empty.db")], tmp_path, ov)
    assert r.returncode != 0 and "nothing has been recorded" in r.stderr
    assert (tmp_path / "empty.db").read_bytes() == b""
    # feedback --json prints JSON.
    r = run(["feedback", oid[:10], "--wrong", "--json"], tmp_path, ov)
    assert r.returncode == 0 and json.loads(r.stdout) == {"outcome_id": oid, "correct": False, "source": "user",
                                                           "note": "", "replaced": None, "written": True,
                                                           "refusal": False}
    # A second label says what it replaces.
    r = run(["feedback", oid[:10], "--correct"], tmp_path, ov)
    assert r.returncode == 0 and "replaces the earlier user label (wrong)" in r.stderr


def test_empty_or_home_relative_index_and_memory_paths(tmp_path):
    """An empty --index or --memory (an unset variable in a script) is refused instead of using the
    current folder or the default store; "--index=~/x", which the shell leaves alone, is the home
    folder, as a ~ in paths.* is."""
    ov = fake_overrides(tmp_path)
    write_corpus(tmp_path / "docs")
    for option in ("--index", "--memory"):
        r = run(["ingest", "docs", option, ""], tmp_path, ov)
        assert r.returncode == 2 and f"{option} is empty" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "CURRENT").exists()
    home = tmp_path / "home"
    home.mkdir()
    cmd = [sys.executable, "-m", "self_improving_rag.cli", "ingest", "docs", "--index=~/idx"]
    for o in ov:
        cmd += ["--set", o]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert (home / "idx" / "CURRENT").is_file() and not (tmp_path / "~").exists()


def test_exports_write_through_a_symlink_and_refuse_special_files(tmp_path):
    """The writers write beside the file and rename: a symlink would be replaced by a file (its
    target left as it was), a FIFO or device by a regular file."""
    ov = fake_overrides(tmp_path)
    write_corpus(tmp_path / "docs")
    assert run(["ingest", "docs"], tmp_path, ov).returncode == 0
    assert run(["ask", "Who built the lighthouse?"], tmp_path, ov).returncode == 0
    (tmp_path / "real.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to("real.csv")
    r = run(["memory", "export", "--csv", "link.csv"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text().startswith("outcome_")
    (tmp_path / "mine.html").write_text("<p>mine</p>")
    (tmp_path / "link.html").symlink_to("mine.html")
    assert run(["memory", "report", "--html", "link.html"], tmp_path, ov).returncode == 0
    assert (tmp_path / "link.html").is_symlink() and "sirag memory report" in (tmp_path / "mine.html").read_text()
    os.mkfifo(tmp_path / "fifo.csv")
    r = run(["memory", "export", "--csv", "fifo.csv"], tmp_path, ov)
    assert r.returncode == 2 and "not a regular file" in r.stderr
    assert stat.S_ISFIFO((tmp_path / "fifo.csv").lstat().st_mode)
    # "-" is not standard output here: refused, not written as a file named "-".
    for args in (["memory", "export", "--csv", "-"], ["memory", "export", "--json-file", "-"],
                 ["memory", "report", "--html", "-"]):
        r = run(args, tmp_path, ov)
        assert r.returncode == 2 and "would write a file named '-'" in r.stderr, (args, r.stderr)
    assert "use --json instead" in run(["memory", "export", "--json-file", "-"], tmp_path, ov).stderr
    assert not (tmp_path / "-").exists()


def test_ingest_marks_the_chunkers_it_re_chunked_for_new_settings(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path)
    assert run(["ingest", str(docs)], tmp_path, ov).returncode == 0
    r = run(["ingest", str(docs), "--set", "ingestion.semantic.percentile=80"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    assert "(re-chunked: the index held other settings)" in lines["semantic"]
    assert "re-chunked" not in lines["fixed"] + lines["section"]


def test_ingest_says_an_index_of_an_older_sirag_was_re_chunked(tmp_path):
    import json

    from self_improving_rag.retrieval.index import CorpusIndex

    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path)
    assert run(["ingest", str(docs)], tmp_path, ov).returncode == 0
    path = CorpusIndex(tmp_path / "index").current_dir() / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for params in manifest["chunkers"].values():
        params["algorithm"] -= 1
    path.write_text(json.dumps(manifest), encoding="utf-8")
    r = run(["ingest", str(docs)], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    for name in ("fixed", "section", "semantic"):
        assert "(re-chunked: the index was made by an older sirag)" in lines[name]


def test_debug_keeps_a_path_errors_line_and_code_and_the_log_keeps_user_errors(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path)
    assert run(["ingest", str(docs)], tmp_path, ov).returncode == 0
    bad = Path("/proc/sirag-test.png")  # passes the checks made before the work, fails when written
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux's /proc")
    plain = run(["stats", "--png", str(bad)], tmp_path, ov)
    debug = run(["stats", "--png", str(bad), "--debug"], tmp_path, ov)
    line = f"error: {bad}: "
    assert plain.returncode == debug.returncode == 2
    assert line in plain.stderr and "Traceback" not in plain.stderr
    assert line in debug.stderr and "Traceback" in debug.stderr  # --debug adds the traceback, nothing else
    r = run(["search", "lighthouse", "--index", str(tmp_path / "nope")], tmp_path, ov)
    assert r.returncode == 2
    records = [json.loads(ln) for f in (tmp_path / "logs").glob("sirag-*.jsonl") for ln in f.read_text().splitlines()]
    assert any(rec["level"] == "WARNING" and rec["message"].startswith(f"error: no index in {tmp_path / 'nope'}")
               for rec in records)


def test_batch_and_eval_say_where_the_runs_were_written(tmp_path):
    """Run folders go to the batch file's folder (its output_dir:), not the folder the command
    runs in: the human output names that folder and every run written there."""
    docs = write_corpus(tmp_path / "docs")
    here = tmp_path / "elsewhere"
    here.mkdir()
    spec = {"name": "where", "corpus": ["docs"], "questions": {"inline": [
        {"question": "Who built the lighthouse of Marrow Point?", "answers": ["Clara Venn"]}]},
        "overrides": {"generator.replies": ["Clara Venn built it [1]."]}}
    f = tmp_path / "batch.yaml"
    f.write_text(yaml.safe_dump(spec))
    assert docs.is_dir()
    ov = fake_overrides(tmp_path)
    r = run(["batch", str(f)], here, ov)
    assert r.returncode == 0, r.stderr
    runs = (tmp_path / "runs").resolve()
    assert (runs / "where" / "results.jsonl").is_file() and not (here / "runs").exists()
    assert f"results: {runs}{os.sep} where/ (results.jsonl, summary.json)" in r.stdout
    r = run(["eval", str(f), "--compare-no-retry", "--name", "where2"], here, ov)
    assert r.returncode == 0, r.stderr
    assert (f"results: {runs}{os.sep} where2/, where2-single/, where2-plain/ (results.jsonl, summary.json); "
            "comparison: where2-loop-vs-noloop.{json,md,png}") in r.stdout
    assert (runs / "where2-loop-vs-noloop.md").is_file()


def test_search_says_when_the_keywords_rewrite_left_the_query_unchanged(tmp_path):
    write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path)  # the scripted generator declines: it gives no keywords
    assert run(["ingest", str(tmp_path / "docs")], tmp_path, ov).returncode == 0
    r = run(["search", "Who built the lighthouse?", "--set", "strategy.query_rewrite=keywords"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "query (rewritten): unchanged: the generator gave no keywords" in r.stdout
    assert "query (rewritten): Who built the lighthouse?" not in r.stdout


def test_ask_says_when_its_automatic_calibration_stored_new_weights(tmp_path):
    """The engine fits the confidence weights by itself once enough labels arrive (as `sirag
    batch` says in a note): `sirag ask` says so too, once, when the fit is stored."""
    sys.path.insert(0, str(REPO / "tests" / "memory"))
    from memory_testkit import make_answer, make_attempt

    from self_improving_rag.memory import MemoryStore

    write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built it [1]."]']
    assert run(["ingest", str(tmp_path / "docs")], tmp_path, ov).returncode == 0
    store = MemoryStore(tmp_path / "memory" / "memory.db")
    try:  # short answers right, long ones mostly wrong: a fit beats the default weights
        for answer, every in (("Tobias Lune [1]", 1), ("The keeper who rowed out in the great storm and saved "
                                                       "the sailors from the wreck was a man of the town [2]", 6)):
            for i in range(30):
                ans = make_answer(f"{answer[:10]} question {i}?", (make_attempt(1, answer=answer),), answer=answer)
                store.add_feedback(store.record(ans), correct=(i % every == 0), source="gold")
    finally:
        store.close()
    r = run(["ask", "Who built the lighthouse of Marrow Point?"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "note: confidence calibrated on the 60 labelled answers" in r.stderr and "is in use" in r.stderr
    r = run(["ask", "Who built the lighthouse of Marrow Point?"], tmp_path, ov)  # nothing new: no fit, no note
    assert r.returncode == 0 and "calibrated" not in r.stderr, r.stderr


def test_memory_without_an_action_names_the_actions_not_an_argument_some_take(tmp_path):
    r = run(["memory"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: sirag memory: name an action: stats, strategies, failures, show, search, "
                               "export, report, merge, backup;")
    assert "arg" not in r.stderr.split(";")[0]


def test_search_that_finds_nothing_says_so(tmp_path):
    """BM25 finds no chunk for a question none of whose words the corpus holds: `sirag search`
    printed only its strategy and timings, which reads as a broken command, not as no match."""
    write_corpus(tmp_path / "docs")
    ov = fake_overrides(tmp_path)
    assert run(["ingest", str(tmp_path / "docs")], tmp_path, ov).returncode == 0
    r = run(["search", "Quelle couleur zébrée?", "--retriever", "bm25"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "no passage found for the question with this strategy" in r.stdout
    assert "try --retriever hybrid" in r.stdout


def test_a_source_is_shown_from_the_sentence_that_states_the_answer():
    """A source was shown as its first 220 characters, so in a long passage the words that state
    the answer were cut off ("Margaret" lay past them). The preview now starts at the
    sentence holding the most of what the answer adds to the question."""
    from self_improving_rag.cli.ask import source_snippet

    text = ("The keeper's log opens with the weather of every day of that long winter, the wind, the "
            "rain and the state of the lamp, written in a careful hand. " * 3
            + "On the last page he wrote that the medal went to Tobias Lune. The log ends there.")
    shown = source_snippet(text, {"tobia", "lune", "medal"})
    assert shown.startswith("… On the last page he wrote that the medal went to Tobias Lune.") and len(shown) <= 220
    # No sentence holds a focus term: the start, as before; a short text is shown whole.
    assert source_snippet(text, {"zebra"}).startswith("The keeper's log opens")
    assert source_snippet("Clara Venn built it.", {"venn"}) == "Clara Venn built it."


def test_ask_no_memory_says_when_the_store_named_cannot_be_read(tmp_path):
    # --no-memory still scores with the store's calibration fit: a --memory that is a folder, or a
    # typo naming no store, fell back to the default weights with nothing said (a damaged file warned).
    ov = fake_overrides(tmp_path) + ['generator.replies=["Clara Venn built the lighthouse in 1852 [1]."]']
    assert run(["ingest", str(write_corpus(tmp_path / "docs"))], tmp_path, ov).returncode == 0
    (tmp_path / "a-folder").mkdir()
    for given, said in (("a-folder", "a-folder is a folder, not a memory database file"),
                        ("no-such.db", "no memory store at no-such.db")):
        r = run(["ask", "Who built the lighthouse of Marrow Point?", "--no-memory", "--memory", given], tmp_path, ov)
        assert r.returncode == 0 and "Clara Venn" in r.stdout, r.stderr
        assert f"warning: memory not read ({said}): default confidence weights and strategy" in r.stderr, r.stderr
    assert not (tmp_path / "no-such.db").exists()
    # The default store (memory/memory.db), not made yet, is an empty memory: nothing to say.
    ov = [o for o in ov if not o.startswith("paths.memory_db=")]
    r = run(["ask", "Who built the lighthouse of Marrow Point?", "--no-memory"], tmp_path, ov)
    assert r.returncode == 0 and "memory not read" not in r.stderr, r.stderr


def test_ask_no_memory_does_not_warn_for_the_default_store_spelled_another_way(tmp_path):
    # "./memory/memory.db", its absolute path, or a --config file naming it are the default store,
    # not there yet: an empty memory, as with no --memory. They warned "no memory store at
    # memory/memory.db" (a string compare), which read as if the default store were lost.
    ov = [o for o in fake_overrides(tmp_path) if not o.startswith("paths.memory_db=")]
    ov += ['generator.replies=["Clara Venn built the lighthouse in 1852 [1]."]']
    assert run(["ingest", str(write_corpus(tmp_path / "docs"))], tmp_path, ov).returncode == 0
    cfg = tmp_path / "c.yaml"
    cfg.write_text("paths:\n  memory_db: ./memory/memory.db\n", encoding="utf-8")
    for extra in (["--memory", "./memory/memory.db"], ["--memory", str(tmp_path / "memory" / "memory.db")],
                  ["--config", str(cfg)]):
        r = run(["ask", "Who built the lighthouse of Marrow Point?", "--no-memory", *extra], tmp_path, ov)
        assert r.returncode == 0 and "Clara Venn" in r.stdout, r.stderr
        assert "memory not read" not in r.stderr, (extra, r.stderr)
    assert not (tmp_path / "memory").exists()


@pytest.mark.parametrize("option", ["--index", "--memory", "--output-dir"])
def test_a_path_option_that_is_a_loop_of_links_is_named(tmp_path, capsys, monkeypatch, option):
    # `--index loop` where loop -> loop ended `sirag eval` with "internal error: RuntimeError: Symlink
    # loop ... please report it": a path the user gave, now said as such, with nothing written.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The harbour light was built in 1851.\n", encoding="utf-8")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "When was the light built?", "answers": ["1851"]}\n',
                                      encoding="utf-8")
    Path("loop").symlink_to("loop")
    argv = ["eval", "--dataset", "q.jsonl", "--corpus", "docs", "--index", "idx", "--output-dir", "out",
            "--memory", "m.db", option, "loop"]
    for override in fake_overrides(tmp_path):
        argv += ["--set", override]
    assert main_in_process(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {option} loop is a link that leads to itself" in err and "internal error" not in err
    assert not any((tmp_path / name).exists() for name in ("idx", "out", "m.db"))
