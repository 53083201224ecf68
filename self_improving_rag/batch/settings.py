"""The settings of a batch's runs: the grid's points, the layers each run's config is resolved
from (:func:`resolved_config`), and the index folder the command line names."""

from __future__ import annotations

import argparse
import itertools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..config import Config, _merge, config_from_dict, default_config_text, parse_override, pins_strategy
from ..errors import BatchError, ConfigError

if TYPE_CHECKING:  # spec.py imports this module
    from .spec import BatchSpec


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    if not grid:
        return [{}]
    keys = list(grid)
    for k in keys:
        if not isinstance(grid[k], list) or not grid[k]:
            raise BatchError(f"grid key '{k}' needs a non-empty list of values")
    return [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]


def grid_keys(grid: dict[str, Any]) -> dict[str, list[str]]:
    """The dotted keys each grid key's values set: a mapping value is deep-merged into the
    settings, so ``strategy: [{top_k: 2}]`` varies strategy.top_k, not the whole of strategy."""
    return {g: list(dict.fromkeys(k for v in (values if isinstance(values, list) else [values])
                                  for k in setting_keys(f"{g}={json.dumps(v)}")))
            for g, values in grid.items()}


def setting_keys(item: str) -> list[str]:
    """The dotted keys one ``key=value`` item sets ("strategy={top_k: 6}" sets strategy.top_k)."""
    def flat(tree: Any, prefix: str) -> list[str]:
        if not isinstance(tree, dict) or not tree:
            return [prefix]
        return [k for key, v in tree.items() for k in flat(v, f"{prefix}.{key}" if prefix else str(key))]

    try:
        return flat(parse_override(item), "")
    except ConfigError:  # resolved_config names the bad item
        return []


def check_grid_conflicts(spec: BatchSpec, cli_overrides: tuple[str, ...] | list[str] = (),
                         memory: str | None = None) -> None:
    """A key the grid varies that a --set item also gives: each grid point's value replaces it (the
    grid comes last), so the setting typed on the command line would be silently left unused. (The
    batch file's own overrides: may hold a key its grid varies: both are in one file, in view.)
    ``memory``: the --memory option, which main() appends to ``cli_overrides`` as a paths.memory_db item."""
    if not spec.grid:
        return
    varied = [(k, g) for g, keys in grid_keys(spec.grid).items() for k in keys]
    items = list(cli_overrides)
    from_memory = len(items) if memory is None else max(
        (i for i, item in enumerate(items) if item == f"paths.memory_db={memory}"), default=len(items))
    for i, item in enumerate(items):
        # main() adds policy.first_from_memory=false itself when a --set pins a strategy.* key.
        if item.replace(" ", "") == "policy.first_from_memory=false":
            continue
        for key in setting_keys(item):
            k, g = next(((k, g) for k, g in varied if key == k or key.startswith(k + ".") or k.startswith(key + ".")),
                        (None, None))
            if k is None:
                continue
            grid_key = k if k == g else f"{k} (under {g})"
            flag, drop = ("--memory", "drop --memory") if i == from_memory else ("--set", "drop the --set item")
            raise BatchError(f"batch {spec.name}: {key} is given with {flag}, but the grid varies {k} and each grid "
                             f"point's value would replace it unseen; {drop}, or take {grid_key} out of the batch "
                             "file's grid:")


def resolved_config(base_config: Config, spec: BatchSpec, point: dict[str, Any], index_dir: str,
                    cli_overrides: tuple[str, ...] | list[str] = ()) -> Config:
    """Settings of one run: defaults < --config < the batch file's overrides < --set (the
    command line wins over the file) < the grid point (a grid varies its keys)."""
    data = yaml.safe_load(default_config_text())
    data = _merge(data, base_config.model_dump(mode="json"))
    for k, v in spec.overrides.items():
        data = _merge(data, parse_override(f"{k}={json.dumps(v)}"))
    for item in cli_overrides:
        data = _merge(data, parse_override(item))
    for k, v in point.items():
        data = _merge(data, parse_override(f"{k}={json.dumps(v)}"))
    explicit = [*spec.overrides.items(), *cli_overrides, *point.items()]
    if pins_strategy(explicit):  # a strategy the file or the grid asks for is used, not memory's choice
        data = _merge(data, {"policy": {"first_from_memory": False}})
    data = _merge(data, {"paths": {"index_dir": index_dir}})
    try:
        return config_from_dict(data, f"batch {spec.name}")
    except ConfigError as exc:
        raise BatchError(str(exc)) from exc


def point_label(point: dict[str, Any]) -> str:
    """A grid point as part of a run folder's name: key=value pairs, with any character that could
    leave the output folder or trouble a shell ('/', spaces, quotes, ...) turned into '_'."""
    label = "-".join(f"{k.split('.')[-1]}={v}" for k, v in point.items()) or "default"
    return re.sub(r"[^\w.=,+-]", "_", label).strip(".")[:120] or "point"


def packaged_index() -> str:
    """The packaged default paths.index_dir (index/default), which is not a batch's index."""
    from ..config import PathsConfig

    return PathsConfig.model_fields["index_dir"].default


#: What names a batch's index folder on the command line, as :func:`command_line_index` says it.
SET_INDEX = "--set paths.index_dir"


CONFIG_INDEX = "paths.index_dir of --config"


def command_line_index(args: argparse.Namespace, config: Config) -> tuple[str | None, str | None]:
    """The index folder batch and eval are given from outside the batch file, and what gave it:
    ``--index DIR``; ``--set paths.index_dir=DIR``, which means the same (resolved_config gives
    every run the batch's index folder, so the --set item would otherwise be replaced unseen);
    or, failing both, a --config file's paths.index_dir, which stands in for the batch file's
    ``index:`` when it has none (the packaged default, index/default, is not a batch's index: a
    batch without one keeps its own <output_dir>/<name>/index). (None, None) when none of them.
    --index and a --set naming two different folders are refused: one of them would be dropped."""
    by_set = any(k == "paths.index_dir" for item in args.overrides for k in setting_keys(item))
    if by_set:  # --set comes after --config, so the loaded value is the last --set item's (with ~ expanded)
        value = config.paths.index_dir
        if args.index and Path(args.index).resolve() != Path(value).resolve():
            raise BatchError(f"--index {args.index} and --set paths.index_dir={value} name two different index "
                             "folders, and a batch uses one (for batch and eval, --set paths.index_dir=DIR means "
                             "--index DIR); give the folder once, with --index or with the --set item")
        return (args.index, "--index") if args.index else (value, SET_INDEX)
    if args.index:
        return args.index, "--index"
    default = packaged_index()
    if Path(config.paths.index_dir).resolve() != Path(default).resolve():
        return config.paths.index_dir, CONFIG_INDEX
    return None, None


def with_index(spec: BatchSpec, index: str | None, named_by: str | None) -> tuple[BatchSpec, str | None]:
    """``spec`` with the index folder :func:`command_line_index` found (relative to the current
    folder, like any option), and what named it, for the runs' checks (None when the batch uses its
    own index: a --config file's paths.index_dir gives way to the batch file's index:)."""
    if index is None or (named_by == CONFIG_INDEX and spec.index):
        return spec, None
    return spec.model_copy(update={"index": str(Path(index).resolve())}), named_by
