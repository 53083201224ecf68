"""`sirag memory`, `feedback` and `calibrate` as a user meets them: words after options, labels merged
from a clock ahead, exports that fail half-way, empty files and answers spread over lines.

The CLI runs in-process (``main``) on stores built with the test kit; no model is loaded."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import make_answer  # noqa: E402

from self_improving_rag.memory import MemoryStore  # noqa: E402
from tests.conftest import fake_overrides, main_in_process  # noqa: E402

AHEAD = "2030-01-01T00:00:00.000+00:00"


def sirag(tmp_path: Path, command: list[str], *rest: str) -> int:
    """``sirag COMMAND --set ... REST`` in-process with the test settings (before REST, which may
    hold ``--``), logging restored afterwards."""
    return main_in_process([*command, *[x for s in fake_overrides(tmp_path) for x in ("--set", s)], *rest])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The store the test settings name (paths.memory_db), with two outcomes."""
    path = tmp_path / "memory" / "memory.db"
    with MemoryStore(path) as store:
        store.record(make_answer("Who owns Marsh House?", answer="The Alder family [1]"))
        store.record(make_answer("Who kept the lighthouse?", answer="Tobias Lune kept it.\n\n  For forty\tyears [1]"))
    return path


def _ids(db: Path) -> dict[str, str]:
    with MemoryStore(db, read_only=True) as store:
        return {r["question"]: r["id"] for r in store.search("who")}


