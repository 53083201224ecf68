"""``--set key=value`` overrides: read into nested mappings, merged over the lower layers, and
whether explicit settings pin the first strategy."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from ..errors import ConfigError


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: mappings key by key, any other value replacing the one below."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(item: str) -> dict[str, Any]:
    """Turn ``a.b.c=value`` into ``{"a": {"b": {"c": value}}}``; the value is read as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set strategy.top_k=8")
    key, _, raw = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {item!r}: empty key; use e.g. --set strategy.top_k=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML; quote it") from exc
    text = raw.strip()
    if re.fullmatch(r"[-+]?0[0-9_]+", text) and isinstance(value, int) and value != int(text.replace("_", ""), 10):
        # YAML 1.1 reads 010 as octal 8: a number with a leading zero is taken as written, and the
        # setting's own type reads it ("010" is 10 for a number, "010" for text).
        value = text
    elif "#" in raw and _drops_a_comment(raw, value):
        # YAML reads " #..." as a comment, which would cut a path like "runs/idx #2" short.
        if isinstance(value, str) and text[:1] not in ("'", '"') or not text.split("#", 1)[0].strip():
            value = text  # unquoted text (or text that starts with '#'): taken whole
        else:
            raise ConfigError(f"--set {item!r}: '#' after a space starts a YAML comment, so the value would "
                              "lose its end; quote the value (e.g. --set 'key=\"a #b\"') or leave the comment out")
    tree: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        tree = {part: tree}
    return tree


_HASH_MARK = "\ue000"  # a private-use character standing in for '#' while checking for a comment


def _drops_a_comment(raw: str, value: Any) -> bool:
    """Whether YAML read a comment in ``raw``: with every '#' made an ordinary character, the
    value reads otherwise (a '#' inside quotes, or inside a word, changes nothing)."""
    def unmark(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(_HASH_MARK, "#")
        if isinstance(v, list):
            return [unmark(x) for x in v]
        if isinstance(v, dict):
            return {unmark(k): unmark(x) for k, x in v.items()}
        return v

    try:
        alt = yaml.safe_load(raw.replace("#", _HASH_MARK))
    except (yaml.YAMLError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return True  # the text after '#' does not even parse: YAML took it for a comment
    return unmark(alt) != value


def pins_strategy(items) -> bool:
    """Whether explicit settings (``--set`` items "key=value", or (key, value) pairs of a batch
    file's overrides or a grid point) set a strategy.* key without saying where the first
    strategy comes from (policy.first_from_memory, flat or in a ``policy`` mapping): then it is
    pinned (policy.first_from_memory false), so memory does not replace what was asked for."""
    tree: dict[str, Any] = {}
    for item in items:
        text = f"{item[0]}={json.dumps(item[1])}" if isinstance(item, tuple) else str(item)
        try:
            tree = _merge(tree, parse_override(text))
        except ConfigError:  # load_config names the bad item; its key still counts
            key = text.partition("=")[0].strip()
            if key:
                tree = _merge(tree, {key.split(".")[0]: {}})
    policy = tree.get("policy")
    return "strategy" in tree and not (isinstance(policy, dict) and "first_from_memory" in policy)
