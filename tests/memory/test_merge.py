"""Merging memory stores (batch shards run elsewhere): what is added, what is skipped, what wins."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import make_answer, repaired_answer  # noqa: E402

from self_improving_rag.errors import MemoryStoreError  # noqa: E402
from self_improving_rag.memory import MemoryStore  # noqa: E402


def _shard(path: Path, run: str, questions: list[str]) -> tuple[MemoryStore, list[str]]:
    store = MemoryStore(path)
    ids = []
    for i, q in enumerate(questions):
        ans = repaired_answer(q) if i % 2 else make_answer(q)
        ids.append(store.record(ans, run_id=run, item_id=str(i), corpus=f"/index/{run}"))
    return store, ids


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_a_shard_is_merged_once_whatever_the_number_of_merges(tmp_path):
    main, _ = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?", "Where is the moor?"])
    shard, shard_ids = _shard(tmp_path / "shard.db", "run-b",
                              ["Who found the hound?", "What did Watson write?", "When did Holmes arrive?"])
    shard.add_feedback(shard_ids[1], correct=False, source="gold")
    shard.save_calibration({"bias": 0.1}, 20, {"auroc_after": 0.8},
                           corpus_fits={"/index/run-b": {"weights": {"bias": 0.3}, "n": 3, "l2": 1.0}})
    shard.close()
    before = main.stats()

    counts = main.merge_from(tmp_path / "shard.db")
    assert counts == {"outcomes_added": 3, "outcomes_present": 0, "outcomes_same_run_item": 0,
                      "attempts_added": 1 + 2 + 1, "questions_added": 2, "feedback_added": 1, "fits_added": 1}
    after = main.stats()
    assert after["outcomes"] == before["outcomes"] + 3
    assert after["questions"] == before["questions"] + 2  # "Who found the hound?" was known
    assert main.show(shard_ids[1])["feedback"][0]["label"] == 0
    assert main.latest_calibration()["weights"] == {"bias": 0.1}
    # Each outcome keeps its corpus, and the fit its corpus fits.
    assert main.stats()["corpora"] == {"/index/run-b": 3, "/index/run-a": 2}
    assert main.latest_calibration()["corpus_fits"] == {"/index/run-b": {"weights": {"bias": 0.3}, "n": 3, "l2": 1.0}}
    # Full-text search sees the merged answers' questions.
    assert any("Watson" in r["question"] for r in main.search("Watson"))

    again = main.merge_from(tmp_path / "shard.db")
    assert again["outcomes_added"] == again["attempts_added"] == again["feedback_added"] == again["fits_added"] == 0
    assert again["outcomes_present"] == 3
    assert main.stats() == after
    main.close()


def test_a_batch_item_recorded_twice_under_two_ids_is_kept_once(tmp_path):
    """Two machines resumed the same run: the item recorded here is not added again."""
    main, _ = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?"])
    shard, _ = _shard(tmp_path / "shard.db", "run-a", ["Who found the hound?", "Where is the moor?"])
    shard.close()
    counts = main.merge_from(tmp_path / "shard.db")
    assert counts["outcomes_same_run_item"] == 1 and counts["outcomes_added"] == 1
    assert main.stats()["outcomes"] == 2
    main.close()


def test_the_newest_label_and_fit_win_wherever_they_were_made(tmp_path):
    main, main_ids = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?"])
    shard = MemoryStore(tmp_path / "shard.db")
    shard.save_calibration({"old": 1.0}, 20, {})  # older than the fit made here below
    shard.close()
    main.merge_from(tmp_path / "shard.db")  # the shard knows nothing of main's outcome yet
    main.save_calibration({"new": 1.0}, 30, {})
    main.add_feedback(main_ids[0], correct=True)
    # A copy of main goes to another machine, is relabelled there, and comes back.
    main.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "main.db").read_bytes())
    main = MemoryStore(tmp_path / "main.db")
    other = MemoryStore(copy)
    other.add_feedback(main_ids[0], correct=False, note="checked the book")
    other.close()
    counts = main.merge_from(copy)
    assert counts["outcomes_present"] == 1 and counts["feedback_added"] == 1 and counts["fits_added"] == 0
    assert main.show(main_ids[0])["feedback"][-1]["label"] == 0
    assert main.latest_calibration()["weights"] == {"new": 1.0}
    # An older fit merged later does not replace a newer one.
    older = MemoryStore(tmp_path / "older.db")
    older.db.conn.execute(
        "INSERT INTO calibration_fits (created_at, weights_json, n) VALUES ('2001-01-01T00:00:00.000+00:00', "
        "'{\"ancient\": 1.0}', 5)")
    older.close()
    assert main.merge_from(tmp_path / "older.db")["fits_added"] == 1
    assert main.latest_calibration()["weights"] == {"new": 1.0}
    main.close()


def test_an_older_label_merged_later_does_not_win_and_gold_never_outranks_a_user(tmp_path):
    main, ids = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?", "Where is the moor?"])
    main.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "main.db").read_bytes())
    other = MemoryStore(copy)
    other.add_feedback(ids[0], correct=False, source="gold")  # made first, on the copy
    other.add_feedback(ids[1], correct=True, source="gold", keep_settled=True)
    other.close()
    main = MemoryStore(tmp_path / "main.db")
    main.add_feedback(ids[0], correct=True, source="gold")  # made later, here
    main.add_feedback(ids[1], correct=False, source="user")  # a user's label, older than the copy's gold
    main.db.conn.execute("UPDATE feedback SET created_at = '2001-01-01T00:00:00.000+00:00' WHERE source = 'user'")
    assert main.merge_from(copy)["feedback_added"] == 2
    labels = {r["outcome_id"]: (r["label"], r["source"]) for r in main.labelled_attempts()}
    assert labels[ids[0]] == (1, "gold"), "the newer label wins, although the older was inserted later"
    assert labels[ids[1]] == (0, "user"), "a gold label never replaces a user's"
    main.close()


def test_a_store_is_not_merged_into_itself_and_a_bad_source_changes_nothing(tmp_path):
    main, _ = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?"])
    with pytest.raises(MemoryStoreError, match="itself"):
        main.merge_from(tmp_path / "main.db")
    (tmp_path / "link.db").hardlink_to(tmp_path / "main.db")
    with pytest.raises(MemoryStoreError, match="itself"):
        main.merge_from(tmp_path / "link.db")
    # Messages name the file to merge, and do not send the user to --memory (the target).
    with pytest.raises(MemoryStoreError, match="cannot merge .*missing.db: no such file") as e:
        main.merge_from(tmp_path / "missing.db")
    with pytest.raises(MemoryStoreError, match="cannot merge .*: a folder"):
        main.merge_from(tmp_path)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(MemoryStoreError, match="cannot merge .*foreign.db: it is not a sirag memory store") as e:
        main.merge_from(foreign)
    assert "--memory" not in str(e.value)
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database")
    with pytest.raises(MemoryStoreError, match="cannot merge .*garbage.db: it is not a SQLite database") as e:
        main.merge_from(garbage)
    assert "--memory" not in str(e.value)
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(MemoryStoreError, match="cannot merge .*empty.db: it is empty; nothing to merge"):
        main.merge_from(tmp_path / "empty.db")
    newer = tmp_path / "newer.db"
    MemoryStore(newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('sirag', 'm999_future', '2030-01-01')")
    with pytest.raises(MemoryStoreError, match="cannot merge .*newer.db: it was written by a newer version of sirag; "
                                               "upgrade sirag"):
        main.merge_from(newer)
    assert main.stats()["outcomes"] == 1
    main.close()


def _sirag(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "self_improving_rag.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_memory_merge_command(tmp_path):
    _shard(tmp_path / "a.db", "run-a", ["Who found the hound?", "Where is the moor?"])[0].close()
    _shard(tmp_path / "b.db", "run-b", ["What did Watson write?"])[0].close()
    target = tmp_path / "merged" / "memory.db"
    r = _sirag(["memory", "merge", "a.db", "b.db", "--memory", str(target), "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["file"], x["outcomes_added"]) for x in rows] == [("a.db", 2), ("b.db", 1)]
    assert _count(target, "outcomes") == 3 and _count(target, "attempts") == 4
    r = _sirag(["memory", "merge", "a.db", "--memory", str(target)], tmp_path)
    assert r.returncode == 0 and "0 outcome(s) added" in r.stdout and "skipped 2 already here" in r.stdout
    # Every source is checked before anything is merged: a typo in the second merges nothing.
    r = _sirag(["memory", "merge", "b.db", "c.db", "--memory", str(tmp_path / "fresh.db")], tmp_path)
    assert r.returncode != 0 and "c.db" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "fresh.db").exists()
    for args, word in ((["merge"], "needs the file"), (["merge", str(target)], "itself"),
                       (["stats", "a.db"], "takes no argument"), (["show", "ab", "cd"], "one outcome id")):
        r = _sirag(["memory", *args, "--memory", str(target)], tmp_path)
        assert r.returncode == 2 and word in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_analysis_never_creates_or_rewrites_a_store_whatever_its_path_says(tmp_path):
    """Words in a path ("older", "upgrade") once made `sirag memory` retry with a writable open,
    which created a missing store and turned an empty file into one."""
    r = _sirag(["memory", "stats", "--memory", "older-runs/typo.db"], tmp_path)
    assert r.returncode == 2 and "no memory store at older-runs/typo.db" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "older-runs").exists()
    (tmp_path / "upgrade_me").mkdir()
    (tmp_path / "upgrade_me" / "e.db").write_bytes(b"")
    r = _sirag(["memory", "stats", "--memory", "upgrade_me/e.db"], tmp_path)
    assert r.returncode == 2 and "is empty" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "upgrade_me" / "e.db").stat().st_size == 0


def test_merging_labels_says_how_to_fit_on_them(tmp_path):
    store, ids = _shard(tmp_path / "a.db", "run-a", ["Who found the hound?", "Where is the moor?"])
    store.add_feedback(ids[0], correct=True, source="gold")
    store.close()
    r = _sirag(["memory", "merge", "a.db", "--memory", "main.db"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert ("labels added: `sirag calibrate` fits the confidence on all labels here; the automatic fit is after "
            "49 more labelled answers") in r.stdout
    r = _sirag(["memory", "merge", "a.db", "--memory", "main.db"], tmp_path)  # nothing new: nothing to say
    assert r.returncode == 0 and "labels added" not in r.stdout
    r = _sirag(["memory", "merge", "a.db", "--memory", "other.db", "--set", "calibration.auto_fit=false"], tmp_path)
    assert r.returncode == 0 and "the automatic fit is off (calibration.auto_fit)" in r.stdout, r.stdout
    r = _sirag(["memory", "merge", "a.db", "--memory", "third.db", "--set", "calibration.auto_min_labels=2",
                "--set", "calibration.auto_refit_after=1"], tmp_path)
    assert r.returncode == 0 and "labels added" in r.stdout and "after 1 more labelled answer" in r.stdout, r.stdout


def test_a_label_given_here_is_in_use_after_one_merged_from_a_clock_ahead(tmp_path, monkeypatch):
    """A label merged from a machine whose clock ran ahead stayed the newest by time, so every label
    given here later was recorded and never used: a label given now is dated after it."""
    import self_improving_rag.memory.store as store_module

    main, ids = _shard(tmp_path / "main.db", "run-a", ["Who found the hound?", "Where is the moor?"])
    main.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "main.db").read_bytes())
    with monkeypatch.context() as m:
        m.setattr(store_module, "_utcnow", lambda: "2030-01-01T00:00:00.000+00:00")
        other = MemoryStore(copy)
        other.add_feedback(ids[0], correct=False)
        other.add_feedback(ids[1], correct=False, source="gold")
        other.close()
    main = MemoryStore(tmp_path / "main.db")
    assert main.merge_from(copy)["feedback_added"] == 2
    main.add_feedback(ids[0], correct=True)
    assert main.add_feedback(ids[1], correct=True, source="gold", keep_settled=True)  # a corrected gold answer
    current = {i: main.show(i)["current_label"] for i in ids}
    assert [(c["label"], c["source"]) for c in current.values()] == [(1, "user"), (1, "gold")]
    assert all(c["created_at"] > "2030-01-01T00:00:00.000+00:00" for c in current.values())
    assert main.stats()["feedback"]["correct"] == 2
    main.close()
    # Merged back, the labels given later win there too: time is the order every store shares.
    other = MemoryStore(copy)
    other.merge_from(tmp_path / "main.db")
    assert [other.show(i)["current_label"]["label"] for i in ids] == [1, 1]
    other.close()
