"""Loading the configuration: the packaged defaults < the user files < ``--set`` overrides,
validated together, an error naming the layers that set the keys at fault. Loading has no side
effects: no directories are created, nothing is seeded."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ConfigError
from .models import Config
from .overrides import _merge, parse_override
from .removed import drop_removed
from .yaml_text import default_config_text, read_yaml


def _describe(exc: ValidationError, source: str) -> str:
    msgs = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            msgs.append(f"unknown key '{loc}'")
        else:
            msgs.append(f"'{loc}': {err['msg']} (got {err.get('input')!r})")
    more = f" and {len(exc.errors()) - 3} more" if len(exc.errors()) > 3 else ""
    packaged = resources.files("self_improving_rag").joinpath("configs/default.yaml")
    return f"{source}: " + "; ".join(msgs) + more + f"; see {packaged} for valid keys and values"


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    """Validate a settings mapping, naming the bad key and its source on failure. A removed
    setting (:data:`REMOVED_KEYS`) is dropped with a warning."""
    data = drop_removed(data, source)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


#: A configuration file is a few kilobytes; past this, --config was given the wrong file.
_CONFIG_MAX_BYTES = 1_000_000


def load_config(path: str | Path | list[str | Path] | tuple[str | Path, ...] | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load the packaged defaults, then the user file(s) in order (a later file's keys win), then
    ``--set`` overrides."""
    data = read_yaml(default_config_text(), "packaged configs/default.yaml")
    origin: dict[tuple[str, ...], str] = {}  # each key path set by a user layer -> that layer
    layers: list[str] = []  # the user layers, in order
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    for p in map(Path, paths):
        if p.is_dir():
            raise ConfigError(f"--config {p} is a folder; pass a YAML file, e.g. configs/default.yaml")
        if not p.exists():
            raise ConfigError(f"config file {p} not found; pass an existing YAML file to --config")
        # Not only regular files: `--config /dev/null` (no user settings) and `--config <(...)`
        # (a pipe) are read too, up to a size no configuration reaches.
        try:
            with open(p, "rb") as fh:
                raw = fh.read(_CONFIG_MAX_BYTES + 1)
            if len(raw) > _CONFIG_MAX_BYTES:
                raise ConfigError(f"config file {p} is over {_CONFIG_MAX_BYTES // 1_000_000} MB; pass a YAML "
                                  "configuration file to --config")
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {p} cannot be read ({exc}); check its permissions and encoding") from exc
        user = drop_removed(read_yaml(text, str(p)), str(p))
        data = _merge(data, user)
        _record_origin(origin, user, str(p))
        layers.append(str(p))
    for item in overrides:
        tree = drop_removed(parse_override(item), f"--set {item}")
        data = _merge(data, tree)
        _record_origin(origin, tree, f"--set {item}")
        layers.append(f"--set {item}")
    # Only the result is validated (a later layer may mend what an earlier one left invalid, e.g.
    # a smaller size, then a smaller overlap); an error names the layers that set the keys at fault.
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, _sources(exc, origin, layers))) from exc


def _record_origin(origin: dict[tuple[str, ...], str], tree: dict[str, Any], source: str,
                   prefix: tuple[str, ...] = ()) -> None:
    """Note ``source`` as the layer that set each leaf key of ``tree`` (the last one wins)."""
    for key, value in tree.items():
        path = (*prefix, str(key))
        for held in [k for k in origin if len(k) < len(path) and path[:len(k)] == k]:
            del origin[held]  # a value set under a key that held a plain value replaces that value
        if isinstance(value, dict) and len(path) < 16:  # no setting is nested deeper (YAML can loop)
            _record_origin(origin, value, source, path)  # an empty mapping merged in changes nothing
        else:
            for held in [k for k in origin if k[:len(path)] == path]:
                del origin[held]  # a value that is not a mapping replaces all keys below it
            origin[path] = source


def _sources(exc: ValidationError, origin: dict[tuple[str, ...], str], layers: list[str]) -> str:
    """The layers (files, --set items) that set the keys the validation errors are about: the
    key itself, or the keys under a section a section-wide check refused; else every user layer
    (a key they hold as an empty mapping, say), and the packaged defaults when there is none."""
    found: list[str] = []
    for err in exc.errors()[:3]:
        loc = tuple(str(p) for p in err["loc"])
        for path, source in origin.items():
            if (path[:len(loc)] == loc or loc[:len(path)] == path) and source not in found:
                found.append(source)
    if not found:
        found = list(dict.fromkeys(layers))
    return ", ".join(found) if found else "packaged configs/default.yaml"


def to_yaml(config: Config) -> str:
    """Resolved configuration as YAML (written beside batch results)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
