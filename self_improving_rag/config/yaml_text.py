"""Settings read from YAML text: the packaged defaults, and a file's text read with a key given
twice in one mapping refused (YAML would keep only the last) and every error one line naming its
source."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from ..errors import ConfigError


def default_config_text() -> str:
    """The packaged default YAML."""
    return resources.files("self_improving_rag").joinpath("configs/default.yaml").read_text("utf-8")


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (YAML keeps only the last: the first is lost unseen)."""

    def __init__(self, key: Any, mark: Any) -> None:
        super().__init__(f"the key {key!r} appears twice in one mapping")
        self.key, self.problem_mark = key, mark


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key repeated in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor" merges; it may repeat
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base loader names that problem
                continue
            if duplicate:
                raise DuplicateKeyError(key, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml_unique(text: str) -> Any:
    """``yaml.safe_load`` that raises :class:`DuplicateKeyError` for a key given twice."""
    loader = _UniqueKeyLoader(text)  # a SafeLoader: safe_load's constructors, plus the key check
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = load_yaml_unique(text)
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        raise ConfigError(f"{source}: the key {exc.key!r} is given twice in one mapping (line {mark.line + 1}); "
                          "keep one of them") from exc
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        # safe_load raises these for a mistyped explicit tag (e.g. "!!int abc") or absurd nesting.
        raise ConfigError(f"{source}: a value cannot be read ({type(exc).__name__}); fix the YAML") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        why = f": {exc.problem}" if isinstance(getattr(exc, "problem", None), str) else ""
        raise ConfigError(f"{source}: malformed YAML{where}{why}; fix the syntax and retry") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings at the top level, got {type(data).__name__}")
    return data
