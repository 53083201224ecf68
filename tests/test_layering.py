"""The package's import layering, read from its source: every ``import`` of every module (also the
ones inside functions), relative imports resolved, grouped by top-level part (a subpackage such
as ``memory`` or a module such as ``engine.py``).

The rules: memory sits below the scoring and the shells; the loop and the feedback never reach up
to a shell (CLI, batch runs, the server); only entry points import the CLI; and the top-level
parts import each other without a cycle, but for the known exceptions listed below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import self_improving_rag

PACKAGE = Path(self_improving_rag.__file__).resolve().parent
ROOT = PACKAGE.name  # "self_improving_rag"

#: What memory may import besides itself: the layers below it.
MEMORY_MAY_IMPORT = frozenset({"confidence", "config", "decision", "errors", "text", "types"})

#: The shells over the library: the CLI, batch and evaluation runs, the HTTP server.
SHELLS = frozenset({"batch", "cli", "serve"})

#: Imports of the CLI from outside it that are allowed: the package root holds the console
#: script's ``entry()``, which starts the CLI.
CLI_IMPORTERS = frozenset({ROOT})

#: Known exceptions, (importing module, imported part): each closes an import cycle between
#: top-level parts or imports the CLI, and none can be removed by moving an import line alone.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    # The ingest pipeline builds the retrieval indexes, while retrieval reads ingestion's
    # sentences and index paths (ingestion <-> retrieval).
    (f"{ROOT}.ingestion.pipeline", "retrieval"): "the ingest pipeline builds the retrieval indexes",
    (f"{ROOT}.ingestion.chunk_vectors", "retrieval"): "the pipeline embeds chunks through retrieval's cache",
    (f"{ROOT}.ingestion.stats", "retrieval"): "index statistics read the retrieval index",
    # The evaluation harness inside evaluation/ (cold-start protocol, retrieval-only eval) uses
    # batch's grading and index checks, while batch scores its runs with evaluation's metrics
    # (evaluation <-> batch).
    (f"{ROOT}.evaluation.coldstart", "batch"): "the cold-start protocol grades with batch.grade",
    (f"{ROOT}.evaluation.retrieval_eval", "batch"): "retrieval-only eval uses batch's index checks and tables",
    # The Ray actors answer a batch's rows with batch's own row function (batch <-> ray_pool).
    (f"{ROOT}.ray_pool", "batch"): "Ray actors run batch._ask_row",
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name, with its file and whether it is a package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


MODULES = _modules()


def _imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of the package by the package.
    ``from a import b`` imports ``a.b`` when that is a module, else ``a``."""
    out = []
    for name, (path, is_package) in MODULES.items():
        package = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package[:len(package) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            else:
                continue
            out += [(name, t, node.lineno) for t in targets if t == ROOT or t.startswith(ROOT + ".")]
    return out


IMPORTS = _imports()


def part(module: str) -> str:
    """The top-level part a module belongs to (``memory`` for ``self_improving_rag.memory.store``);
    the package root is its own part."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _where(importer: str, imported: str, line: int) -> str:
    return f"{MODULES[importer][0].relative_to(PACKAGE.parent)}:{line} imports {imported}"


def _crossing(importing_part: str, forbidden) -> list[str]:
    return [_where(a, b, line) for a, b, line in IMPORTS
            if part(a) == importing_part and part(b) != importing_part and forbidden(part(b))]


def test_the_parts_the_rules_name_exist() -> None:
    """A renamed part would leave its rule checking nothing."""
    parts = {part(m) for m in MODULES}
    assert {"memory", "evaluation", "feedback", "engine", "confidence", *SHELLS} <= parts, sorted(parts)


def test_memory_imports_only_the_layers_below_it() -> None:
    """Memory stores and re-judges attempts; it never imports scoring (evaluation/), the loop or a
    shell. What it needs of the confidence model is in ``confidence.py``."""
    found = _crossing("memory", lambda p: p not in MEMORY_MAY_IMPORT)
    assert not found, "memory imports above its layer:\n" + "\n".join(found)


def test_the_loop_and_the_feedback_import_no_shell() -> None:
    for importing in ("engine", "feedback"):
        found = _crossing(importing, lambda p: p in SHELLS)
        assert not found, f"{importing} imports a shell:\n" + "\n".join(found)


def test_only_entry_points_import_the_cli() -> None:
    found = [_where(a, b, line) for a, b, line in IMPORTS
             if part(b) == "cli" and part(a) != "cli" and a not in CLI_IMPORTERS
             and (a, "cli") not in KNOWN_EXCEPTIONS]
    assert not found, "the CLI is imported outside it:\n" + "\n".join(found)


def _part_graph() -> dict[str, dict[str, tuple[str, str, int]]]:
    """Part -> imported part -> one import that makes the edge, known exceptions and the package
    root left out (the root holds the version every part may read, and the console script's entry)."""
    graph: dict[str, dict[str, tuple[str, str, int]]] = {}
    for a, b, line in IMPORTS:
        pa, pb = part(a), part(b)
        if pa == pb or ROOT in (pa, pb) or (a, pb) in KNOWN_EXCEPTIONS:
            continue
        graph.setdefault(pa, {}).setdefault(pb, (a, b, line))
    return graph


def find_cycle(graph: dict[str, dict]) -> list[str] | None:
    """One cycle of ``graph`` as the list of its nodes (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one() -> None:
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1, "c": 1}, "b": {"c": 1}}) is None


def test_no_import_cycle_between_top_level_parts() -> None:
    graph = _part_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between top-level parts: " + " -> ".join(cycle) + "\n" + "\n".join(
        _where(*graph[a][b]) for a, b in zip(cycle, cycle[1:]))


def test_every_known_exception_is_still_an_import() -> None:
    """An exception whose import is gone would let that import come back unnoticed: remove it."""
    present = {(a, part(b)) for a, b, _ in IMPORTS}
    stale = [f"{a} -> {p}" for a, p in KNOWN_EXCEPTIONS if (a, p) not in present]
    assert not stale, "no longer imported, remove from KNOWN_EXCEPTIONS: " + ", ".join(stale)
