"""Helpers for the reliability tests: run the real CLI in a subprocess and fingerprint what
it must not change (the index generation, the memory rows).

A plain module, not a conftest, so the test files import it by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import yaml

from tests.conftest import fake_overrides, write_corpus

SIRAG = (sys.executable, "-m", "self_improving_rag.cli")
# Files an index directory may gain or lose without the index changing: the embedding
# cache (queries are cached there) and the ingest lock file.
_INDEX_SCRATCH = ("embeddings.sqlite", "ingest.lock")
MEMORY_TABLES = ("questions", "outcomes", "attempts", "feedback", "calibration_fits", "_sqlite_migrations")


def env() -> dict[str, str]:
    """The environment of a CLI subprocess: offline, no debug tracebacks, unbuffered."""
    out = dict(os.environ)
    out.pop("SIRAG_DEBUG", None)
    out.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return out


def set_args(overrides: Sequence[str]) -> list[str]:
    """``--set`` flags for each override."""
    out: list[str] = []
    for item in overrides:
        out += ["--set", item]
    return out


def cli_argv(world: Path, argv: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """Command line: the subcommand words first, then the fake settings, then ``extra`` overrides
    (later ``--set`` flags win, so ``extra`` can replace a fake setting)."""
    return [*SIRAG, *argv, *set_args(fake_overrides(world)), *set_args(extra)]


def run_cli(world: Path, argv: Sequence[str], *, cwd: Path, extra: Sequence[str] = (), stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``sirag ARGV`` with the fakes of ``world`` and return the finished process."""
    return subprocess.run(cli_argv(world, argv, extra), cwd=cwd, env=env(), input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def start_cli(world: Path, argv: Sequence[str], *, cwd: Path, extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start ``sirag ARGV`` in the background (stdout and stderr piped)."""
    return subprocess.Popen(cli_argv(world, argv, extra), cwd=cwd, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and the child inherits that; the
    # tests send SIGINT as a user's Ctrl-C would, so the CLI must start with the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def replies(*texts: str) -> str:
    """A ``generator.replies=[...]`` override for the scripted generator."""
    return "generator.replies=" + json.dumps(list(texts))


def index_fingerprint(index_dir: Path) -> dict[str, str]:
    """sha256 of every file that makes up the index (CURRENT and the generation folders)."""
    out: dict[str, str] = {}
    if not index_dir.exists():
        return out
    for p in sorted(index_dir.rglob("*")):
        rel = p.relative_to(index_dir).as_posix()
        if p.is_file() and not rel.split("/")[0].startswith(_INDEX_SCRATCH):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def memory_fingerprint(db: Path) -> dict[str, object]:
    """Row count and a digest of the rows of every memory table (missing tables are skipped)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out: dict[str, object] = {}
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in MEMORY_TABLES:
            if table in tables:
                rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()  # names are constants
                out[table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out
    finally:
        conn.close()


def memory_count(db: Path, sql: str, params: tuple = ()) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


def result_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def wait_for(predicate, timeout: float, what: str, poll: float = 0.005) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def assert_one_line_error(proc: subprocess.CompletedProcess | tuple[int, str], *keywords: str) -> str:
    """Non-zero exit, stderr exactly one line starting with 'error:' that names the problem."""
    code, err = (proc.returncode, proc.stderr) if isinstance(proc, subprocess.CompletedProcess) else proc
    assert code != 0, f"exit code 0 for a bad input; stderr: {err!r}"
    assert "Traceback" not in err, f"traceback on stderr:\n{err}"
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, f"stderr is {len(lines)} lines, not one:\n{err}"
    line = lines[0]
    assert line.startswith("error:"), f"stderr does not start with 'error:': {line!r}"
    for kw in keywords:
        assert kw.lower() in line.lower(), f"the message does not name the problem ({kw!r}): {line!r}"
    return line


def ingest_test_corpus(world: Path) -> Path:
    """``world`` with the test corpus written to world/docs and ingested into world/index."""
    write_corpus(world / "docs")
    proc = run_cli(world, ["ingest", "docs"], cwd=world)
    assert proc.returncode == 0, proc.stderr
    return world


def write_batch(root: Path, n: int, name: str) -> Path:
    """A batch file ``name`` of ``n`` distinct inline questions over the index already built in ``root``."""
    places = ["lighthouse", "market", "orchard", "harbour", "storm", "mill"]
    items = [{"id": f"q{i:04d}", "question": f"Who is named in the story of the {places[i % len(places)]}, case {i}?",
              "answers": ["Clara Venn"]} for i in range(n)]
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "index": "index", "output_dir": "runs",
                                    "questions": {"inline": items}}), encoding="utf-8")
    return path
