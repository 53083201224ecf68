"""A damaged memory store is refused when a command opens it, before any work is spent; an answer
whose recording fails is still printed; `sirag memory backup` makes a copy to restore from.

Through the real CLI with the fakes (hash embedder, scripted generator); where the generator must
be watched, a stdlib OpenAI-compatible server on 127.0.0.1 stands in for it.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import write_corpus
from tests.reliability.reliability_kit import memory_count, run_cli, start_cli

QUESTIONS = ("Who built the lighthouse?", "When did the Greyling strike the rocks?", "What does Mrs. Alder sell?")
REPLY = "The lighthouse was built in 1852 by Clara Venn [1]."


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """An index of the test corpus and a memory store holding an outcome per question."""
    world = tmp_path_factory.mktemp("recorded")
    assert run_cli(world, ["ingest", str(write_corpus(world / "docs"))], cwd=world).returncode == 0
    for question in QUESTIONS:
        r = run_cli(world, ["ask", question], cwd=world)
        assert r.returncode == 0, r.stderr
    return world


def _copy_world(recorded: Path, tmp_path: Path) -> Path:
    """The recorded world's index and a copy of its store under ``tmp_path`` (each test works on its own copy)."""
    (tmp_path / "index").symlink_to(recorded / "index", target_is_directory=True)
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.db").write_bytes((recorded / "memory" / "memory.db").read_bytes())
    return tmp_path / "memory" / "memory.db"


