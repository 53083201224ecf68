"""What a user meets at the edges: mistyped paths, damaged or read-only files, explicit settings.

Each case found by driving the CLI as a new user would (fakes only: hash embedder, scripted
generator)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import self_improving_rag
from self_improving_rag.config import pins_strategy
from self_improving_rag.feedback.policy import StrategyPolicy
from self_improving_rag.query import QueryFeatures
from self_improving_rag.memory.store import MemoryStore
from self_improving_rag.retrieval.embedding_cache import EmbeddingCache
from tests.conftest import batch_overrides, fake_overrides, write_corpus


def run(args, cwd, overrides=()):
    cmd = [sys.executable, "-m", "self_improving_rag.cli", *args]
    for o in overrides:
        cmd += ["--set", o]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def _doc_ids(tmp_path: Path) -> list[str]:
    r = run(["stats", "--json"], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0, r.stderr
    return sorted(json.loads(r.stdout)["documents"]["section"])


# -- ingest --------------------------------------------------------------------------------

def _ingest_corpus_and_extra(tmp_path: Path) -> tuple[Path, list[str]]:
    """An index of the test corpus plus one more document, 'extra'; the corpus folder and settings."""
    docs = write_corpus(tmp_path / "docs")
    extra = tmp_path / "extra.txt"
    extra.write_text("The ferry to Gull Island leaves at noon.\n\nIt returns at six.", encoding="utf-8")
    ov = fake_overrides(tmp_path)
    assert run(["ingest", str(docs), str(extra)], tmp_path, ov).returncode == 0
    return docs, ov


def test_a_mistyped_path_changes_nothing(tmp_path):
    docs, ov = _ingest_corpus_and_extra(tmp_path)
    before = _doc_ids(tmp_path)
    assert "extra" in before
    r = run(["ingest", str(docs), str(tmp_path / "extr.txt")], tmp_path, ov)
    assert r.returncode == 2
    assert "extr.txt" in r.stderr and "nothing was changed" in r.stderr and "Traceback" not in r.stderr
    assert _doc_ids(tmp_path) == before


def test_documents_left_out_are_named(tmp_path):
    docs, ov = _ingest_corpus_and_extra(tmp_path)
    r = run(["ingest", str(docs)], tmp_path, ov)
    assert r.returncode == 0
    assert "1 document(s) the index held are no longer in it: extra" in r.stderr
    r = run(["ingest", str(docs), "--json"], tmp_path, ov)
    assert json.loads(r.stdout)["removed_documents"] == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_special_file_is_named_as_such(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    pipe = tmp_path / "pipe.txt"
    os.mkfifo(pipe)
    r = run(["ingest", str(docs), str(pipe)], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0
    assert "not a regular file or folder" in r.stderr and "no such file" not in r.stderr


def test_stats_png_failure_still_reports_the_built_index(tmp_path, monkeypatch, capsys):
    from self_improving_rag import cli
    from self_improving_rag.ingestion import stats

    def fail(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / "h.png"))

    monkeypatch.setattr(stats, "chunk_stats", fail)
    docs = write_corpus(tmp_path / "docs")
    argv = ["ingest", str(docs), "--stats-png", str(tmp_path / "h.png")]
    for o in fake_overrides(tmp_path):
        argv += ["--set", o]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert "indexed 2 document(s)" in out
    assert "the index was built, but the chunk statistics were not" in err and "h.png" in err


# -- the embedding cache -------------------------------------------------------------------

def _vecs(texts):
    return np.ones((len(texts), 4), np.float32)


def test_a_damaged_embedding_cache_is_moved_aside(tmp_path):
    path = tmp_path / "embeddings.sqlite"
    path.write_text("not a database")
    cache = EmbeddingCache(path, "hash")
    assert cache.embed(["a", "b"], _vecs).shape == (2, 4) and cache.writable
    cache.close()
    assert [p.name for p in tmp_path.glob("embeddings.sqlite.damaged-*")]
    again = EmbeddingCache(path, "hash")
    again.embed(["a"], _vecs)
    assert again.hits == 1
    again.close()


def test_damage_found_while_reading_the_cache_is_not_an_error(tmp_path):
    path = tmp_path / "embeddings.sqlite"
    texts = [f"sentence {i}" for i in range(3000)]
    cache = EmbeddingCache(path, "hash")
    cache.embed(texts, lambda ts: np.ones((len(ts), 96), np.float32))
    cache.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    size = path.stat().st_size
    with path.open("r+b") as fh:  # the header is intact: the file opens, its pages do not read
        fh.seek(size // 2)
        fh.write(os.urandom(min(200_000, size // 3)))
    damaged = EmbeddingCache(path, "hash")
    out = damaged.embed(texts, lambda ts: np.zeros((len(ts), 96), np.float32))
    assert out.shape == (3000, 96)
    assert list(tmp_path.glob("embeddings.sqlite.damaged-*"))
    damaged.close()


def test_an_unwritable_embedding_cache_is_read_as_it_is(tmp_path, monkeypatch):
    path = tmp_path / "embeddings.sqlite"
    cache = EmbeddingCache(path, "hash")
    cache.embed(["a"], _vecs)
    cache.close()

    def refuse(self):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(EmbeddingCache, "_connect", refuse)
    ro = EmbeddingCache(path, "hash")
    assert not ro.writable
    out = ro.embed(["a", "new text"], lambda ts: np.zeros((len(ts), 4), np.float32))
    assert out[0].tolist() == [1, 1, 1, 1] and out[1].tolist() == [0, 0, 0, 0]  # old from file, new in memory
    assert (ro.hits, ro.misses) == (1, 1)
    assert ro.embed(["new text"], None).shape == (1, 4)  # kept for this process
    ro.close()


# -- a read-only memory store --------------------------------------------------------------

def test_a_memory_store_in_a_read_only_folder_can_be_read(tmp_path, monkeypatch):
    from tests.memory.memory_testkit import make_answer

    db = tmp_path / "mem" / "memory.db"
    with MemoryStore(db) as store:
        store.record(make_answer("Who built it?"))
    real_connect, real_access = sqlite3.connect, os.access

    def connect(target, *a, **k):  # mode=ro needs the -shm file, which a read-only folder refuses
        if "mode=ro" in str(target):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(target, *a, **k)

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == db.parent else real_access(p, m))
    with MemoryStore(db, read_only=True) as ro:
        assert ro.stats()["outcomes"] == 1


# -- explicit strategies -------------------------------------------------------------------

def test_explicit_strategy_keys_pin_the_first_attempt():
    assert pins_strategy(["strategy.top_k=8"])
    assert pins_strategy({"strategy.chunker": "fixed"})
    assert not pins_strategy(["strategy.top_k=8", "policy.first_from_memory=true"])
    assert not pins_strategy(["retrieval.dense_weight=0.3", "paths.memory_db=x.db"])
    # A policy mapping says where the first strategy comes from only if it holds first_from_memory.
    assert pins_strategy([("strategy.chunker", "section"), ("policy", {"seed": 0})])
    assert pins_strategy(["strategy.chunker=section", 'policy={"explore": 0.0}'])
    assert not pins_strategy([("strategy.chunker", "section"), ("policy", {"first_from_memory": True})])
    assert not pins_strategy(["strategy={chunker: fixed}", "policy={first_from_memory: true}"])
    assert pins_strategy([("strategy", {"top_k": 3})])


def test_a_pinned_first_strategy_ignores_memory(make_engine, fake_config):
    from tests.memory.memory_testkit import STRATEGY_A, make_answer, make_attempt

    engine, _, store = make_engine(["Clara Venn [1]."])
    other = replace(STRATEGY_A, top_k=9)
    for i in range(6):  # a record in which another strategy always succeeds first
        store.record(make_answer(f"who {i}", attempts=(make_attempt(1, strategy=other, answer="x"),)))
    features = QueryFeatures(query_class="who", n_words=3, n_names=0, multi_part=False)
    default = fake_config.strategy.to_strategy()
    learned = StrategyPolicy(fake_config.policy, default, store, ("section", "semantic", "fixed"))
    assert learned.first("who 9", features) == other
    pinned_cfg = fake_config.policy.model_copy(update={"first_from_memory": False})
    pinned = StrategyPolicy(pinned_cfg, default, store, ("section", "semantic", "fixed"))
    assert pinned.first("who 9", features) == default


def test_a_chunker_the_index_lacks_is_replaced_with_a_warning(make_engine, fake_config, caplog):
    cfg = fake_config.model_copy(update={
        "strategy": fake_config.strategy.model_copy(update={"chunker": "fixed"}),
        "policy": fake_config.policy.model_copy(update={"first_from_memory": False}),
        "ingestion": fake_config.ingestion.model_copy(update={"chunkers": ["section"]}),
    })
    engine, _, _ = make_engine(["Clara Venn [1]."], config=cfg)
    engine.searcher.available_chunkers = lambda: ["section"]
    engine.warm_up()
    assert "no 'fixed' chunker" in caplog.text
    assert engine._policy.default.chunker == "section"


# -- batch and eval ------------------------------------------------------------------------

def test_eval_of_jsonl_questions_without_documents_says_so(tmp_path):
    qa = tmp_path / "qs.jsonl"
    qa.write_text(json.dumps({"id": "a", "question": "Who built it?", "answers": ["Clara"]}) + "\n")
    r = run(["eval", "--dataset", str(qa)], tmp_path, batch_overrides(tmp_path))
    assert r.returncode == 2
    assert "no corpus and no index" in r.stderr and "--corpus" in r.stderr and "Traceback" not in r.stderr


def test_export_errors_name_the_file_asked_for(tmp_path, monkeypatch):
    from tests.memory.memory_testkit import make_answer

    with MemoryStore(tmp_path / "m.db") as store:
        store.record(make_answer("Who built it?"))

        def deny(src, dst):
            raise PermissionError(13, "Permission denied", str(src))

        monkeypatch.setattr(os, "replace", deny)
        with pytest.raises(PermissionError) as info:
            store.export("csv", tmp_path / "out.csv")
    assert info.value.filename == str(tmp_path / "out.csv")
    assert not list(tmp_path.glob(".out.csv.*.tmp"))


# -- the console script ----------------------------------------------------------------------

def test_ctrl_c_while_loading_ends_quietly(monkeypatch, capsys):
    class Interrupting:  # Ctrl-C arriving while the CLI module is being imported
        def find_spec(self, name, path=None, target=None):
            if name == "self_improving_rag.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "self_improving_rag.cli", raising=False)
    monkeypatch.delattr(self_improving_rag, "cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert self_improving_rag.entry() == 130
    assert "interrupted" in capsys.readouterr().err


def test_batch_overrides_and_grid_points_pin_the_first_strategy():
    from self_improving_rag.batch import BatchSpec, resolved_config
    from self_improving_rag.config import Config

    def spec(**kw):
        return BatchSpec.model_validate({"name": "b", "questions": {"inline": [{"question": "Who?"}]}, **kw})

    assert resolved_config(Config(), spec(), {}, "idx").policy.first_from_memory
    assert not resolved_config(Config(), spec(overrides={"strategy.top_k": 6}), {}, "idx").policy.first_from_memory
    assert not resolved_config(Config(), spec(), {"strategy.chunker": "fixed"}, "idx").policy.first_from_memory
    assert not resolved_config(Config(), spec(overrides={"strategy": {"top_k": 6}}), {}, "idx").policy.first_from_memory
    explicit = spec(overrides={"strategy.top_k": 6, "policy.first_from_memory": True})
    assert resolved_config(Config(), explicit, {}, "idx").policy.first_from_memory


def test_a_resumed_run_made_before_pinning_keeps_its_behaviour(tmp_path):
    from self_improving_rag.batch.resume import _changed_settings
    from self_improving_rag.config import Config, to_yaml

    old = Config()
    stored = to_yaml(old).replace("  first_from_memory: true\n", "")  # written before the setting existed
    assert "first_from_memory" not in stored
    (tmp_path / "config.yaml").write_text(stored, encoding="utf-8")
    assert _changed_settings(tmp_path, old) == ""
    pinned = old.model_copy(update={"policy": old.policy.model_copy(update={"first_from_memory": False})})
    assert "policy.first_from_memory: True -> False" in _changed_settings(tmp_path, pinned)


def test_a_resumed_run_made_before_the_retry_margin_is_not_judged_with_it(tmp_path):
    """A run made before loop.retry_margin existed accepted retries at answer_threshold: resuming
    it with the new default would judge its later questions by another rule, so it is refused."""
    from self_improving_rag.batch.resume import _changed_settings
    from self_improving_rag.config import Config, to_yaml

    now = Config()
    stored = to_yaml(now).replace("  retry_margin: 0.1\n", "")
    assert "retry_margin" not in stored
    (tmp_path / "config.yaml").write_text(stored, encoding="utf-8")
    assert "loop.retry_margin: 0.0 -> 0.1" in _changed_settings(tmp_path, now)
    as_made = now.model_copy(update={"loop": now.loop.model_copy(update={"retry_margin": 0.0})})
    assert _changed_settings(tmp_path, as_made) == ""


def test_a_resumed_run_made_without_question_prior_is_not_scored_with_it(tmp_path):
    """A run made before scoring.question_prior existed (or with it off, before the setting was
    removed and the feature always read) recorded no such feature: resuming it would give its later
    answers a feature (and, under a fit, a confidence) its earlier ones lack, so it is refused; a
    run made with it on resumes, as does one written since the setting was removed."""
    from pathlib import Path

    import yaml

    from self_improving_rag.batch.resume import _changed_settings
    from self_improving_rag.config import Config, to_yaml

    now = Config()
    (tmp_path / "config.yaml").write_text(to_yaml(now), encoding="utf-8")
    assert _changed_settings(tmp_path, now) == ""
    old = yaml.safe_load((Path(__file__).parents[1] / "data" / "run-config-106-keys.yaml").read_text(encoding="utf-8"))
    old["paths"]["model_cache"] = now.paths.model_cache
    for before, refused in ((True, False), (None, True), (False, True)):
        if before is None:
            del old["scoring"]["question_prior"]  # written before the setting existed
        else:
            old["scoring"]["question_prior"] = before
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(old), encoding="utf-8")
        changed = _changed_settings(tmp_path, now)
        assert changed == ("scoring.question_prior: False -> True (no longer a setting)" if refused else ""), before


def test_a_resumed_run_made_before_the_dates_rule_and_the_chosen_l2_is_not_judged_with_them(tmp_path):
    """A run made by an older version had no dates rule in attribution and fitted at l2 1: resuming
    it with today's defaults would answer its later questions by other rules, so it is refused;
    the dates rule can be set as the run had it, the fit's penalty (no longer a setting) cannot."""
    from pathlib import Path

    import yaml

    from self_improving_rag.batch.resume import _changed_settings
    from self_improving_rag.config import Config

    now = Config()
    stored = yaml.safe_load((Path(__file__).parents[1] / "data" / "run-config-106-keys.yaml").read_text("utf-8"))
    stored["paths"]["model_cache"] = now.paths.model_cache
    del stored["thresholds"]["dates_unstated"], stored["calibration"]["l2"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(stored), encoding="utf-8")
    changed = _changed_settings(tmp_path, now)
    assert "thresholds.dates_unstated: 1.0 -> 0.0" in changed
    assert "calibration.l2: 1.0 -> 'auto' (no longer a setting)" in changed
    as_made = now.model_copy(update={"thresholds": now.thresholds.model_copy(update={"dates_unstated": 1.0})})
    assert _changed_settings(tmp_path, as_made) == "calibration.l2: 1.0 -> 'auto' (no longer a setting)"