def test_words_after_options_and_after_a_double_dash_are_search_words(db, tmp_path, capsys):
    """argparse filled `arg` (nargs="*"), empty, as soon as the action was read: every word after an
    option, even after --, was an unrecognized argument."""
    marsh = _ids(db)["Who owns Marsh House?"]
    for command, rest in ((["memory", "search"], ["--", "-Marsh"]), (["memory", "search"], ["Marsh"]),
                          (["memory", "search", "Marsh"], ["--limit", "3", "--", "-House"]),
                          (["memory", "--json", "search"], ["--", "-Marsh"])):
        assert sirag(tmp_path, command, "--json", *rest) == 0, (command, rest)
        assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [marsh], (command, rest)
    assert sirag(tmp_path, ["memory", "show"], "--json", "--", marsh[:10]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == marsh
    # Words after -- are words, even when they look like options.
    assert sirag(tmp_path, ["memory", "search"], "--", "Marsh", "--json") == 0
    assert "(no outcome matches 'Marsh --json')" in capsys.readouterr().out
    # A word that begins with - before any --, as in every CLI, is an option, and unknown.
    with pytest.raises(SystemExit) as info:
        sirag(tmp_path, ["memory", "search", "-Marsh"])
    assert info.value.code == 2 and "unrecognized arguments: -Marsh" in capsys.readouterr().err


def test_a_search_word_that_begins_with_a_dash_is_told_to_go_after_double_dash(db, tmp_path, capsys):
    """`memory search -Marsh` said only "unrecognized arguments: -Marsh; see `sirag memory --help`":
    the fix, in the docs, is to put the word after --."""
    with pytest.raises(SystemExit) as info:
        sirag(tmp_path, ["memory", "search", "-Marsh"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert "unrecognized arguments: -Marsh (a word to search for that begins with - goes after --, with the " \
           "other words (options before the --): `sirag memory search -- -Marsh`)" in err, err
    with pytest.raises(SystemExit):  # several words: one command that keeps them all
        sirag(tmp_path, ["memory", "search", "lighthouse", "-Marsh", "-Venn", "--limit", "3"])
    err = capsys.readouterr().err
    assert err.count("goes after --") == 1 and "`sirag memory search -- lighthouse -Marsh -Venn`" in err, err
    with pytest.raises(SystemExit):  # an option of another command is named as such, not as a word
        sirag(tmp_path, ["memory", "search", "Marsh", "--rebuild"])
    err = capsys.readouterr().err
    assert "--rebuild is an option of `sirag ingest`" in err and "goes after --" not in err, err
    with pytest.raises(SystemExit):  # a mistyped option is not taken for a word
        sirag(tmp_path, ["memory", "search", "Marsh", "--limt", "3"])
    assert "goes after --" not in capsys.readouterr().err


def test_a_search_over_the_word_limit_is_an_error_not_cut(db, tmp_path, capsys):
    # Repeated words count once: this is two words, and Martians occurs nowhere.
    assert sirag(tmp_path, ["memory", "search", *["lighthouse"] * 64, "Martians"], "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    assert sirag(tmp_path, ["memory", "search", *[f"w{i}" for i in range(65)]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "64" in err and "65" in err, err


def test_search_results_are_one_line_each_in_the_text_view(db, tmp_path, capsys):
    assert sirag(tmp_path, ["memory", "search", "forty"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "answer=Tobias Lune kept it. For forty years [1]" in out, out
    assert sirag(tmp_path, ["memory", "search", "forty"], "--json") == 0  # JSON keeps the text as it is
    assert json.loads(capsys.readouterr().out)[0]["answer"] == "Tobias Lune kept it.\n\n  For forty\tyears [1]"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no file can be made")
def test_an_export_that_fails_for_one_file_writes_neither(db, tmp_path, capsys):
    csv_path = tmp_path / "p.csv"
    assert sirag(tmp_path, ["memory", "export", "--csv", str(csv_path), "--json-file", "/proc/p.json"]) == 2
    assert "/proc/p.json" in capsys.readouterr().err
    assert not csv_path.exists() and not list(tmp_path.glob(".p.csv.*"))
    csv_path.write_text("mine\n")
    assert sirag(tmp_path, ["memory", "export", "--csv", str(csv_path), "--json-file", "/proc/p.json"]) == 2
    assert csv_path.read_text() == "mine\n" and not list(tmp_path.glob(".p.csv.*"))
    # Both written when both can be, from one reading of the store.
    assert sirag(tmp_path, ["memory", "export", "--csv", str(csv_path), "--json-file", str(tmp_path / "p.json")]) == 0
    assert csv_path.read_text().startswith("outcome_id,")
    assert len(json.loads((tmp_path / "p.json").read_text())) == 2


@pytest.mark.parametrize("command", [["calibrate"], ["calibrate", "--reset"], ["calibrate", "--dry-run"],
                                     ["feedback", "abcdef123456", "--correct"], ["memory", "stats"]])
def test_an_empty_file_is_left_as_it_is_and_said_to_be_empty(tmp_path, capsys, command):
    empty = tmp_path / "zz.db"
    empty.write_bytes(b"")
    assert sirag(tmp_path, command, "--memory", str(empty)) == 2
    err = capsys.readouterr().err
    assert f"memory database {empty} is empty: nothing has been recorded in it yet" in err, err
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("zz")) == [
        "zz.db"]


def test_a_label_given_now_wins_over_one_merged_from_a_clock_ahead(db, tmp_path, capsys):
    oid = _ids(db)["Who kept the lighthouse?"]
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    with mock.patch("self_improving_rag.memory.store._utcnow", return_value=AHEAD), MemoryStore(copy) as other:
        other.add_feedback(oid, correct=False)
    assert sirag(tmp_path, ["memory", "merge", str(copy)]) == 0
    assert sirag(tmp_path, ["feedback", oid[:10], "--correct"]) == 0
    assert "replaces the earlier user label (wrong)" in capsys.readouterr().err
    assert sirag(tmp_path, ["memory", "show", oid[:10]], "--json") == 0
    label = json.loads(capsys.readouterr().out)["current_label"]
    assert label["label"] == 1 and label["created_at"] > AHEAD
    assert sirag(tmp_path, ["memory", "stats"], "--json") == 0
    feedback = json.loads(capsys.readouterr().out)["feedback"]
    assert (feedback["correct"], feedback["wrong"]) == (1, 0)


def test_limit_cuts_strategies_and_failures_and_is_refused_where_it_does_not_apply(tmp_path, capsys):
    """`memory strategies --limit 1` showed every strategy: --limit now keeps the most used
    strategies (the most frequent failure types), says what it left out, and is refused, as
    --csv is, by the actions it does not apply to."""
    from memory_testkit import STRATEGY_A, STRATEGY_B, make_attempt

    with MemoryStore(tmp_path / "memory" / "memory.db") as store:
        store.record(make_answer("Who owns Marsh House?"))
        store.record(make_answer("Who kept the lighthouse?"))
        store.record(make_answer("Who built it?", attempts=(
            make_attempt(1, failure="LOW_CONFIDENCE", answer=None),
            make_attempt(2, strategy=STRATEGY_B, failure="WEAK_RETRIEVAL", answer=None),
            make_attempt(3, strategy=STRATEGY_B, failure="WEAK_RETRIEVAL", answer=None)), refused=True))
    assert sirag(tmp_path, ["memory", "strategies"], "--json", "--limit", "1") == 0
    assert [r["strategy_key"] for r in json.loads(capsys.readouterr().out)] == [STRATEGY_A.key]
    assert sirag(tmp_path, ["memory", "strategies"], "--json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    assert sirag(tmp_path, ["memory", "failures"], "--limit", "1") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("failure=WEAK_RETRIEVAL ") and not any("LOW_CONFIDENCE" in line for line in out)
    assert out[1] == "(the first 1 of 2 failure types, by count; --limit sets how many)"
    assert sirag(tmp_path, ["memory", "strategies"], "--limit", "5") == 0
    assert "--limit sets how many" not in capsys.readouterr().out  # nothing left out
    for action in ("stats", "export", "report"):
        assert sirag(tmp_path, ["memory", action], "--limit", "1") == 2
        err = capsys.readouterr().err
        assert err == (f"error: --limit is not an option of memory {action} (--limit to memory search, strategies "
                       "or failures)\n"), err
    assert sirag(tmp_path, ["memory", "search", "who"], "--json", "--limit", "2") == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_an_export_or_report_on_a_read_only_file_system_names_the_file_asked_for(db, tmp_path, capsys, monkeypatch):
    """On a read-only file system even removing the temporary file that was never made fails
    (EROFS, not ENOENT): that error replaced the real one and named `.out.csv.1a2b3c4d.tmp`."""
    import errno
    import pathlib

    real_open = pathlib.Path.open

    def read_only(path, *args, **kwargs):
        if path.name.endswith(".tmp"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    def unlink(path, missing_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(pathlib.Path, "open", read_only)
    monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    for action, option, name in (("export", "--csv", "out.csv"), ("export", "--json-file", "out.json"),
                                 ("report", "--html", "out.html")):
        target = tmp_path / name
        assert sirag(tmp_path, ["memory", action, option, str(target)]) == 2
        err = capsys.readouterr().err
        assert err == f"error: {target}: Read-only file system; check that path (does its folder exist, is it a " \
                      "file and not a folder, may you write there?)\n", err


@pytest.mark.parametrize("text", ["***", " ", "?!", '""'])
def test_a_search_text_without_a_word_is_an_error_not_no_match(db, tmp_path, capsys, text):
    """`memory search '***'` said "(no outcome matches '***')" with exit 0, though nothing was
    searched (operators and punctuation are not words): an empty text was already an error."""
    assert sirag(tmp_path, ["memory", "search"], "--", text) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sirag memory search: ") and err.count("\n") == 1, err
    assert "no word" in err and "give a word" in err, err


def test_a_limit_beyond_what_sqlite_counts_shows_every_match(db, tmp_path, capsys):
    """--limit 99999999999999999999 was an internal error (OverflowError from SQLite)."""
    assert sirag(tmp_path, ["memory", "search", "who"], "--json", "--limit", "9" * 20) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


@pytest.mark.parametrize("option", ["--csv", "--json-file", "--html"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_output_file_name_is_said_to_be_empty(db, tmp_path, capsys, monkeypatch, option, value):
    """`--csv ""` (an empty variable in a script) said that export needs --csv FILE, and `--csv " "`
    wrote a file named " "."""
    monkeypatch.chdir(tmp_path)
    action = "report" if option == "--html" else "export"
    assert sirag(tmp_path, ["memory", "stats"]) == 0  # makes the log folder
    before = sorted(p.name for p in tmp_path.iterdir())
    assert sirag(tmp_path, ["memory", action], option, value) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {option} is empty; give a file name, e.g. ") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_search_cut_by_its_limit_says_so(db, tmp_path, capsys):
    """`memory search Norman` showed 20 of 74 matching outcomes and said nothing of the other 54
    (strategies and failures say what --limit left out)."""
    assert sirag(tmp_path, ["memory", "search", "who"], "--limit", "1") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("id=") and out[1] == (
        "(only the best 1 shown; more outcomes match: --limit sets how many)"), out
    assert sirag(tmp_path, ["memory", "search", "who"], "--limit", "1", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert sirag(tmp_path, ["memory", "search", "who"], "--limit", "2") == 0
    assert "--limit sets how many" not in capsys.readouterr().out  # nothing left out


def _shards(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with MemoryStore(a) as store:
        store.record(make_answer("Who built the lighthouse?"))
    with MemoryStore(b) as store:
        store.record(make_answer("Who owns the mill?"))
        store.record(make_answer("Who kept the lighthouse?"))
    return a, b


def test_a_merge_that_fails_on_a_later_file_says_what_was_merged_before(tmp_path, capsys):
    """`memory merge A B` printed only B's error, though A stayed merged: the target's content was unknown."""
    a, b = _shards(tmp_path)
    target = tmp_path / "t.db"
    real = MemoryStore.merge_from

    def spoiled(self, other):  # b.db passed the check, then went bad before its turn
        if Path(other) == b:
            b.write_bytes(b"not a database at all" * 100)
        return real(self, other)

    with mock.patch.object(MemoryStore, "merge_from", spoiled):
        assert sirag(tmp_path, ["memory", "merge", str(a), str(b), str(a)], "--memory", str(target)) == 2
    out, err = capsys.readouterr()
    assert out.startswith(f"{a}: 1 outcome(s) added") and str(b) not in out, out
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0] == (f"{a} was merged into {target} and stays merged; {b} and {a} were not merged (the message "
                        "below says why): once that is fixed, run the same command again, which adds only what is "
                        "still missing"), err
    assert lines[1].startswith(f"error: cannot merge {b}: it is not a SQLite database"), err
    with MemoryStore(target, read_only=True) as store:
        assert store.stats()["outcomes"] == 1


def test_a_merge_that_fails_mid_way_says_so_in_json_and_names_a_full_disk(tmp_path, capsys):
    import sqlite3

    a, b = _shards(tmp_path)
    target = tmp_path / "t.db"
    real = MemoryStore.merge_from

    def full(self, other):  # the second file's transaction meets a full disk mid-way
        if Path(other) != b:
            return real(self, other)
        with mock.patch.object(MemoryStore, "_insert", side_effect=sqlite3.OperationalError("database or disk is full")):
            return real(self, other)

    with mock.patch.object(MemoryStore, "merge_from", full):
        assert sirag(tmp_path, ["memory", "merge", str(a), str(b)], "--memory", str(target), "--json") == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [r["file"] for r in data["merged"]] == [str(a)] and data["merged"][0]["outcomes_added"] == 1
    assert data["not_merged"] == [str(b)]
    assert f"{a} was merged into {target} and stays merged; {b} was not merged" in err, err
    assert (f"error: cannot write memory database {target}: database or disk is full; free some space on its disk"
            in err and "internal error" not in err), err
    # Once fixed, the same command adds only what is missing.
    assert sirag(tmp_path, ["memory", "merge", str(a), str(b)], "--memory", str(target), "--json") == 0
    assert [r["outcomes_added"] for r in json.loads(capsys.readouterr().out)] == [0, 2]


def test_the_same_label_given_again_changes_nothing_and_says_so(db, tmp_path, capsys):
    """`sirag feedback ID --correct` given twice said it "replaces the earlier user label (correct)" and
    wrote a second row; the same label is now said to be there already, and nothing is written."""
    oid = _ids(db)["Who owns Marsh House?"]

    def label(*flags: str) -> tuple[str, str]:
        assert sirag(tmp_path, ["feedback", oid[:10], *flags]) == 0
        return capsys.readouterr()

    assert label("--correct") == (f"recorded: outcome {oid[:12]} is correct\n", "")
    assert label("--correct") == (f"unchanged: outcome {oid[:12]} was already labelled correct by a user; "
                                  "nothing was written\n", "")
    out, err = label("--wrong")  # a different label replaces it
    assert out == f"recorded: outcome {oid[:12]} is wrong\n" and "replaces the earlier user label (correct)" in err
    out, err = label("--wrong", "--note", "the mill, not the house")  # a new note is kept
    assert out.startswith("recorded:") and "already had this label; the new note is kept with it" in err, err
    assert label("--wrong")[0].startswith("unchanged:")  # no note: the earlier one stands
    assert sirag(tmp_path, ["feedback", oid[:10], "--wrong", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["written"], data["replaced"]) == (False, None)
    with MemoryStore(db, read_only=True) as store:
        shown = store.show(oid)
    assert [(f["label"], f["note"]) for f in shown["feedback"]] == [(1, ""), (0, ""), (0, "the mill, not the house")]
    assert shown["current_label"]["note"] == "the mill, not the house"
    # A user label that says what a gold label said is written: it outranks later gold labels.
    other = _ids(db)["Who kept the lighthouse?"]
    with MemoryStore(db) as store:
        store.add_feedback(other, correct=True, source="gold")
    assert sirag(tmp_path, ["feedback", other[:10], "--correct"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("recorded:") and "the gold label said the same; as a user label it is kept" in err, err


def test_what_feedback_says_about_the_earlier_label_is_what_its_write_found(db, tmp_path, capsys):
    """The label `sirag feedback` reports replacing is the one in use when its label is written: read
    in the writing transaction, not by the lookup before it. Another process that labels the
    outcome wrong in between made `--correct` say "the outcome already had this label" and
    `--json` say nothing was replaced."""
    oid = _ids(db)["Who owns Marsh House?"]
    with MemoryStore(db) as store:
        store.add_feedback(oid, correct=True, source="user")
    show = MemoryStore.show

    def show_then_another_labels(self, outcome_id):
        shown = show(self, outcome_id)
        with MemoryStore(db) as other:  # another `sirag feedback`, between the lookup and the write
            other.add_feedback(oid, correct=False, source="user")
        return shown

    with mock.patch.object(MemoryStore, "show", show_then_another_labels):
        assert sirag(tmp_path, ["feedback", oid[:10], "--correct", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["written"] is True and data["replaced"]["label"] == 0 and data["replaced"]["source"] == "user"
    with mock.patch.object(MemoryStore, "show", show_then_another_labels):
        assert sirag(tmp_path, ["feedback", oid[:10], "--correct"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("recorded:") and "it replaces the earlier user label (wrong)" in err, err
    assert "already had this label" not in err


@pytest.mark.parametrize("command", [["calibrate", "--dry-run"], ["memory", "stats"], ["feedback", "OID", "--wrong"]])
def test_index_given_to_a_command_of_the_memory_store_is_refused_not_ignored(db, tmp_path, capsys, command):
    """`sirag calibrate --index A` fitted on the labels of every index folder, as if --index were not
    there, and `--help` listed --index as the corpus it works on; it is now one error saying why, with
    nothing written, and --help no longer offers it."""
    import subprocess

    oid = _ids(db)["Who owns Marsh House?"]
    command = [oid if word == "OID" else word for word in command]
    before = db.read_bytes()
    assert sirag(tmp_path, command, "--index", str(tmp_path / "index")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --index is not an option of sirag {command[0]}: ") and "leave --index out" in err
    assert err.count("\n") == 1 and db.read_bytes() == before
    with MemoryStore(db, read_only=True) as store:
        assert store.show(oid)["feedback"] == []
    shown = subprocess.run([sys.executable, "-m", "self_improving_rag.cli", command[0], "--help"],
                           capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert shown.returncode == 0 and "--memory" in shown.stdout and "--index" not in shown.stdout
