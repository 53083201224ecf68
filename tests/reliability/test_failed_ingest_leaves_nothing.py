"""An ingest that fails leaves the disk as it found it: no index folder after a failed first ingest,
the old index intact after a failed re-ingest. Through the real CLI, with the fakes."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_corpus
from tests.reliability.reliability_kit import index_fingerprint, run_cli


def _unusable(folder: Path) -> Path:
    """A folder whose every file fails to load: binary bytes named .txt, a page the parser rejects."""
    folder.mkdir(parents=True)
    (folder / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (folder / "rejected.html").write_text("<p>a</p><![bogus[ x ]]>", encoding="utf-8")
    return folder


def _error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def test_a_failed_first_ingest_leaves_no_index_folder(tmp_path: Path) -> None:
    docs = _unusable(tmp_path / "docs")
    index = tmp_path / "indexes" / "mine"  # its parent is made by the ingest too
    r = run_cli(tmp_path, ["ingest", str(docs), "--index", str(index)], cwd=tmp_path)
    assert r.returncode == 2
    assert "no document could be ingested" in _error_line(r.stderr)
    assert not (tmp_path / "indexes").exists()


def test_a_failed_first_ingest_into_an_empty_folder_leaves_it_empty(tmp_path: Path) -> None:
    docs = _unusable(tmp_path / "docs")
    index = tmp_path / "index"
    index.mkdir()
    r = run_cli(tmp_path, ["ingest", str(docs), "--index", str(index)], cwd=tmp_path)
    assert r.returncode == 2
    _error_line(r.stderr)
    assert list(index.iterdir()) == []


def test_a_failed_re_ingest_leaves_the_old_index_intact(tmp_path: Path) -> None:
    index = tmp_path / "index"
    r = run_cli(tmp_path, ["ingest", str(write_corpus(tmp_path / "good"))], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    before = index_fingerprint(index)
    r = run_cli(tmp_path, ["ingest", str(_unusable(tmp_path / "bad"))], cwd=tmp_path)
    assert r.returncode == 2
    _error_line(r.stderr)
    assert index_fingerprint(index) == before
    assert (index / "ingest.lock").exists() and (index / "embeddings.sqlite").exists()
    r = run_cli(tmp_path, ["search", "Who built the lighthouse?", "--json"], cwd=tmp_path)
    assert r.returncode == 0 and "Clara Venn" in r.stdout, r.stderr