def test_memory_options_of_other_actions_are_refused(tmp_path):
    from tests.memory.memory_testkit import make_answer

    ov = fake_overrides(tmp_path)
    db = Path([o for o in ov if o.startswith("paths.memory_db=")][0].split("=", 1)[1])
    with MemoryStore(db) as store:
        store.record(make_answer("Who built it?"))
    for args, words in ((["memory", "stats", "foo"], "takes no argument"),
                        (["memory", "stats", "--csv", str(tmp_path / "x.csv")], "--csv"),
                        (["memory", "export", "--csv", str(tmp_path / "out.json")], "a .json name for a .csv file")):
        r = run(args, tmp_path, ov)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert not (tmp_path / "out.json").exists()
    r = run(["memory", "stats"], tmp_path, ov)
    assert r.returncode == 0 and "{'" not in r.stdout  # no Python dict reprs


def test_ask_refuses_option_mixes_it_cannot_honour(tmp_path):
    ov = fake_overrides(tmp_path)
    for args, words in ((["ask", "Who built it?", "--stream", "--json"], "choose one"),
                        (["ask", "-", "extra"], "stands alone")):
        r = run(args, tmp_path, ov)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = run(["search", "What", "is", "5", "-", "3?"], tmp_path, ov)  # a '-' inside a question is a word
    assert "stands alone" not in r.stderr and "no index" in r.stderr


