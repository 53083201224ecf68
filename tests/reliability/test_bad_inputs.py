"""Bad inputs through the real CLI: each gives a non-zero exit, one ``error:`` line on stderr
that names the problem, no traceback, and leaves the existing index and memory unchanged."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import fake_overrides, write_corpus
from tests.reliability.reliability_kit import (assert_one_line_error, env, index_fingerprint, memory_fingerprint,
                                               replies, run_cli, set_args)

QUESTION = "Who built the lighthouse of Marrow Point?"
INLINE = "questions:\n  inline: [{question: hi}]\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A folder with a corpus, its index and a memory store holding one outcome (built once)."""
    root = tmp_path_factory.mktemp("world")
    write_corpus(root / "docs")
    done = run_cli(root, ["ingest", "docs"], cwd=root)
    assert done.returncode == 0, done.stderr
    done = run_cli(root, ["ask", QUESTION], cwd=root, extra=[replies("Clara Venn built it [1].")])
    assert done.returncode == 0, done.stderr
    assert (root / "memory" / "memory.db").is_file()
    return root


# -- case files -------------------------------------------------------------------------------

def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def _undecodable() -> bytes:
    # High bytes only, no NUL and no control bytes: not UTF-8 and no code page reads it sensibly.
    rng = random.Random(7)
    return bytes(rng.choice([0x81, 0x8D, 0x8F, 0x90, 0x9D, 0xC0, 0xC1, 0xF5, 0xFE, 0xFF, 0x80, 0x98])
                 for _ in range(3000))


def _copy_memory(world: Path, dest: Path) -> Path:
    """A consistent copy of the world's memory store (through SQLite's backup, WAL included)."""
    src = sqlite3.connect(world / "memory" / "memory.db")
    dst = sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return dest


def _future_memory(world: Path, d: Path) -> Path:
    db = _copy_memory(world, d / "future.db")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
                     ("sirag", "m999_from_a_newer_sirag", "2099-01-01 00:00:00+00:00"))
    conn.close()
    return db


def _batch(d: Path, text: str, name: str = "batch.yaml") -> str:
    _write(d / name, text)
    return name


def _jsonl_batch(d: Path) -> str:
    _write(d / "qa.jsonl", '{"id": "a", "question": "Who built it?", "answers": ["Clara Venn"]}\n'
                           '{"id": "b", "question": \n')
    return _batch(d, "name: b\nquestions:\n  file: qa.jsonl\n")


