"""What is read from disk or typed by a user is parsed as data, never run as code: no pickle,
YAML without python tags, SQL with bound parameters, models without remote code."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import self_improving_rag
from tests.conftest import write_corpus
from tests.reliability.reliability_kit import memory_fingerprint, replies, run_cli

PACKAGE = Path(self_improving_rag.__file__).resolve().parent
QUESTION = "Who built the lighthouse of Marrow Point?"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("safe")
    write_corpus(root / "docs")
    assert run_cli(root, ["ingest", "docs"], cwd=root).returncode == 0
    done = run_cli(root, ["ask", QUESTION], cwd=root, extra=[replies("Clara Venn built it [1].")])
    assert done.returncode == 0, done.stderr
    return root


class _Payload:
    """Pickles to a call of os.system: loading it with pickle would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_index_files_are_plain_formats(world: Path) -> None:
    import faiss

    index = world / "index"
    gen = index / (index / "CURRENT").read_text(encoding="utf-8").strip()
    seen = set()
    for p in sorted(gen.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        assert not data.startswith(b"\x80"), f"{p.name} looks like a pickle"
        if p.suffix == ".npy":
            np.load(p, allow_pickle=False)
        elif p.suffix == ".json":
            json.loads(data)
        elif p.suffix == ".jsonl":
            [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        elif p.suffix == ".faiss":
            faiss.read_index(str(p))
        else:
            pytest.fail(f"unexpected file in the index: {p.relative_to(gen)}")
        seen.add(p.suffix)
    assert seen == {".npy", ".json", ".jsonl", ".faiss"}
    assert (index / "embeddings.sqlite").read_bytes().startswith(b"SQLite format 3\x00")


def test_planted_pickle_in_the_index_is_never_loaded(world: Path, tmp_path: Path) -> None:
    copy = tmp_path / "index"
    shutil.copytree(world / "index", copy)
    gen = copy / (copy / "CURRENT").read_text(encoding="utf-8").strip()
    marker = tmp_path / "pickle-ran"
    for npy in gen.glob("bm25-*/*.npy"):
        np.save(npy, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    proc = run_cli(world, ["search", QUESTION, "--index", str(copy)], cwd=tmp_path)
    assert proc.returncode != 0
    assert not marker.exists(), "a pickle from the index was executed"


@pytest.mark.parametrize("kind", ["config", "batch"])
def test_yaml_python_tags_are_not_constructed(world: Path, tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "yaml-ran"
    evil = f'!!python/object/apply:os.system ["touch {marker}"]'
    if kind == "config":
        (tmp_path / "evil.yaml").write_text(f"strategy:\n  top_k: {evil}\n", encoding="utf-8")
        argv = ["ask", QUESTION, "--config", "evil.yaml"]
    else:
        (tmp_path / "evil.yaml").write_text(f"name: {evil}\nquestions:\n  inline: [{{question: hi}}]\n",
                                            encoding="utf-8")
        argv = ["batch", "evil.yaml"]
    proc = run_cli(world, argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and "evil.yaml" in proc.stderr
    assert not marker.exists(), "YAML constructed a python object"


@pytest.mark.parametrize("argv", [
    ["memory", "search", '"; DROP TABLE outcomes; --'],
    ["memory", "search", "lighthouse OR 1=1) UNION SELECT name FROM sqlite_master --"],
    ["memory", "search", 'NEAR("x" "y") * ^ " \''],
    ["memory", "show", "abcdef' OR '1'='1"],
    ["feedback", "abcdef' OR 1=1; DELETE FROM outcomes; --", "--wrong"],
])
def test_sql_text_from_users_is_data(world: Path, tmp_path: Path, argv: list[str]) -> None:
    db = world / "memory" / "memory.db"
    before = memory_fingerprint(db)
    proc = run_cli(world, argv, cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert proc.stderr.startswith("error: no outcome"), proc.stderr
    assert memory_fingerprint(db) == before
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0] == 1
    finally:
        conn.close()


# Calls that would run code from a file or a model repository.
_FORBIDDEN = {
    r"\byaml\.(?:load|full_load|unsafe_load|load_all|full_load_all|unsafe_load_all)\(": "YAML without safe_load",
    r"\bimport pickle\b|\bpickle\.|\bcloudpickle\b|\bdill\b|\bjoblib\b|\bshelve\b|\bmarshal\.": "pickle-like loaders",
    r"\btorch\.load\(": "torch.load (pickle)",
    r"allow_pickle\s*=\s*True": "numpy/bm25s allow_pickle=True",
    r"trust_remote_code\s*=\s*True": "models with remote code",
    r"(?<![\w.])eval\(|(?<![\w.])exec\(": "eval/exec",
}


def test_package_source_has_no_unsafe_loaders() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern, what in _FORBIDDEN.items():
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {what}")
    assert not found, "\n".join(found)


def test_model_loaders_stay_local_and_without_remote_code() -> None:
    """Every Hugging Face model load passes local_files_only=True and never trust_remote_code=True."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\b(SentenceTransformer|CrossEncoder|AutoModel\w*|AutoTokenizer)(?:\.from_pretrained)?\(",
                             text):
            depth, i = 0, m.end() - 1
            while True:  # the call's full argument list, across lines
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                if depth == 0:
                    break
                i += 1
            calls.append((path.name, text[m.start():i + 1]))
    assert calls, "no model loader found: the pattern is out of date"
    for name, call in calls:
        assert "local_files_only=True" in call, f"{name}: {call}"
        assert "trust_remote_code=True" not in call, f"{name}: {call}"