def test_feedback_on_a_refusal_says_what_the_label_is_used_for(tmp_path):
    from tests.memory.memory_testkit import make_answer

    ov = fake_overrides(tmp_path)
    db = Path([o for o in ov if o.startswith("paths.memory_db=")][0].split("=", 1)[1])
    with MemoryStore(db) as store:
        oid = store.record(make_answer("Who built it?", refused=True))
    r = run(["feedback", oid[:8], "--correct"], tmp_path, ov)
    assert r.returncode == 0 and "is a refusal" in r.stderr


def test_an_ambiguous_id_prefix_lists_the_matches(tmp_path, monkeypatch):
    import uuid

    from tests.memory.memory_testkit import make_answer

    ids = iter(["abcdef" + c * 26 for c in "0123456"])
    monkeypatch.setattr(uuid, "uuid4", lambda: type("U", (), {"hex": next(ids)})())
    with MemoryStore(tmp_path / "m.db") as store:
        for i in range(7):
            store.record(make_answer(f"Who built tower {i}?"))
        with pytest.raises(Exception, match=r"matches several outcomes .*\(abcdef000000, abcdef111111, .*, \.\.\.\)"):
            store.show("abcdef")


def test_calibrate_reset_and_its_refused_mixes(tmp_path):
    from tests.memory.memory_testkit import make_answer

    ov = fake_overrides(tmp_path)
    db = Path([o for o in ov if o.startswith("paths.memory_db=")][0].split("=", 1)[1])
    with MemoryStore(db) as store:
        store.record(make_answer("Who built it?"))
        store.save_calibration({"bias": -3.0}, 30, {})
    r = run(["calibrate", "--reset", "--dry-run"], tmp_path, ov)
    assert r.returncode == 2 and "takes no --dry-run" in r.stderr
    r = run(["calibrate", "--reset"], tmp_path, ov)
    assert r.returncode == 0 and "default weights stored as fit 2" in r.stdout, r.stderr
    # When the engine's own fit comes, as `sirag memory stats` counts it (calibration.auto_min_labels
    # labels in all, and calibration.auto_refit_after new ones since the weights in use).
    assert "the engine's own after 50 more labelled answers (calibration.auto_fit)" in r.stdout
    stats = run(["memory", "stats", "--json"], tmp_path, ov)
    assert json.loads(stats.stdout)["calibration"]["automatic_fit"] == "after 50 more labelled answers"
    r = run(["calibrate", "--reset", "--min-labels", "5"], tmp_path, ov)
    assert r.returncode == 2 and "takes no --dry-run, --force or --min-labels" in r.stderr
    with MemoryStore(db, read_only=True) as store:
        latest = store.latest_calibration()
        assert latest["n"] == 0 and latest["metrics"]["reset_to_defaults"] is True
    r = run(["calibrate"], tmp_path, ov)  # one unlabelled answer: no hint to lower --min-labels to 0
    assert r.returncode == 2 and "0 labelled" in r.stderr and "--min-labels" not in r.stderr


