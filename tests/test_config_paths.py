"""Paths in the config: "~" means the home folder wherever a path is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from self_improving_rag.config import load_config
from self_improving_rag.errors import ConfigError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_tilde_in_a_set_override_is_the_home_folder(home: Path) -> None:
    # The shell leaves "~" alone in `--set paths.memory_db=~/m.db`: the config must expand it, or a
    # folder literally named "~" is made in the working directory and the memory seems lost.
    config = load_config(None, ["paths.memory_db=~/m.db", "paths.index_dir=~/idx", "paths.log_dir=~/logs"])
    assert config.paths.memory_db == str(home / "m.db")
    assert config.paths.index_dir == str(home / "idx")
    assert config.paths.log_dir == str(home / "logs")


def test_tilde_in_a_config_file_is_the_home_folder(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("paths:\n  memory_db: ~/sirag/memory.db\n", encoding="utf-8")
    assert load_config(cfg).paths.memory_db == str(home / "sirag" / "memory.db")
    assert load_config(None).paths.model_cache == str(home / ".cache" / "self_improving_rag" / "models")


def test_a_bare_tilde_is_yamls_null_and_the_message_says_so(home: Path) -> None:
    from self_improving_rag.errors import ConfigError

    with pytest.raises(ConfigError, match=r"paths.memory_db.*a bare ~ or an empty value is YAML's null: write ~/NAME"):
        load_config(None, ["paths.memory_db=~"])


def test_relative_paths_stay_relative(home: Path) -> None:
    config = load_config(None, ["paths.memory_db=memory/m.db"])
    assert config.paths.memory_db == "memory/m.db"


def test_several_config_files_layer_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("strategy:\n  top_k: 9\n  rerank: false\n", encoding="utf-8")
    b.write_text("strategy:\n  top_k: 7\n", encoding="utf-8")
    config = load_config([a, b])
    assert (config.strategy.top_k, config.strategy.rerank) == (7, False)  # b wins top_k, a's rerank stays
    assert load_config([b, a]).strategy.top_k == 9


def test_repeated_config_on_the_command_line_layers_every_file(tmp_path: Path) -> None:
    from self_improving_rag.cli.app import build_parser

    args = build_parser().parse_args(["ask", "Who?", "--config", "a.yaml", "--config", "b.yaml"])
    assert args.config == ["a.yaml", "b.yaml"]


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path: Path) -> None:
    from self_improving_rag.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("strategy:\n  top_k: 9\n  top_k: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.yaml: the key 'top_k' is given twice in one mapping \(line 3\)"):
        load_config(cfg)
    # The same key in two different mappings is fine.
    cfg.write_text("strategy:\n  top_k: 9\nretrieval:\n  candidates: 40\nscoring: {}\n", encoding="utf-8")
    assert load_config(cfg).strategy.top_k == 9


def test_yaml_anchors_and_merge_keys_still_load(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("x-common: &c {top_k: 6}\nstrategy:\n  <<: *c\n  rerank: false\n", encoding="utf-8")
    from self_improving_rag.config import load_yaml_unique

    assert load_yaml_unique(cfg.read_text())["strategy"] == {"top_k": 6, "rerank": False}
    # Two merges in one mapping are YAML too.
    assert load_yaml_unique("a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n")["c"] == {"x": 1, "y": 2}


def test_the_cli_layers_every_config_file(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.conftest import fake_overrides, write_corpus

    docs = write_corpus(tmp_path / "docs")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("strategy:\n  top_k: 3\n  rerank: false\n", encoding="utf-8")
    b.write_text("strategy:\n  top_k: 2\n", encoding="utf-8")
    ov = [x for o in fake_overrides(tmp_path) for x in ("--set", o)]

    def sirag(*args):
        return subprocess.run([sys.executable, "-m", "self_improving_rag.cli", *args, *ov], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    assert sirag("ingest", str(docs)).returncode == 0
    r = sirag("search", "Who built the lighthouse?", "--config", str(a), "--config", str(b), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["strategy"]["top_k"] == 2 and len(out["hits"]) == 2  # b's top_k wins ...
    assert out["strategy"]["rerank"] is False  # ... and a's other setting stays


def test_config_dev_null_means_no_user_settings() -> None:
    # /dev/null is not a regular file; it used to be reported as "not found".
    assert load_config("/dev/null") == load_config(None)


def test_config_from_a_pipe_is_read(tmp_path) -> None:
    import os
    import threading

    fifo = tmp_path / "cfg.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("strategy:\n  top_k: 3\n", encoding="utf-8"))
    writer.start()
    try:
        assert load_config(fifo).strategy.top_k == 3
    finally:
        writer.join(timeout=10)


def test_an_oversized_config_file_is_refused(tmp_path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000, encoding="utf-8")
    with pytest.raises(ConfigError, match="over 1 MB"):
        load_config(big)


def test_a_malformed_config_file_gives_the_parsers_reason(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("strategy:\n  top_k: 5\n  chunker: {fixed size: 3 x: }\n  - retriever\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.yaml: malformed YAML at line \d+, column \d+: [a-z]"):
        load_config(str(f), [])


def test_tilde_in_the_other_path_settings_is_the_home_folder(home: Path) -> None:
    config = load_config(None, ["ingestion.gutenberg_dir=~/books"])
    assert config.ingestion.gutenberg_dir == str(home / "books")


def test_layers_are_validated_together_so_a_later_one_can_mend_an_earlier_one(tmp_path: Path) -> None:
    # size 20 alone clashes with the default overlap of 30; the next --set lowers the overlap.
    config = load_config(None, ["ingestion.fixed.size=20", "ingestion.fixed.overlap=5"])
    assert (config.ingestion.fixed.size, config.ingestion.fixed.overlap) == (20, 5)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("ingestion:\n  section:\n    max_tokens: 30\n", encoding="utf-8")
    b.write_text("ingestion:\n  section:\n    min_tokens: 5\n", encoding="utf-8")
    assert load_config([a, b]).ingestion.section.max_tokens == 30
    # Left invalid, the error names the layer that set the keys at fault, and the way out.
    with pytest.raises(ConfigError, match=r"^--set ingestion.fixed.size=20: .*overlap \(30\) must be smaller than "
                                          r"size \(20\); set overlap below size"):
        load_config(None, ["strategy.top_k=4", "ingestion.fixed.size=20"])
    with pytest.raises(ConfigError, match=rf"^{a}: .*min_tokens \(40\) must not exceed max_tokens \(30\)"):
        load_config([a])
    c = tmp_path / "c.yaml"
    c.write_text("strategy:\n  top_kk: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{c}: unknown key 'strategy.top_kk'"):
        load_config([a, b, c])


def test_a_number_with_a_leading_zero_is_read_as_written() -> None:
    # YAML 1.1 reads 010 as octal 8; a --set value means what it says.
    assert load_config(None, ["strategy.top_k=010"]).strategy.top_k == 10
    assert load_config(None, ["strategy.top_k=09"]).strategy.top_k == 9
    assert load_config(None, ["generator.model=0123"]).generator.model == "0123"


def test_a_hash_in_a_set_value_is_part_of_it_not_a_comment(tmp_path: Path) -> None:
    # " #2" is a YAML comment: unquoted, the path would lose its end and another folder be used.
    folder = f"{tmp_path}/idx #2"
    assert load_config(None, [f"paths.index_dir={folder}"]).paths.index_dir == folder
    assert load_config(None, [f'paths.index_dir="{folder}"']).paths.index_dir == folder
    assert load_config(None, ["paths.index_dir=#idx"]).paths.index_dir == "#idx"
    with pytest.raises(ConfigError, match="'#' after a space starts a YAML comment"):
        load_config(None, ["generator.replies=[a, b] #c"])
    with pytest.raises(ConfigError, match="'#' after a space starts a YAML comment"):
        load_config(None, ["loop.answer_threshold=null # off"])  # not the text "null # off"
    # A '#' inside quotes, or inside a word, is no comment: read as before.
    assert load_config(None, ['generator.replies=["Built in 1852 [1]. #1", "b"]']).generator.replies == [
        "Built in 1852 [1]. #1", "b"]
    assert load_config(None, ["paths.index_dir=a#b"]).paths.index_dir == "a#b"
    assert load_config(None, ["loop.enabled=00"]).loop.enabled is False  # 0 in octal and decimal alike


def test_an_error_names_the_layer_that_set_the_key_last(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("ingestion:\n  fixed:\n    size: 20\n", encoding="utf-8")  # below the default overlap
    # An empty mapping merged in changes nothing, so it is not blamed.
    with pytest.raises(ConfigError, match=rf"^{a}: 'ingestion.fixed'"):
        load_config([a], ["ingestion.fixed={}"])
    # A plain value replaced by a mapping under the same key is no longer blamed.
    with pytest.raises(ConfigError, match=r"^--set strategy.top_k=0: 'strategy.top_k'"):
        load_config(None, ["strategy=5", "strategy.top_k=0"])
