"""Removed settings: a file, a --set item or a run's saved config.yaml that still names one loads
(the key dropped with a warning naming it); a key never known (a typo) is still an error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from self_improving_rag import config as config_module
from self_improving_rag.config import NO_EFFECT, config_from_dict, drop_removed, load_config, to_yaml
from self_improving_rag.errors import ConfigError

#: What a run wrote as its config.yaml when the configuration had 106 settings.
OLD_RUN_CONFIG = Path(__file__).parent / "data" / "run-config-106-keys.yaml"


def _removed_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "no longer a setting" in r.getMessage()]


@pytest.fixture
def gone(monkeypatch):
    """A removed setting for these tests, whatever the real list holds."""
    monkeypatch.setitem(config_module.REMOVED_KEYS, "retrieval.gone_knob", 3)
    monkeypatch.setitem(config_module.REMOVED_KEYS, "ingestion.semantic.gone_too", NO_EFFECT)
    return "retrieval.gone_knob"


def test_a_user_file_with_a_removed_key_loads_with_one_warning(tmp_path, gone, caplog) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("retrieval:\n  gone_knob: 5\n  dense_weight: 0.4\ningestion:\n  semantic:\n    gone_too: 1\n")
    with caplog.at_level(logging.WARNING):
        config = load_config(f)
    assert config.retrieval.dense_weight == 0.4  # the rest of the file counts
    warned = _removed_warnings(caplog)
    assert len(warned) == 2
    assert warned[0].startswith("retrieval.gone_knob is no longer a setting (removed); it is ignored")
    assert str(f) in warned[0] and "ingestion.semantic.gone_too" in warned[1]


def test_a_set_item_naming_a_removed_key_is_ignored_with_a_warning(gone, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_config(None, ["retrieval.gone_knob=9", "strategy.top_k=7"])
    assert config.strategy.top_k == 7
    assert _removed_warnings(caplog) == [
        "retrieval.gone_knob is no longer a setting (removed); it is ignored (--set retrieval.gone_knob=9)"]


def test_an_unknown_key_is_still_an_error(tmp_path, gone) -> None:
    f = tmp_path / "typo.yaml"
    f.write_text("retrieval:\n  gone_knobb: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'retrieval.gone_knobb'"):
        load_config(f)
    with pytest.raises(ConfigError, match=r"unknown key 'retrieval.dense_weightt'"):
        load_config(None, ["retrieval.dense_weightt=0.3"])
    with pytest.raises(ConfigError, match=r"unknown key"):
        config_from_dict({"retrieval": {"gone_knob": 1, "typo": 2}})


def test_drop_removed_leaves_the_callers_mapping_as_it_was(gone, caplog) -> None:
    data = {"retrieval": {"gone_knob": 1, "dense_weight": 0.3}, "strategy": {"top_k": 4}}
    out = drop_removed(data, "test")
    assert out == {"retrieval": {"dense_weight": 0.3}, "strategy": {"top_k": 4}}
    assert data["retrieval"]["gone_knob"] == 1
    assert drop_removed({"retrieval": 5}, "test") == {"retrieval": 5}  # not a mapping: validation names it


def test_config_from_dict_drops_a_removed_key(gone, caplog) -> None:
    stored = yaml.safe_load(to_yaml(load_config()))
    stored["retrieval"]["gone_knob"] = 3
    with caplog.at_level(logging.WARNING):
        assert config_from_dict(stored, "runs/x/config.yaml") == load_config()
    assert _removed_warnings(caplog) == [
        "retrieval.gone_knob is no longer a setting (removed); it is ignored (runs/x/config.yaml)"]


def test_every_removed_key_is_gone_from_the_config_and_its_defaults() -> None:
    """The list names settings that no longer exist, and the packaged defaults name none of them."""
    current = set(config_module.config_keys())
    assert not current & set(config_module.REMOVED_KEYS)
    defaults = yaml.safe_load(config_module.default_config_text())
    assert drop_removed(defaults, "packaged") == defaults


def test_a_run_config_written_before_the_settings_were_removed_loads(caplog) -> None:
    """A run's config.yaml from when the configuration had 106 settings (all at their defaults then)
    loads, with one warning per removed setting, as the settings sirag has now."""
    stored = yaml.safe_load(OLD_RUN_CONFIG.read_text(encoding="utf-8"))
    with caplog.at_level(logging.WARNING):
        config = config_from_dict(stored, str(OLD_RUN_CONFIG))
    assert config == load_config()
    warned = _removed_warnings(caplog)
    removed_there = [k for k in config_module.REMOVED_KEYS if _has(stored, k)]
    assert len(warned) == len(removed_there) == len(config_module.REMOVED_KEYS)
    assert all(w.startswith(f"{k} is no longer a setting") for w, k in zip(warned, removed_there))


def test_a_run_made_with_removed_settings_at_todays_behaviour_resumes(tmp_path) -> None:
    """A resume compares the run's config.yaml with the settings given now: a removed setting that
    held the value the code now behaves as is no change; another value is, and is named."""
    from self_improving_rag.batch.resume import _changed_settings

    (tmp_path / "config.yaml").write_text(OLD_RUN_CONFIG.read_text(encoding="utf-8"))
    config = load_config(None, ["paths.model_cache=~/.cache/self_improving_rag/models"])
    assert _changed_settings(tmp_path, config) == ""
    changed = [k for k, v in config_module.REMOVED_KEYS.items() if v is not NO_EFFECT]
    if not changed:
        pytest.skip("no removed setting changes answers")
    key = changed[0]
    stored = yaml.safe_load(OLD_RUN_CONFIG.read_text(encoding="utf-8"))
    _set(stored, key, "something else")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(stored))
    assert f"{key}: 'something else' -> " in _changed_settings(tmp_path, config)
    assert "(no longer a setting)" in _changed_settings(tmp_path, config)


def _has(tree: dict, key: str) -> bool:
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _set(tree: dict, key: str, value) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


def test_the_shipped_config_files_name_no_removed_setting(caplog) -> None:
    repo = Path(__file__).resolve().parents[1]
    with caplog.at_level(logging.WARNING):
        assert load_config(repo / "configs" / "gpu-7b.yaml").generator.backend == "transformers"
    assert _removed_warnings(caplog) == []