def _damage(db: Path) -> None:
    """Zero one page in the middle of the store (an index's, which most reads never touch), and check
    that SQLite's own check finds it."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'idx_outcomes_created'").fetchone()[0]
    conn.close()
    assert 2 < page < pages and not Path(f"{db}-wal").exists()  # every page is in the file itself
    with db.open("r+b") as fh:
        fh.seek(page_size * (page - 1))
        fh.write(bytes(page_size))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    finally:
        conn.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    return errors[0]


class FakeServer:
    """An OpenAI-compatible chat endpoint that answers REPLY, counts the requests, and runs
    ``on_request`` (if set) before each reply."""

    def __init__(self) -> None:
        self.requests = 0
        self.on_request = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                fake.requests += 1
                if fake.on_request is not None:
                    fake.on_request()
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": REPLY},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 40, "completion_tokens": 12}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def settings(self) -> tuple[str, ...]:
        return ("generator.backend=openai", f"generator.base_url=http://127.0.0.1:{self.server.server_address[1]}/v1")


@pytest.fixture
def server():
    fake = FakeServer()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(5)


def _no_log_file(server: FakeServer, tmp_path: Path) -> tuple[str, ...]:
    """The server's settings, and a log folder that cannot be made (under a file): the log goes to
    stderr only, since a log file could not grow either once the file size limit is set."""
    (tmp_path / "not-a-folder").write_text("", encoding="utf-8")
    return (*server.settings, f"paths.log_dir={tmp_path / 'not-a-folder' / 'logs'}")


COMMANDS = {
    "memory-stats": ["memory", "stats"],
    "memory-search": ["memory", "search", "lighthouse"],
    "memory-export": ["memory", "export", "--json"],
    "memory-report": ["memory", "report", "--html", "report.html"],
    "memory-backup": ["memory", "backup", "copy.db"],
    "memory-merge": ["memory", "merge", "shard.db"],
    "feedback": ["feedback", "{oid}", "--correct"],
    "calibrate": ["calibrate", "--dry-run"],
    "ask": ["ask", "Who built the lighthouse?"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_refuses_a_damaged_store_with_the_way_out(recorded, tmp_path, server, name) -> None:
    db = _copy_world(recorded, tmp_path)
    oid = json.loads(run_cli(tmp_path, ["memory", "export", "--json"], cwd=tmp_path).stdout)[0]["id"]
    (tmp_path / "shard.db").write_bytes(db.read_bytes())  # a sound store to merge into the damaged one
    _damage(db)
    before = _sha(db)
    argv = [word.format(oid=oid) for word in COMMANDS[name]]
    r = run_cli(tmp_path, argv, cwd=tmp_path, extra=server.settings)
    assert r.returncode == 2
    line = _one_error(r.stderr)
    assert "is damaged" in line and "backup" in line and f"sqlite3 {db} .recover | sqlite3 fixed.db" in line, line
    assert _sha(db) == before
    assert server.requests == 0  # ask stopped before asking the model anything
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "copy.db").exists()


def test_a_damaged_store_is_not_merged_into_a_sound_one(recorded, tmp_path) -> None:
    db = _copy_world(recorded, tmp_path)
    shard = tmp_path / "shard.db"
    shard.write_bytes(db.read_bytes())
    _damage(shard)
    before = _sha(db)
    r = run_cli(tmp_path, ["memory", "merge", str(shard)], cwd=tmp_path)
    assert r.returncode == 2
    line = _one_error(r.stderr)
    assert f"cannot merge {shard}: it is damaged" in line and f"sqlite3 {shard} .recover" in line, line
    assert _sha(db) == before


def test_ask_checks_the_store_before_loading_the_model(recorded, tmp_path) -> None:
    db = _copy_world(recorded, tmp_path)
    _damage(db)
    r = run_cli(tmp_path, ["ask", "Who built the lighthouse?"], cwd=tmp_path,
                extra=("generator.backend=llama_cpp", f"generator.model={tmp_path / 'absent.gguf'}"))
    assert r.returncode == 2
    line = _one_error(r.stderr)
    assert "is damaged" in line and "absent.gguf" not in line, line


def test_an_answer_memory_cannot_record_is_still_printed(recorded, tmp_path, server) -> None:
    """The store is sound when ask opens it; once the model was asked, no file of the process may
    grow (a full disk, as far as SQLite can tell): recording the answer fails."""
    db = _copy_world(recorded, tmp_path)
    outcomes = memory_count(db, "SELECT count(*) FROM outcomes")
    proc = start_cli(tmp_path, ["ask", "--no-retry", "Who built the lighthouse?"], cwd=tmp_path,
                     extra=_no_log_file(server, tmp_path))
    server.on_request = lambda: resource.prlimit(proc.pid, resource.RLIMIT_FSIZE,
                                                 (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    out, err = proc.communicate(timeout=120)
    assert server.requests == 1
    assert proc.returncode == 2
    assert "Clara Venn" in out, (out, err)
    line = _one_error(err)
    assert "the answer was not recorded in memory" in line, line
    assert memory_count(db, "SELECT count(*) FROM outcomes") == outcomes


def test_an_answer_memory_cannot_record_is_still_printed_as_json(recorded, tmp_path, server) -> None:
    db = _copy_world(recorded, tmp_path)
    proc = start_cli(tmp_path, ["ask", "--no-retry", "--json", "Who built the lighthouse?"], cwd=tmp_path,
                     extra=_no_log_file(server, tmp_path))
    server.on_request = lambda: resource.prlimit(proc.pid, resource.RLIMIT_FSIZE,
                                                 (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    answer = json.loads(out)
    assert "Clara Venn" in answer["answer"] and answer["outcome_id"] is None
    assert "not recorded" in _one_error(err)
    assert db.exists()


def test_memory_backup_copies_the_store_and_never_overwrites_without_force(recorded, tmp_path) -> None:
    db = _copy_world(recorded, tmp_path)
    r = run_cli(tmp_path, ["memory", "backup", "backups/copy.db"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    copy = tmp_path / "backups" / "copy.db"
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == len(QUESTIONS)
    assert not Path(f"{copy}-wal").exists()  # one self-contained file
    r = run_cli(tmp_path, ["memory", "stats", "--json", "--memory", str(copy)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # An existing file is kept unless --force.
    r = run_cli(tmp_path, ["memory", "backup", str(copy)], cwd=tmp_path)
    assert r.returncode == 2 and "--force" in _one_error(r.stderr)
    run_cli(tmp_path, ["ask", "Who kept the light?"], cwd=tmp_path)
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == len(QUESTIONS)
    r = run_cli(tmp_path, ["memory", "backup", str(copy), "--force"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert memory_count(copy, "SELECT count(*) FROM outcomes") == memory_count(db, "SELECT count(*) FROM outcomes")
    # Never onto the store itself, and --help shows how it is used.
    r = run_cli(tmp_path, ["memory", "backup", str(db), "--force"], cwd=tmp_path)
    assert r.returncode == 2 and "memory database itself" in _one_error(r.stderr)
    r = run_cli(tmp_path, ["memory", "--help"], cwd=tmp_path)
    assert "sirag memory backup backups/" in r.stdout and "--force" in r.stdout