def test_an_answer_accepted_despite_a_flag_says_so():
    from self_improving_rag.cli.ask import format_answer
    from tests.memory.memory_testkit import make_answer, make_attempt

    flagged = make_answer("Who built it?", (make_attempt(1, failure="WEAK_RETRIEVAL", confidence=0.9),), confidence=0.9)
    text = format_answer(flagged.to_json(), verbose=False)
    assert "note: its checks flagged WEAK_RETRIEVAL: reason for WEAK_RETRIEVAL" in text
    clean = make_answer("Who built it?")
    assert "flagged" not in format_answer(clean.to_json(), verbose=False)


@pytest.mark.parametrize("setting, words", [
    ("generator.n_ctx=-1", "greater than or equal to 256"),
    ("policy.seed=-1", "greater than or equal to 0"),
    ("generator.base_url=localhost:8000/v1", "must start with http:// or https://, e.g. http://localhost:8000/v1"),
])
def test_config_values_the_backends_would_reject_are_refused_when_read(tmp_path, setting, words):
    # Each used to pass the config check and fail later as an "internal error" traceback summary.
    r = run(["search", "Who built the lighthouse?", "--set", setting], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 2 and words in r.stderr and "internal error" not in r.stderr


def test_an_embedder_folder_without_a_model_is_named(tmp_path):
    (tmp_path / "not-a-model").mkdir()
    r = run(["ingest", str(write_corpus(tmp_path / "docs"))], tmp_path,
            [*fake_overrides(tmp_path), f"embedder.name={tmp_path / 'not-a-model'}"])
    assert r.returncode == 2 and "is a folder but not a model (no config.json there)" in r.stderr
    assert "internal error" not in r.stderr


def test_a_calibrate_dry_run_changes_nothing_in_the_store(tmp_path):
    """A dry run opens the store read-only: an empty file stays empty (no schema is written),
    and a labelled store's bytes and fits are unchanged."""
    from tests.memory.memory_testkit import make_answer

    empty = tmp_path / "empty.db"
    empty.touch()
    r = run(["calibrate", "--dry-run", "--memory", str(empty)], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 2 and "is empty" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert empty.stat().st_size == 0
    db = tmp_path / "labelled.db"
    with MemoryStore(db) as store:
        for i in range(24):
            oid = store.record(make_answer(f"Who built tower {i}?"))
            store.add_feedback(oid, correct=i % 3 == 0, source="gold")
    before = db.read_bytes()
    r = run(["calibrate", "--dry-run", "--min-labels", "20", "--memory", str(db)], tmp_path, fake_overrides(tmp_path))
    assert r.returncode == 0 and "dry run: nothing stored" in r.stdout, r.stderr
    assert "each label held out (5 folds)" in r.stdout and "held-out half" not in r.stdout
    assert db.read_bytes() == before
    with MemoryStore(db, read_only=True) as store:
        assert store.latest_calibration() is None


def test_the_command_list_shows_each_summary_whole():
    """`sirag --help` gives each command's first paragraph, not its first line cut mid-sentence."""
    r = run(["--help"], Path.cwd())
    text = " ".join(r.stdout.split())
    assert "export, report; merge other stores into it; back it up." in text
    assert "(used by `sirag calibrate`, whose fit the policy's counts then follow)." in text


def test_an_option_of_another_command_is_named_with_the_command_it_belongs_to(tmp_path):
    r = run(["batch", "b.yaml", "--name", "x"], tmp_path)
    assert r.returncode == 2 and r.stderr == (
        "error: sirag batch: unrecognized arguments: --name x (--name is an option of `sirag eval`); "
        "see `sirag batch --help`\n"), r.stderr
    r = run(["ask", "Who?", "--bogus"], tmp_path)
    assert r.returncode == 2 and r.stderr == "error: sirag ask: unrecognized arguments: --bogus; see `sirag ask --help`\n"


@pytest.mark.parametrize("args, problem", [
    (["search", "x", "--top-k", "0"], "argument --top-k: must be from 1 to 100, got 0"),
    (["search", "x", "--retriever", "foo"], "argument --retriever: invalid choice: 'foo'"),
    (["batch", "b.yaml", "--offset", "-1"], "argument --offset: must be 0 or more, got -1"),
    (["no-such-command"], "argument COMMAND: invalid choice: 'no-such-command'"),
])
def test_a_bad_option_value_is_one_error_line_naming_the_help(tmp_path, args, problem):
    """An option argparse refuses is one `error:` line that names the command and its --help, as
    every other bad input is, not the command's usage block with the error at its end."""
    r = run(args, tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: sirag"), r.stderr
    assert problem in lines[0] and "--help`" in lines[0] and "Traceback" not in r.stderr


def test_a_folder_given_as_the_memory_store_is_named_as_a_folder(tmp_path):
    (tmp_path / "mem").mkdir()
    for args in (["memory", "stats"], ["calibrate", "--dry-run"], ["feedback", "abc", "--correct"]):
        r = run([*args, "--memory", str(tmp_path / "mem")], tmp_path, fake_overrides(tmp_path))
        assert r.returncode == 2 and "is a folder; pass --memory with a database file" in r.stderr, (args, r.stderr)
