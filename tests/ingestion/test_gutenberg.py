"""sirag fetch-gutenberg against a real HTTP server started on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from tests.conftest import fake_overrides

BOOK = """The Project Gutenberg eBook of The Salt Road

Title: The Salt Road

Author: Wren Hollis

*** START OF THE PROJECT GUTENBERG EBOOK THE SALT ROAD ***

THE SALT ROAD

CHAPTER I. THE WELL

The caravan stopped at the Amber Well, where the water tasted of iron.
The guide, a woman named Sefa Dune, counted forty camels before dusk.

CHAPTER II. THE STORM

A sandstorm buried the road for three days, and the traders sang to keep awake.

*** END OF THE PROJECT GUTENBERG EBOOK THE SALT ROAD ***
License text that must not be indexed.
""".replace("\\n", "\\r\\n")


@pytest.fixture
def mirror():
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            requests.append(self.path)
            if self.path == "/books/4242.txt":
                body = ("\\ufeff" + BOOK).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/books/5.txt":  # a mirror answering with an image
                body = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 40
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/books/{{id}}.txt", requests
    server.shutdown()


def run(args, cwd, overrides):
    cmd = [sys.executable, "-m", "self_improving_rag.cli", *args]
    for o in overrides:
        cmd += ["--set", o]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_fetch_cleans_and_ingests(tmp_path, mirror):
    url, requests = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}",
                                     f"ingestion.gutenberg_dir={tmp_path / 'dl'}"]
    r = run(["fetch-gutenberg", "4242", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    doc = next(d for d in data["documents"] if d["doc_id"] == "pg4242")
    assert doc["title"] == "The Salt Road" and doc["author"] == "Wren Hollis"
    assert doc["sections"] >= 2
    r = run(["search", "How many camels did the guide count?", "--json"], tmp_path, ov)
    hits = json.loads(r.stdout)["hits"]
    assert "forty camels" in hits[0]["text"]
    assert all("License text" not in h["text"] for h in hits)
    assert data["downloaded"] == [str(tmp_path / "dl" / "pg4242.txt")] and data["reused"] == []
    # A second fetch reuses the download, and says so; a repeated id is fetched once.
    n = len(requests)
    r = run(["fetch-gutenberg", "4242", "4242"], tmp_path, ov)
    assert r.returncode == 0 and len(requests) == n
    assert r.stdout.startswith(f"downloaded 0 book(s) into {tmp_path / 'dl'}, reused 1 already there;"), r.stdout
    # The download folder is the source: a book left there before is indexed too, and named so.
    (tmp_path / "dl" / "pg77.txt").write_text("The Old Lamp\n\nA short tale of a lamp that never went out.\n")
    r = run(["fetch-gutenberg", "4242", "--index", str(tmp_path / "index2")], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert "indexed 2 document(s)" in r.stdout and "pg77" in r.stdout and "(in the folder from before)" in r.stdout


def test_fetch_errors_are_one_line(tmp_path, mirror):
    url, _ = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}", f"ingestion.gutenberg_dir={tmp_path / 'dl'}"]
    r = run(["fetch-gutenberg", "999"], tmp_path, ov)
    assert r.returncode == 2 and "404" in r.stderr and "Traceback" not in r.stderr
    r = run(["fetch-gutenberg", "abc"], tmp_path, ov)
    assert r.returncode == 2 and "not a positive number" in r.stderr
    r = run(["fetch-gutenberg", "1"], tmp_path, fake_overrides(tmp_path) + ["ingestion.gutenberg_mirror=http://127.0.0.1:9/x.txt"])
    assert r.returncode == 2 and "placeholder" in r.stderr
    # A superscript digit passes str.isdigit but not int(); a bad port or host is no URL.
    r = run(["fetch-gutenberg", "\u00b2"], tmp_path, ov)
    assert r.returncode == 2 and "not a positive number" in r.stderr and "internal error" not in r.stderr
    for bad in ("https://mirror.example:80a/{id}.txt", "https://[mirror]/{id}", "/books/{id}.txt"):
        r = run(["fetch-gutenberg", "1"], tmp_path, fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={bad}"])
        assert r.returncode == 2 and "ingestion.gutenberg_mirror" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_fetch_refuses_when_a_source_of_the_index_is_gone(tmp_path, mirror):
    # The index keeps what it had: a document whose file was moved away is not silently dropped.
    url, requests = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}", f"ingestion.gutenberg_dir={tmp_path / 'dl'}"]
    docs = tmp_path / "mine"
    docs.mkdir()
    (docs / "notes.txt").write_text("The lighthouse keeper logged every ship that passed the cape.\n", encoding="utf-8")
    assert run(["ingest", str(docs / "notes.txt")], tmp_path, ov).returncode == 0
    (docs / "notes.txt").rename(docs / "moved.txt")
    r = run(["fetch-gutenberg", "4242"], tmp_path, ov)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no longer exist" in r.stderr and "notes.txt" in r.stderr and "nothing was downloaded" in r.stderr
    assert requests == []  # checked before the download
    (docs / "moved.txt").rename(docs / "notes.txt")
    r = run(["fetch-gutenberg", "4242", "--json"], tmp_path, ov)
    assert r.returncode == 0, r.stderr
    assert {d["doc_id"] for d in json.loads(r.stdout)["documents"]} == {"notes", "pg4242"}


def test_a_download_that_cannot_be_indexed_is_an_error(tmp_path, mirror):
    url, _ = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}", f"ingestion.gutenberg_dir={tmp_path / 'dl'}"]
    r = run(["fetch-gutenberg", "4242", "5"], tmp_path, ov)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "pg5.txt was downloaded but not indexed" in r.stderr and "it was removed" in r.stderr
    assert "pg4242: The Salt Road" in r.stdout  # the good book is indexed all the same
    # Removed, so the next fetch of another book does not warn about it again.
    assert not (tmp_path / "dl" / "pg5.txt").exists()
    r = run(["fetch-gutenberg", "4242"], tmp_path, ov)
    assert r.returncode == 0 and "pg5" not in r.stderr, r.stderr
    # A file the user put there is not deleted, only named.
    (tmp_path / "dl" / "pg6.txt").write_bytes(b"\x00\x01binary\x00" * 50)
    r = run(["fetch-gutenberg", "6"], tmp_path, ov)
    assert r.returncode == 2 and "pg6.txt was already in" in r.stderr and "delete it to download it again" in r.stderr
    assert (tmp_path / "dl" / "pg6.txt").exists()


def test_a_lone_download_that_cannot_be_indexed_is_removed_and_listed(tmp_path, mirror):
    url, _ = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}", f"ingestion.gutenberg_dir={tmp_path / 'dl'}"]
    # The only book fetched cannot be indexed: the ingest fails, and the download goes all the same.
    r = run(["fetch-gutenberg", "5"], tmp_path, ov)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "pg5.txt was downloaded but not indexed (the error below says why)" in r.stderr
    assert "it was removed" in r.stderr and "error: no document could be ingested" in r.stderr
    assert not (tmp_path / "dl" / "pg5.txt").exists()
    r = run(["fetch-gutenberg", "4242"], tmp_path, ov)
    assert r.returncode == 0 and "pg5" not in r.stderr, r.stderr
    # --json names a download it removed.
    r = run(["fetch-gutenberg", "4242", "5", "--json"], tmp_path, ov)
    data = json.loads(r.stdout)
    assert r.returncode == 2 and data["removed"] == [str(tmp_path / "dl" / "pg5.txt")]
    assert str(tmp_path / "dl" / "pg5.txt") in data["downloaded"]


def test_the_index_folder_as_download_folder_is_refused_before_downloading(tmp_path, mirror):
    url, requests = mirror
    ov = fake_overrides(tmp_path) + [f"ingestion.gutenberg_mirror={url}", f"ingestion.gutenberg_dir={tmp_path / 'same'}"]
    r = run(["fetch-gutenberg", "4242", "--index", str(tmp_path / "same")], tmp_path, ov)
    assert r.returncode == 2 and "is the download folder" in r.stderr and "nothing was downloaded" in r.stderr
    assert requests == [] and not (tmp_path / "same").exists()
    # An index folder that holds documents is refused before the download too.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("A note.\n", encoding="utf-8")
    r = run(["fetch-gutenberg", "4242", "--index", str(tmp_path / "docs")], tmp_path, ov)
    assert r.returncode == 2 and "holds documents" in r.stderr and requests == []