def _damaged_index(w: Path, d: Path, how: str) -> list[str]:
    """A copy of the world's index with one file of the live generation damaged."""
    index = d / "index"
    shutil.copytree(w / "index", index)
    gen = index / (index / "CURRENT").read_text(encoding="utf-8").strip()
    if how == "truncated-faiss":
        dense = gen / "dense-section.faiss"
        dense.write_bytes(dense.read_bytes()[:100])
    elif how == "missing-faiss":
        (gen / "dense-section.faiss").unlink()
    elif how == "malformed-chunks":
        with (gen / "chunks-section.jsonl").open("a", encoding="utf-8") as fh:
            fh.write('{"chunk_id": "broken\n')
    elif how == "object-npy":
        import numpy as np

        np.save(next((gen / "bm25-section").glob("*.npy")), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return ["search", QUESTION, "--index", str(index), "--chunker", "section"]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Case:
    """One bad input: argv built in the case folder, the words the error must contain."""

    argv: Callable[[Path, Path], list[str]]  # (case folder, world) -> argv after `sirag`
    keywords: tuple[str, ...]
    extra: tuple[str, ...] = ()
    stdin: str | None = None
    watch: Callable[[Path, Path], list[Path]] = field(default=lambda d, w: [])  # more files that must not change


CASES: dict[str, Case] = {
    # -- ingest ---------------------------------------------------------------------------------
    "ingest-empty-file": Case(lambda d, w: ["ingest", str(_write(d / "empty.txt", b""))], ("empty",)),
    "ingest-whitespace-file": Case(lambda d, w: ["ingest", str(_write(d / "blank.md", " \n\t\n  \n"))],
                                   ("whitespace",)),
    "ingest-binary-file": Case(
        lambda d, w: ["ingest", str(_write(d / "picture.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 40))],
        ("binary",)),
    "ingest-undecodable-bytes": Case(lambda d, w: ["ingest", str(_write(d / "latin.txt", _undecodable()))],
                                     ("utf-8",)),
    "ingest-file-over-size-limit": Case(
        lambda d, w: ["ingest", str(_write(d / "big.txt", "lighthouse keeper " * 400))],
        ("larger than the limit", "ingestion.max_file_mb"), extra=("ingestion.max_file_mb=0.001",)),
    "ingest-nonexistent-path": Case(lambda d, w: ["ingest", str(d / "no-such-file.txt")], ("no such file",)),
    "ingest-unsupported-type": Case(lambda d, w: ["ingest", str(_write(d / "notes.docx", "PK fake"))],
                                    ("unsupported file type",)),
    "ingest-empty-directory": Case(lambda d, w: ["ingest", str(_mkdir(d / "empty-dir"))], ("no .txt",)),
    "ingest-missing-directory": Case(lambda d, w: ["ingest", str(d / "missing-dir") + "/"],
                                     ("no such file or folder",)),
    # -- questions --------------------------------------------------------------------------------
    "ask-empty-question": Case(lambda d, w: ["ask", ""], ("empty",)),
    "ask-whitespace-question": Case(lambda d, w: ["ask", "  \t \n  "], ("empty",)),
    "ask-empty-stdin": Case(lambda d, w: ["ask", "-"], ("empty",), stdin=""),
    "ask-100kb-question": Case(lambda d, w: ["ask", "lighthouse " * 9_310], ("characters", "shorten")),
    "ask-punctuation-only": Case(lambda d, w: ["ask", "?!... ;: -- ?"], ("no letters or digits",)),
    "search-empty-question": Case(lambda d, w: ["search", " "], ("empty",)),
    "ask-without-index": Case(lambda d, w: ["ask", QUESTION, "--index", str(d / "no-index")], ("no index", "ingest")),
    # -- configuration ----------------------------------------------------------------------------
    "config-malformed-yaml": Case(
        lambda d, w: ["ask", QUESTION, "--config", str(_write(d / "broken.yaml", "strategy:\n  top_k: [4\n"))],
        ("broken.yaml", "malformed yaml")),
    "config-unknown-key": Case(
        lambda d, w: ["ask", QUESTION, "--config", str(_write(d / "typo.yaml", "strategy:\n  topk: 3\n"))],
        ("typo.yaml", "unknown key", "strategy.topk")),
    "config-wrong-type": Case(
        lambda d, w: ["ask", QUESTION, "--config", str(_write(d / "wrong.yaml", "strategy:\n  top_k: many\n"))],
        ("wrong.yaml", "strategy.top_k", "integer")),
    "config-not-a-mapping": Case(
        lambda d, w: ["ask", QUESTION, "--config", str(_write(d / "list.yaml", "- strategy\n- top_k\n"))],
        ("list.yaml", "mapping")),
    "config-file-missing": Case(lambda d, w: ["ask", QUESTION, "--config", str(d / "absent.yaml")],
                                ("absent.yaml", "not found")),
    "set-out-of-range": Case(lambda d, w: ["ask", QUESTION], ("strategy.top_k", "greater than or equal to 1"),
                             extra=("strategy.top_k=0",)),
    "set-without-equals": Case(lambda d, w: ["ask", QUESTION], ("strategy.top_k", "key=value"),
                               extra=("strategy.top_k",)),
    "set-unknown-key": Case(lambda d, w: ["ask", QUESTION], ("unknown key", "strategy.topk"),
                            extra=("strategy.topk=3",)),
    "set-value-not-yaml": Case(lambda d, w: ["ask", QUESTION], ("not valid yaml",), extra=("strategy.top_k=[4",)),
    # -- models -----------------------------------------------------------------------------------
    "model-unknown-name": Case(lambda d, w: ["ask", QUESTION], ("no-such-model",),
                               extra=("generator.backend=llama_cpp", "generator.model=no-such-model")),
    "model-gguf-not-gguf": Case(lambda d, w: ["ask", QUESTION], ("not a gguf",),
                                extra=("generator.backend=llama_cpp", "generator.model=PLACEHOLDER_GGUF")),
    "model-gguf-missing": Case(lambda d, w: ["ask", QUESTION], ("does not exist",),
                               extra=("generator.backend=llama_cpp", "generator.model=PLACEHOLDER_MISSING")),
    # -- memory -----------------------------------------------------------------------------------
    "memory-corrupt-db-stats": Case(
        lambda d, w: ["memory", "stats", "--memory", str(_write(d / "corrupt.db", random.Random(3).randbytes(8192)))],
        ("corrupt",), watch=lambda d, w: [d / "corrupt.db"]),
    "memory-corrupt-db-ask": Case(
        lambda d, w: ["ask", QUESTION, "--memory",
                      str(_write(d / "corrupt.db", b"SQLite format 3\x00" + random.Random(4).randbytes(4096)))],
        ("corrupt",), watch=lambda d, w: [d / "corrupt.db"]),
    "memory-newer-schema-stats": Case(lambda d, w: ["memory", "stats", "--memory", str(_future_memory(w, d))],
                                      ("newer version", "m999_from_a_newer_sirag"),
                                      watch=lambda d, w: [d / "future.db"]),
    "memory-newer-schema-ask": Case(lambda d, w: ["ask", QUESTION, "--memory", str(_future_memory(w, d))],
                                    ("newer version", "m999_from_a_newer_sirag"),
                                    watch=lambda d, w: [d / "future.db"]),
    "memory-show-unknown-id": Case(lambda d, w: ["memory", "show", "0123456789abcdef"],
                                   ("no outcome", "0123456789abcdef")),
    "memory-show-db-is-a-folder": Case(lambda d, w: ["memory", "show", "abcdef", "--memory",
                                                     str(_mkdir(d / "a-folder"))],
                                       ("a-folder",)),
    "memory-show-short-id": Case(lambda d, w: ["memory", "show", "zz"], ("zz", "6")),
    "memory-db-is-a-folder": Case(lambda d, w: ["ask", QUESTION, "--memory", str(_mkdir(d / "memdir"))], ("memdir",)),
    "ingest-index-dir-is-a-file": Case(
        lambda d, w: ["ingest", "--index", str(_write(d / "not-a-folder", "x")), str(w / "docs")], ("not-a-folder",)),
    # -- index built with other settings -------------------------------------------------------
    "index-other-embedder": Case(lambda d, w: ["ask", QUESTION], ("hash-64", "hash-32", "--rebuild"),
                                 extra=("embedder.name=hash-32",)),
    "index-other-chunker-params": Case(lambda d, w: ["ask", QUESTION], ("section", "--rebuild"),
                                       extra=("ingestion.section.max_tokens=100",)),
    "search-other-chunker-params": Case(lambda d, w: ["search", QUESTION, "--chunker", "fixed"], ("fixed", "--rebuild"),
                                        extra=("ingestion.fixed.size=50",)),
    # -- batch files ------------------------------------------------------------------------------
    "batch-malformed-yaml": Case(lambda d, w: ["batch", _batch(d, "name: b\nquestions: [oops\n")],
                                 ("batch.yaml", "malformed yaml")),
    "batch-unknown-key": Case(lambda d, w: ["batch", _batch(d, f"name: b\n{INLINE}bogus: 1\n")],
                              ("unknown key", "bogus")),
    "batch-missing-questions": Case(lambda d, w: ["batch", _batch(d, "name: b\ncorpus: [docs]\n")], ("questions",)),
    "batch-empty-questions": Case(lambda d, w: ["batch", _batch(d, "name: b\nquestions: {}\n")], ("questions",)),
    "batch-questions-file-missing": Case(
        lambda d, w: ["batch", _batch(d, "name: b\nquestions:\n  file: missing.jsonl\n")],
        ("missing.jsonl", "no such file")),
    "batch-jsonl-malformed-line": Case(lambda d, w: ["batch", _jsonl_batch(d)], ("qa.jsonl", "line 2")),
    "batch-file-missing": Case(lambda d, w: ["batch", "no-such-batch.yaml"], ("no-such-batch.yaml", "not found")),
    "batch-not-a-mapping": Case(lambda d, w: ["batch", _batch(d, "- one\n- two\n")], ("mapping",)),
    "batch-inline-without-question": Case(
        lambda d, w: ["batch", _batch(d, "name: b\nquestions:\n  inline: [{id: x}]\n")],
                                          ("question",)),
    "batch-bad-name": Case(lambda d, w: ["batch", _batch(d, f"name: ../escape\n{INLINE}")],
                           ("name",)),
    "batch-override-unknown-key": Case(
        lambda d, w: ["batch", _batch(d, "name: b\nquestions:\n  inline: [{question: hi}]\n"
                                         "overrides: {strategy.topk: 3}\n")], ("unknown key", "strategy.topk")),
    "batch-empty-grid": Case(
        lambda d, w: ["batch", _batch(d, f"name: b\n{INLINE}grid: {{strategy.top_k: []}}\n")],
        ("grid", "strategy.top_k")),
}


# Known bugs: each case fails today and is reported; strict, so a fix makes the suite say so.
BUGS: dict[str, Case] = {
    "set-yaml-tag-mismatch": Case(lambda d, w: ["ask", QUESTION], ("strategy.top_k",),
                                  extra=("strategy.top_k=!!int many",)),
    "config-yaml-tag-mismatch": Case(
        lambda d, w: ["ask", QUESTION, "--config", str(_write(d / "tagged.yaml", "strategy:\n  top_k: !!int many\n"))],
        ("tagged.yaml",)),
    "batch-yaml-tag-mismatch": Case(
        lambda d, w: ["batch", _batch(d, "name: b\nlimit: !!int many\nquestions:\n  inline: [{question: hi}]\n")],
        ("batch.yaml",)),
    "batch-yaml-latin1": Case(
        lambda d, w: ["batch", str(_write(d / "latin.yaml", "name: caf\xe9\nquestions:\n  inline: [{question: hi}]\n"
                                          .encode("latin-1")))],
        ("latin.yaml", "not UTF-8"), watch=lambda d, w: [d / "latin.yaml"]),
    "memory-export-onto-the-store": Case(
        lambda d, w: ["memory", "export", "--json-file", str(w / "memory" / "memory.db")], ("memory database itself",)),
    "memory-report-under-a-file": Case(
        lambda d, w: ["memory", "report", "--html", str(_write(d / "plain.txt", "x") / "r.html")],
        ("plain.txt", "is a file, not a folder"), watch=lambda d, w: [d / "plain.txt"]),
    "stats-png-not-png": Case(lambda d, w: ["stats", "--png", str(d / "hist.txt")], ("ending in .png", "hist.txt")),
    "set-deeply-nested-value": Case(lambda d, w: ["ask", QUESTION], ("strategy.top_k",),
                                    extra=("strategy.top_k=" + "[" * 1000 + "]" * 1000,)),
    "ingest-infinite-size-limit": Case(lambda d, w: ["ingest", str(w / "docs"), "--index", str(d / "idx")],
                                       ("max_file_mb",), extra=("ingestion.max_file_mb=.inf",)),
    "index-truncated-faiss": Case(lambda d, w: _damaged_index(w, d, "truncated-faiss"), ("index",)),
    "index-missing-faiss": Case(lambda d, w: _damaged_index(w, d, "missing-faiss"), ("index",)),
    "index-malformed-chunks": Case(lambda d, w: _damaged_index(w, d, "malformed-chunks"), ("index",)),
    "index-object-npy": Case(lambda d, w: _damaged_index(w, d, "object-npy"), ("index",)),
    "generator-backend-openai-unreachable": Case(
        lambda d, w: ["ask", QUESTION], ("openai",),
        extra=("generator.backend=openai", "generator.base_url=http://127.0.0.1:9/v1", "generator.timeout_s=2")),
}
BUG_REASONS = {
    **{f"index-{k}": "BUG: retrieval/index.py CorpusIndex.load_chunker (lines 208-213: json.loads, "
                     "faiss.read_index, BM25.load) does not translate errors of a damaged generation "
                     "(faiss RuntimeError, json.JSONDecodeError, numpy ValueError "
                     "'Object arrays cannot be loaded when allow_pickle=False'): 'internal error', exit 1. Fix: "
                     "wrap the reads and raise IndexNotFoundError('index ... is damaged (...); rebuild with: "
                     "sirag ingest --rebuild ...')"
       for k in ("truncated-faiss", "missing-faiss", "malformed-chunks", "object-npy")},
    "generator-backend-openai-unreachable": "BUG: config allows generator.backend=openai/transformers but "
                                            "generation/factory.py:23/29 imports modules that do not exist "
                                            "(openai_http, transformers_nf4): ModuleNotFoundError, exit 1, traceback",
    "set-yaml-tag-mismatch": "BUG: config.py parse_override (line 198) catches only yaml.YAMLError; PyYAML raises "
                             "ValueError for '!!int many' (KeyError/IndexError/AttributeError for other tags): exit 1",
    "config-yaml-tag-mismatch": "BUG: config.py _read_yaml (line 167) catches only yaml.YAMLError; a mistyped "
                                "explicit tag raises ValueError: exit 1 and a traceback",
    "batch-yaml-tag-mismatch": "BUG: batch.py load_batch (line 61) catches only (yaml.YAMLError, "
                               "UnicodeDecodeError); a mistyped explicit tag raises ValueError: exit 1",
    "set-deeply-nested-value": "BUG: config.py parse_override (line 198): yaml.safe_load of 1000 nested "
                               "brackets raises RecursionError, not caught: exit 1 and a traceback",
    "ingest-infinite-size-limit": "BUG: IngestionConfig.max_file_mb (config.py) accepts .inf; "
                                  "ingestion/pipeline.py:136 int(max_file_mb * 2**20) raises OverflowError: exit 1",
}


def _params():
    out = [pytest.param(name, case, id=name) for name, case in CASES.items()]
    # Once-known bugs (BUG_REASONS says what they were), kept as regression cases.
    out += [pytest.param(name, case, id=name) for name, case in BUGS.items()]
    return out


def _fill(extra: tuple[str, ...], d: Path) -> list[str]:
    """Case-folder paths inside overrides (a not-GGUF file, a missing one)."""
    fake = d / "model.gguf"
    out = []
    for item in extra:
        if "PLACEHOLDER_GGUF" in item:
            _write(fake, b"this is not a GGUF model, only text pretending to be one\n")
            item = item.replace("PLACEHOLDER_GGUF", str(fake))
        item = item.replace("PLACEHOLDER_MISSING", str(d / "absent-model.gguf"))
        out.append(item)
    return out


@pytest.mark.parametrize(("name", "case"), _params())
def test_bad_input_gives_one_line_and_changes_nothing(name: str, case: Case, world: Path, tmp_path: Path) -> None:
    argv = case.argv(tmp_path, world)
    extra = _fill(case.extra, tmp_path)
    watched = case.watch(tmp_path, world)
    before = (index_fingerprint(world / "index"), memory_fingerprint(world / "memory" / "memory.db"),
              {p: p.read_bytes() for p in watched})
    proc = run_cli(world, argv, cwd=tmp_path, extra=extra, stdin=case.stdin)
    assert_one_line_error(proc, *case.keywords)
    assert proc.returncode == 2, f"known errors exit with 2, got {proc.returncode}"
    after = (index_fingerprint(world / "index"), memory_fingerprint(world / "memory" / "memory.db"),
             {p: p.read_bytes() for p in watched})
    assert after[0] == before[0], "the index changed"
    assert after[1] == before[1], "the memory store changed"
    assert after[2] == before[2], "a file given as input was modified"


def test_world_is_still_usable(world: Path, tmp_path: Path) -> None:
    """After all the bad inputs, the index answers and the memory store counts its outcome."""
    proc = run_cli(world, ["search", QUESTION, "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Clara Venn" in proc.stdout
    proc = run_cli(world, ["memory", "stats", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"outcomes": 1' in proc.stdout


# A crash the CLI does not know: a stand-in command raises, main() must still print one line.
_CRASH = """
import sys
from self_improving_rag.cli import main
from self_improving_rag.cli.common import COMMANDS

def boom(args, config):
    raise RuntimeError("simulated failure deep in a command")

COMMANDS["stats"] = boom
sys.exit(main(sys.argv[1:]))
"""


def _crash(world: Path, cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CRASH, "stats", *flags, *set_args(fake_overrides(world))],
                          cwd=cwd, env=env(), capture_output=True, text=True, timeout=60)


def test_unexpected_error_is_one_line_without_traceback(world: Path, tmp_path: Path) -> None:
    proc = _crash(world, tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("internal error: RuntimeError"), proc.stderr


def test_unexpected_error_shows_traceback_with_debug(world: Path, tmp_path: Path) -> None:
    proc = _crash(world, tmp_path, "--debug")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "simulated failure deep in a command" in proc.stderr
