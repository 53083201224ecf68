"""Ingestion pipeline: all chunkers indexed, incremental re-ingest, bad files, interrupted ingests."""

from __future__ import annotations

import fcntl
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from self_improving_rag.config import load_config
from self_improving_rag.errors import IngestionError
from self_improving_rag.ingestion import chunk_vectors, pipeline
from self_improving_rag.ingestion.chunk_vectors import chunker_params
from self_improving_rag.ingestion.fingerprints import file_sha256
from self_improving_rag.ingestion.pipeline import ingest
from self_improving_rag.retrieval import index as index_module
from self_improving_rag.retrieval.embedder import HashEmbedder
from self_improving_rag.retrieval.index import CorpusIndex
from self_improving_rag.retrieval.searcher import Searcher
from self_improving_rag.types import Strategy
from tests.conftest import fake_overrides, main_in_process

CHUNKERS = ("fixed", "section", "semantic")


class CountingEmbedder:
    """Wraps the hash embedder, records every batch it embeds, and can fail on a given call."""

    def __init__(self, inner: HashEmbedder, fail_on_call: int | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_tokens = inner.max_tokens
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call

    def warm_up(self) -> None:
        self.inner.warm_up()

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.fail_on_call is not None and len(self.calls) >= self.fail_on_call:
            raise RuntimeError("embedder crashed (simulated)")
        return self.inner.embed(texts)

    @property
    def texts(self) -> Counter:
        return Counter(t for call in self.calls for t in call)


def _chunks(root: Path) -> dict[str, list]:
    index = CorpusIndex(root)
    return {name: index.load_chunks(name) for name in CHUNKERS}


def _ids_by_doc(chunks: list) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in chunks:
        out.setdefault(c.doc_id, []).append(c.chunk_id)
    return out


# ---------------------------------------------------------------- a fresh index


def test_builds_every_chunker(fake_config, corpus_dir: Path, hash_embedder) -> None:
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    root = Path(fake_config.paths.index_dir)
    index = CorpusIndex(root)
    manifest = index.manifest()
    assert set(manifest["chunkers"]) == set(CHUNKERS)
    assert manifest["chunkers"] == chunker_params(fake_config, hash_embedder.max_tokens)
    assert manifest["embedder"] == {"name": "hash-64", "dim": 64, "max_tokens": 256}
    assert set(manifest["files"]) == {"harbour", "orchard"}
    assert sorted(d["doc_id"] for d in report.documents) == ["harbour", "orchard"]
    assert report.problems == [] and report.reused_documents == 0 and report.embedded_texts > 0
    for name in CHUNKERS:
        ci = index.load_chunker(name)
        assert len(ci.chunks) == report.chunks[name] == manifest["counts"][name] > 0
        assert ci.dense.ntotal == len(ci.chunks)
        assert {c.doc_id for c in ci.chunks} == {"harbour", "orchard"}
        assert {c.strategy for c in ci.chunks} == {name}
    assert (root / "CURRENT").is_file()
    assert not list(root.glob(".building-*"))


def test_embedding_cache_shares_a_text_between_chunkers(tmp_path: Path, corpus_dir: Path, hash_embedder,
                                                        monkeypatch) -> None:
    # Every chunker embeds its chunks' own text here (no pooled vectors).
    monkeypatch.setattr(chunk_vectors, "POOLED_CHUNKERS", ())
    fake_config = load_config(None, fake_overrides(tmp_path))
    assert all(p["vectors"] == "full" for p in chunker_params(fake_config, 256).values())
    embedder = CountingEmbedder(hash_embedder)
    report = ingest([corpus_dir], fake_config, embedder, progress=False)
    chunks = _chunks(Path(fake_config.paths.index_dir))
    shared = {c.embed_text for c in chunks["section"]} & {c.embed_text for c in chunks["semantic"]}
    assert shared, "the test corpus should give section and semantic chunks with the same text"
    counts = embedder.texts
    assert all(counts[t] == 1 for t in shared)
    assert max(counts.values()) == 1  # no text is ever embedded twice
    assert report.cached_texts >= len(shared)
    # embedded_texts counts every text embedded during the ingest, the semantic chunker's
    # sentences included; every chunk text was either embedded or found in the cache.
    assert report.embedded_texts == sum(counts.values())
    total = sum(len(v) for v in chunks.values())
    assert report.embedded_texts + report.cached_texts >= total


def test_pooled_vectors_come_from_one_shared_sentence_pass(tmp_path: Path, corpus_dir: Path, hash_embedder) -> None:
    cfg = load_config(None, fake_overrides(tmp_path))
    params = chunker_params(cfg, 256)
    assert [params[n]["vectors"] for n in CHUNKERS] == ["pooled", "full", "pooled"]
    embedder = CountingEmbedder(hash_embedder)
    report = ingest([corpus_dir], cfg, embedder, progress=False)
    counts = embedder.texts
    assert max(counts.values()) == 1  # no text is ever embedded twice
    chunks = _chunks(Path(cfg.paths.index_dir))
    # Section chunks are embedded whole (breadcrumb + text); fixed and semantic chunks never are.
    assert all(c.embed_text in counts for c in chunks["section"])
    whole = {c.embed_text for c in chunks["fixed"] + chunks["semantic"]}
    sentences = {t for n in ("fixed", "semantic") for t in chunk_vectors.chunk_sentences(chunks[n])[0]}
    assert all(t in counts for t in sentences)
    assert not (whole - sentences - {c.embed_text for c in chunks["section"]}) & set(counts)
    # The semantic chunker embedded its sentences while chunking; pooling reused nearly all of them.
    assert report.cached_texts > 0.8 * len(sentences)
    # Each pooled vector is the normalised sqrt(length)-weighted sum of its sentence vectors.
    index = CorpusIndex(Path(cfg.paths.index_dir))
    for name in ("fixed", "semantic"):
        ci = index.load_chunker(name)
        for i in (0, len(ci.chunks) // 2, len(ci.chunks) - 1):
            texts, _, weight = chunk_vectors.chunk_sentences([ci.chunks[i]])
            want = (hash_embedder.embed(texts) * weight[:, None]).sum(axis=0)
            want /= np.linalg.norm(want)
            np.testing.assert_allclose(ci.dense.reconstruct(i), want, atol=1e-5)
    # An unchanged re-ingest embeds nothing and pools nothing again.
    embedder.calls.clear()
    again = ingest([corpus_dir], cfg, embedder, progress=False)
    assert again.embedded_texts == 0 and embedder.calls == []


def test_changing_the_vector_mode_rebuilds_that_chunker(tmp_path: Path, corpus_dir: Path, hash_embedder,
                                                        monkeypatch) -> None:
    cfg = load_config(None, fake_overrides(tmp_path))
    monkeypatch.setattr(chunk_vectors, "POOLED_CHUNKERS", ())
    ingest([corpus_dir], cfg, hash_embedder, progress=False)
    before = CorpusIndex(Path(cfg.paths.index_dir)).load_chunker("fixed").dense.reconstruct(0)
    monkeypatch.setattr(chunk_vectors, "POOLED_CHUNKERS", ("fixed",))
    ingest([corpus_dir], cfg, hash_embedder, progress=False)
    index = CorpusIndex(Path(cfg.paths.index_dir))
    assert index.manifest()["chunkers"]["fixed"]["vectors"] == "pooled"
    after = index.load_chunker("fixed").dense.reconstruct(0)
    assert not np.allclose(before, after)


# ---------------------------------------------------------------- incremental re-ingest


def test_reingest_unchanged_embeds_nothing(fake_config, built_index: Path, corpus_dir: Path, hash_embedder,
                                           monkeypatch) -> None:
    before = _chunks(built_index)
    live = CorpusIndex(built_index).current_dir()
    embedder = CountingEmbedder(hash_embedder)
    report = ingest([corpus_dir], fake_config, embedder, progress=False)
    assert report.embedded_texts == 0
    assert report.reused_documents == 2
    assert embedder.calls == []
    assert _chunks(built_index) == before
    # Nothing changed: the live generation is kept, not rewritten.
    assert report.unchanged and CorpusIndex(built_index).current_dir() == live
    assert report.chunks == CorpusIndex(built_index).manifest()["counts"] and len(report.documents) == 2
    # A setting the index is built with (the size at which FAISS would switch to an approximate index) writes a new one.
    from self_improving_rag.ingestion import pipeline

    monkeypatch.setattr(pipeline, "ANN_THRESHOLD", 1000)
    again = ingest([corpus_dir], fake_config, embedder, progress=False)
    assert not again.unchanged and CorpusIndex(built_index).current_dir() != live
    assert _chunks(built_index) == before and embedder.calls == []


@pytest.mark.parametrize("damage", ["garbled line", "lost line", "wrong fields", "missing dense file"])
def test_a_damaged_index_is_built_again_from_the_documents(fake_config, built_index: Path, corpus_dir: Path,
                                                           hash_embedder, damage: str) -> None:
    before = _chunks(built_index)
    live = CorpusIndex(built_index).current_dir()
    path = live / "chunks-section.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if damage == "garbled line":
        path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2] + "\n", encoding="utf-8")
    elif damage == "lost line":  # still valid JSON: only the manifest's count shows the loss
        path.write_text("".join(lines[:-1]), encoding="utf-8")
    elif damage == "wrong fields":
        path.write_text("".join(lines[:-1]) + '{"text": "x"}\n', encoding="utf-8")
    else:
        (live / "dense-section.faiss").unlink()
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert not report.unchanged and CorpusIndex(built_index).current_dir() != live
    assert _chunks(built_index) == before  # nothing lost: the same chunks, from the documents
    if damage != "missing dense file":
        assert any("is damaged" in p and "built again" in p for p in report.problems)
    CorpusIndex(built_index).load_chunker("section")  # whole again


def test_rebuild_rechunks_but_reuses_cached_vectors(fake_config, built_index: Path, corpus_dir: Path,
                                                    hash_embedder) -> None:
    before = _chunks(built_index)
    report = ingest([corpus_dir], fake_config, hash_embedder, rebuild=True, progress=False)
    assert report.reused_documents == 0 and report.embedded_texts == 0
    # A rebuild is asked for: no setting changed, and every document counts as new to the index.
    assert report.changed_settings == [] and report.changed_documents == 2
    assert _chunks(built_index) == before


def test_changing_one_file_rechunks_only_that_file(fake_config, built_index: Path, corpus_dir: Path,
                                                   hash_embedder, monkeypatch) -> None:
    before = _chunks(built_index)
    loaded: list[Path] = []
    real_load = pipeline.load_document

    def spy(path, *args, **kwargs):
        loaded.append(Path(path))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "load_document", spy)
    orchard = corpus_dir / "orchard.txt"
    orchard.write_text(orchard.read_text(encoding="utf-8") + "\nThe pears are picked in October.\n",
                       encoding="utf-8")
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert [p.name for p in loaded] == ["orchard.txt"]
    assert report.reused_documents == 1 and report.changed_documents == 1 and report.changed_settings == []
    assert report.summary_notes() == [f"indexed 1 new or changed document(s) of 2 into {built_index}"]
    assert report.embedded_texts > 0
    after = _chunks(built_index)
    for name in CHUNKERS:
        assert _ids_by_doc(after[name])["harbour"] == _ids_by_doc(before[name])["harbour"]
        assert any("pears are picked" in c.text for c in after[name] if c.doc_id == "orchard")
    manifest = CorpusIndex(built_index).manifest()
    assert manifest["files"]["orchard"]["sha256"] == file_sha256(orchard)


def test_removing_a_file_removes_its_chunks(fake_config, built_index: Path, corpus_dir: Path,
                                            hash_embedder) -> None:
    (corpus_dir / "orchard.txt").unlink()
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.reused_documents == 1 and report.embedded_texts == 0
    for name, chunks in _chunks(built_index).items():
        assert chunks and {c.doc_id for c in chunks} == {"harbour"}, name
        assert CorpusIndex(built_index).load_chunker(name).dense.ntotal == len(chunks)
    assert set(CorpusIndex(built_index).manifest()["files"]) == {"harbour"}


def test_an_index_of_an_older_chunking_version_is_read_again_from_the_files(fake_config, built_index: Path,
                                                                           corpus_dir: Path, hash_embedder,
                                                                           monkeypatch) -> None:
    """A loader change alters the text of unchanged files: only the chunking version recorded in the
    manifest tells an ingest not to reuse their chunks, and the report says it was an older sirag,
    not other settings, that made the index."""
    import json

    path = CorpusIndex(built_index).current_dir() / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for params in manifest["chunkers"].values():
        params["algorithm"] -= 1
    path.write_text(json.dumps(manifest), encoding="utf-8")
    loaded: list[str] = []
    real_load = pipeline.load_document
    monkeypatch.setattr(pipeline, "load_document",
                        lambda p, *a, **k: loaded.append(Path(p).name) or real_load(p, *a, **k))
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert sorted(loaded) == ["harbour.md", "orchard.txt"] and report.reused_documents == 0
    assert report.changed_settings == report.older_chunking == list(CHUNKERS)
    assert report.changed_documents == 0 and not report.unchanged
    (note,) = report.summary_notes()
    assert "made by an older sirag" in note and "other settings" not in note
    assert ingest([corpus_dir], fake_config, hash_embedder, progress=False).unchanged


def test_changed_chunker_params_rechunk_everything(tmp_path: Path, built_index: Path, corpus_dir: Path,
                                                   hash_embedder) -> None:
    config = load_config(None, [*fake_overrides(tmp_path), "ingestion.fixed.size=24"])
    report = ingest([corpus_dir], config, hash_embedder, progress=False)
    assert report.reused_documents == 0
    # No document changed: only the fixed chunker's settings, and the report says so.
    assert report.changed_documents == 0 and report.changed_settings == ["fixed"]
    assert len(report.summary_notes()) == 1 and report.summary_notes()[0].startswith(
        f"re-chunked all 2 document(s) of {built_index} with chunker(s) fixed:")
    assert CorpusIndex(built_index).manifest()["chunkers"]["fixed"]["size"] == 24
    assert all(c.n_tokens <= 24 for c in CorpusIndex(built_index).load_chunks("fixed"))


def test_files_sharing_a_stem_get_distinct_ids(fake_config, tmp_path: Path, hash_embedder) -> None:
    folder = tmp_path / "twins"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nThe keeper lit the lamp at dusk.\n", encoding="utf-8")
    (folder / "notes.txt").write_text("The miller pressed cider in the barn.\n", encoding="utf-8")
    report = ingest([folder], fake_config, hash_embedder, progress=False)
    ids = [d["doc_id"] for d in report.documents]
    assert len(ids) == len(set(ids)) == 2 and all(i.startswith("notes-") for i in ids)



def test_a_document_keeps_its_id_when_another_file_comes_or_goes(fake_config, tmp_path: Path, hash_embedder) -> None:
    """Ids are what memory and results cite: a file sharing the stem of an indexed one gets a new
    id of its own; the indexed file is neither renamed nor re-chunked, nor reported as removed."""
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("The keeper lit the lamp at dusk.\n", encoding="utf-8")
    first = ingest([folder], fake_config, hash_embedder, progress=False)
    assert [d["doc_id"] for d in first.documents] == ["notes"]

    (folder / "sub" / "notes.md").write_text("# Notes\n\nThe miller pressed cider in the barn.\n", encoding="utf-8")
    added = ingest([folder], fake_config, hash_embedder, progress=False)
    ids = {Path(d["path"]).name: d["doc_id"] for d in added.documents}
    assert ids["notes.txt"] == "notes" and ids["notes.md"].startswith("notes-")
    assert added.reused_documents == 1 and added.removed_documents == []

    (folder / "sub" / "notes.md").unlink()
    removed = ingest([folder], fake_config, hash_embedder, progress=False)
    assert [d["doc_id"] for d in removed.documents] == ["notes"]
    assert removed.reused_documents == 1 and removed.removed_documents == [ids["notes.md"]]


def test_chunkers_left_out_of_the_settings_are_named_as_dropped(fake_config, built_index: Path, corpus_dir: Path,
                                                                 hash_embedder, tmp_path: Path) -> None:
    """An ingest with fewer chunkers writes an index without the others' chunks: it says so, as it
    does for the documents it drops, instead of reporting only the chunkers it built."""
    fewer = load_config(None, [*fake_overrides(tmp_path), "ingestion.chunkers=[section]"])
    report = ingest([corpus_dir], fewer, hash_embedder, progress=False)
    assert set(CorpusIndex(built_index).manifest()["chunkers"]) == {"section"}
    assert report.removed_chunkers == ["fixed", "semantic"] and report.removed_documents == []
    assert [line for line in report.notices() if "chunker" in line] == [
        "note: the index no longer holds the chunks of chunker(s) fixed, semantic: ingestion.chunkers leaves them "
        "out (searching with them needs an ingest whose ingestion.chunkers includes fixed, semantic)"]
    again = ingest([corpus_dir], fake_config, hash_embedder, progress=False)  # all three again: nothing dropped
    assert again.removed_chunkers == [] and not [line for line in again.notices() if "chunker" in line]


def test_ids_stay_with_symlinked_and_moved_files(fake_config, tmp_path: Path, hash_embedder) -> None:
    folder = tmp_path / "docs"
    (folder / "x").mkdir(parents=True)
    (folder / "a.txt").write_text("The keeper lit the lamp at dusk.\n", encoding="utf-8")
    (folder / "b.txt").symlink_to(folder / "a.txt")  # one file, two paths: indexed once
    for _ in range(3):
        report = ingest([folder], fake_config, hash_embedder, progress=False)
        assert [d["doc_id"] for d in report.documents] == ["a"] and report.removed_documents == []
        assert report.problems == [f"{(folder / 'b.txt').absolute()}: the same file as {(folder / 'a.txt').absolute()} "
                                   "(a link, or a folder given twice); indexed once, under the first path"]
    assert report.unchanged

    # A file moved elsewhere keeps its id and its chunks; a new file at its old place is a new document.
    (folder / "x" / "notes.txt").write_text("The miller pressed cider in the barn.\n", encoding="utf-8")
    ingest([folder], fake_config, hash_embedder, progress=False)
    (folder / "y").mkdir()
    (folder / "x" / "notes.txt").rename(folder / "y" / "notes.txt")
    moved = ingest([folder], fake_config, hash_embedder, progress=False)
    ids = {d["doc_id"]: Path(d["file"]) for d in moved.documents}
    assert ids["notes"] == (folder / "y" / "notes.txt").absolute() and moved.reused_documents == 2
    (folder / "x" / "notes.txt").write_text("A different note about the harbour.\n", encoding="utf-8")
    again = ingest([folder], fake_config, hash_embedder, progress=False)
    ids = {Path(d["file"]).relative_to(folder.absolute()).as_posix(): d["doc_id"] for d in again.documents}
    assert ids["y/notes.txt"] == "notes" and ids["x/notes.txt"].startswith("notes-")


def test_names_that_differ_only_by_case_or_spaces_get_distinct_ids(fake_config, tmp_path: Path,
                                                                    hash_embedder) -> None:
    folder = tmp_path / "twins"
    folder.mkdir()
    (folder / "My Book.txt").write_text("The keeper lit the lamp at dusk.\n", encoding="utf-8")
    (folder / "my_book.txt").write_text("The miller pressed cider in the barn.\n", encoding="utf-8")
    for _ in range(2):  # the second ingest reuses both files' chunks, once each
        report = ingest([folder], fake_config, hash_embedder, progress=False)
        ids = [d["doc_id"] for d in report.documents]
        assert len(ids) == len(set(ids)) == 2 and all(i.startswith("my_book-") for i in ids)
        chunks = CorpusIndex(Path(fake_config.paths.index_dir)).load_chunks("section")
        assert len({c.doc_id for c in chunks}) == 2 and len(chunks) == 2


def test_a_hashed_id_never_takes_the_id_of_a_file_named_like_it(fake_config, tmp_path: Path,
                                                                 hash_embedder) -> None:
    """A file whose own name is another file's hashed id ("notes-<hash>.txt" beside two
    "notes.txt"): every document keeps an id of its own, and deleting one file removes its
    passages, not another file's."""
    import hashlib

    folder = tmp_path / "docs"
    for sub, text in (("a", "The dog is named Rex."), ("b", "The cat is named Tom.")):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "notes.txt").write_text(text + "\n", encoding="utf-8")
    digest = hashlib.sha256(str((folder / "b" / "notes.txt").absolute()).encode()).hexdigest()[:6]
    (folder / "c").mkdir()
    (folder / "c" / f"notes-{digest}.txt").write_text("The owl is named Hoot.\n", encoding="utf-8")
    for _ in range(2):
        report = ingest([folder], fake_config, hash_embedder, progress=False)
        ids = {Path(d["file"]).parent.name: d["doc_id"] for d in report.documents}
        assert len(ids) == 3 and len(set(ids.values())) == 3 and ids["c"] == f"notes-{digest}"
        chunks = CorpusIndex(Path(fake_config.paths.index_dir)).load_chunks("section")
        assert len(chunks) == 3 and len({c.doc_id for c in chunks}) == 3
    assert report.unchanged

    (folder / "b" / "notes.txt").unlink()
    ingest([folder], fake_config, hash_embedder, progress=False)
    texts = {c.doc_id: c.text for c in CorpusIndex(Path(fake_config.paths.index_dir)).load_chunks("section")}
    assert not any("Tom" in t for t in texts.values()) and "Hoot" in texts[f"notes-{digest}"]


# ---------------------------------------------------------------- bad inputs


def test_mixed_folder_ingests_the_good_files_and_names_each_problem(fake_config, corpus_dir: Path,
                                                                    hash_embedder) -> None:
    (corpus_dir / "empty.txt").write_bytes(b"")
    (corpus_dir / "blob.txt").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (corpus_dir / "report.docx").write_bytes(b"PK\x03\x04 not a supported type")
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert sorted(d["doc_id"] for d in report.documents) == ["harbour", "orchard"]
    problems = report.problems
    assert len(problems) == 3, problems
    assert any("empty.txt" in p and "empty" in p.split("empty.txt", 1)[1] for p in problems)
    assert any("blob.txt" in p and "binary" in p for p in problems)
    assert any("unsupported" in p and str(corpus_dir) in p and "1 entry " in p for p in problems)
    index = CorpusIndex(fake_config.paths.index_dir)
    assert set(index.manifest()["files"]) == {"harbour", "orchard"}


def test_invalid_utf8_bytes_in_a_utf8_file_are_a_warning_naming_the_byte(fake_config, corpus_dir: Path,
                                                                        hash_embedder) -> None:
    raw = "The café by the harbour served crème brûlée to the keeper. ".encode("utf-8") * 3 + b"\x92s end."
    (corpus_dir / "menu.txt").write_bytes(raw)
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert "menu" in [d["doc_id"] for d in report.documents]
    at = raw.index(b"\x92")
    assert [p for p in report.problems if "menu.txt" in p] == [
        f"{corpus_dir / 'menu.txt'}: 1 byte sequence(s) are not valid UTF-8 (the first at byte {at}); "
        "they read as '\ufffd' and the rest as UTF-8; re-save the file as UTF-8 to keep those characters"]


def test_unsupported_file_given_by_name_is_named(fake_config, corpus_dir: Path, hash_embedder) -> None:
    odd = corpus_dir.parent / "slides.pptx"
    odd.write_bytes(b"PK\x03\x04")
    report = ingest([corpus_dir / "harbour.md", odd], fake_config, hash_embedder, progress=False)
    assert [d["doc_id"] for d in report.documents] == ["harbour"]
    assert any("slides.pptx" in p and "unsupported" in p for p in report.problems)


def test_nothing_ingestible_raises(fake_config, tmp_path: Path, hash_embedder) -> None:
    only_bad = tmp_path / "bad"
    only_bad.mkdir()
    (only_bad / "a.docx").write_bytes(b"PK")
    with pytest.raises(IngestionError, match="nothing to ingest"):
        ingest([only_bad], fake_config, hash_embedder, progress=False)
    (only_bad / "empty.md").write_bytes(b"")
    with pytest.raises(IngestionError, match="empty.md"):
        ingest([only_bad], fake_config, hash_embedder, progress=False)
    with pytest.raises(IngestionError, match="no such file"):
        ingest([tmp_path / "missing"], fake_config, hash_embedder, progress=False)
    assert CorpusIndex(fake_config.paths.index_dir).current_dir() is None


def test_a_concurrent_ingest_is_refused(fake_config, corpus_dir: Path, hash_embedder) -> None:
    root = Path(fake_config.paths.index_dir)
    root.mkdir(parents=True)
    with (root / "ingest.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(IngestionError, match="another ingest"):
            ingest([corpus_dir], fake_config, hash_embedder, progress=False)
        fcntl.flock(held, fcntl.LOCK_UN)
    ingest([corpus_dir], fake_config, hash_embedder, progress=False)


# ---------------------------------------------------------------- interrupted ingests


def _assert_index_intact(config, root: Path, before: dict, embedder) -> None:
    assert _chunks(root) == before
    for name in CHUNKERS:
        assert CorpusIndex(root).load_chunker(name).dense.ntotal == len(before[name])
    searcher = Searcher(config, embedder)
    try:
        result = searcher.search("Who built the lighthouse of Marrow Point?", Strategy(chunker="section"))
        assert "Clara Venn" in result.hits[0].chunk.text
    finally:
        searcher.close()


def _touch_corpus(corpus_dir: Path) -> None:
    harbour = corpus_dir / "harbour.md"
    harbour.write_text(harbour.read_text(encoding="utf-8") + "\nA new pier was opened in 1910.\n",
                       encoding="utf-8")


def test_failed_commit_keeps_the_previous_index(fake_config, built_index: Path, corpus_dir: Path,
                                               hash_embedder, monkeypatch) -> None:
    before = _chunks(built_index)
    _touch_corpus(corpus_dir)

    def boom(self, gen, manifest):
        raise OSError("disk full (simulated)")

    with monkeypatch.context() as m:
        m.setattr(CorpusIndex, "commit", boom)
        with pytest.raises(OSError, match="disk full"):
            ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    _assert_index_intact(fake_config, built_index, before, hash_embedder)
    # The next ingest finishes the job despite the half-built generation left behind.
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.reused_documents == 1
    assert any("new pier" in c.text for c in _chunks(built_index)["section"])


def test_crash_while_switching_current_keeps_the_previous_index(fake_config, built_index: Path,
                                                                corpus_dir: Path, hash_embedder,
                                                                monkeypatch) -> None:
    before = _chunks(built_index)
    _touch_corpus(corpus_dir)
    real = index_module.atomic_write_text

    def failing(path: Path, text: str) -> None:
        if path.name == "CURRENT":
            raise OSError("power cut (simulated)")
        real(path, text)

    with monkeypatch.context() as m:
        m.setattr(index_module, "atomic_write_text", failing)
        with pytest.raises(OSError, match="power cut"):
            ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    _assert_index_intact(fake_config, built_index, before, hash_embedder)
    ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert len(list(built_index.glob("gen-*"))) == 1


@pytest.mark.parametrize("fail_on_call", [1, 2])
def test_embedder_crash_keeps_the_previous_index(fake_config, built_index: Path, corpus_dir: Path,
                                                 hash_embedder, fail_on_call: int) -> None:
    before = _chunks(built_index)
    _touch_corpus(corpus_dir)
    crashing = CountingEmbedder(hash_embedder, fail_on_call=fail_on_call)
    with pytest.raises(RuntimeError, match="simulated"):
        ingest([corpus_dir], fake_config, crashing, progress=False)
    assert len(crashing.calls) == fail_on_call
    _assert_index_intact(fake_config, built_index, before, hash_embedder)
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.reused_documents == 1


def test_building_leftover_does_not_break_the_next_ingest(fake_config, built_index: Path, corpus_dir: Path,
                                                          hash_embedder) -> None:
    stale = built_index / ".building-20000101T000000-abcdef"
    stale.mkdir()
    (stale / "chunks-section.jsonl").write_text('{"truncated": ', encoding="utf-8")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = built_index / ".building-20990101T000000-123456"
    fresh.mkdir()
    _touch_corpus(corpus_dir)
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.reused_documents == 1
    assert not stale.exists()  # an old leftover is cleaned up
    assert fresh.exists()  # a recent one may belong to an ingest in flight
    index = CorpusIndex(built_index)
    assert any("new pier" in c.text for c in index.load_chunks("section"))
    assert len(list(built_index.glob("gen-*"))) == 1


def test_a_killed_ingest_s_leftover_goes_also_when_the_index_is_up_to_date(fake_config, built_index: Path,
                                                                           corpus_dir: Path, hash_embedder) -> None:
    """After kill -9 mid-write, the next ingest usually finds the index up to date and writes
    nothing: it still removes the unfinished generation, which can be as large as the index."""
    stale = built_index / ".building-20000101T000000-abcdef"
    stale.mkdir()
    (stale / "chunks-section.jsonl").write_text('{"truncated": ', encoding="utf-8")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.unchanged
    assert not stale.exists()


def test_ctrl_c_once_the_new_index_is_live_says_it_is_in_use(tmp_path: Path, corpus_dir: Path, monkeypatch,
                                                             capsys) -> None:
    """Ctrl-C while the older generation is removed comes after the new one went live: the
    "interrupted:" line says so, not that the index is as it was before the ingest."""
    options = [a for o in fake_overrides(tmp_path) for a in ("--set", o)]
    assert main_in_process(["ingest", str(corpus_dir), *options]) == 0
    _touch_corpus(corpus_dir)

    def interrupted(self, live):
        raise KeyboardInterrupt

    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(CorpusIndex, "remove_stale", interrupted)
        assert main_in_process(["ingest", str(corpus_dir), *options]) == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted: stopped while finishing; the new index in ") and "complete and in use" in err
    assert "as it was before" not in err
    assert any("new pier" in c.text for c in CorpusIndex(tmp_path / "index").load_chunks("section"))


def test_ctrl_c_during_the_stats_of_a_new_index_says_it_is_in_use(tmp_path: Path, corpus_dir: Path, monkeypatch,
                                                                  capsys) -> None:
    """--stats (and --stats-png, which draws for seconds) runs once the new index is live: Ctrl-C
    there must not say the index is as it was before the ingest."""
    import self_improving_rag.ingestion.stats as stats_module

    options = [a for o in fake_overrides(tmp_path) for a in ("--set", o)]
    assert main_in_process(["ingest", str(corpus_dir), *options]) == 0
    _touch_corpus(corpus_dir)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(stats_module, "chunk_stats", interrupted)
        assert main_in_process(["ingest", str(corpus_dir), "--stats", *options]) == 130
        err = capsys.readouterr().err
        assert "complete and in use" in err and "as it was before" not in err
        assert any("new pier" in c.text for c in CorpusIndex(tmp_path / "index").load_chunks("section"))
        # Nothing written: the index is as it was, as the usual line says.
        assert main_in_process(["ingest", str(corpus_dir), "--stats", *options]) == 130
        assert "as it was before" in capsys.readouterr().err


def test_crash_between_chunkers_keeps_the_previous_index(fake_config, built_index: Path, corpus_dir: Path,
                                                         hash_embedder, monkeypatch) -> None:
    """The new generation is half written (one chunker done) when the ingest dies."""
    before = _chunks(built_index)
    _touch_corpus(corpus_dir)
    real = CorpusIndex.write_chunker
    written: list[str] = []

    def second_fails(self, gen, name, chunks, vectors, ann_threshold):
        if written:
            raise KeyboardInterrupt
        written.append(name)
        real(self, gen, name, chunks, vectors, ann_threshold)

    with monkeypatch.context() as m:
        m.setattr(CorpusIndex, "write_chunker", second_fails)
        with pytest.raises(KeyboardInterrupt):
            ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert written == ["fixed"]
    _assert_index_intact(fake_config, built_index, before, hash_embedder)
    report = ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    assert report.reused_documents == 1
    assert any("new pier" in c.text for c in _chunks(built_index)["semantic"])


def test_document_ids_have_no_whitespace():
    from pathlib import Path

    from self_improving_rag.ingestion.doc_ids import assign_doc_ids

    ids = assign_doc_ids([Path("/d/My Book.txt"), Path("/d/line\nbreak.txt"), Path("/d/tab\there.md")])
    assert sorted(ids.values()) == ["line_break", "my_book", "tab_here"]


def test_the_documents_folder_is_refused_as_the_index(fake_config, corpus_dir: Path, hash_embedder) -> None:
    before = sorted(p.name for p in corpus_dir.iterdir())
    with pytest.raises(IngestionError, match="is the documents folder"):
        ingest([corpus_dir], fake_config, hash_embedder, index_dir=corpus_dir, progress=False)
    assert sorted(p.name for p in corpus_dir.iterdir()) == before, "files were written among the documents"


def test_a_folder_of_documents_is_refused_as_the_index(fake_config, tmp_path: Path, corpus_dir: Path,
                                                       hash_embedder) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.md").write_text("Buy apples.\n", encoding="utf-8")
    with pytest.raises(IngestionError, match="holds documents"):
        ingest([corpus_dir], fake_config, hash_embedder, index_dir=other, progress=False)
    assert [p.name for p in other.iterdir()] == ["todo.md"]


def test_an_index_inside_the_documents_is_not_read_as_documents(fake_config, tmp_path: Path, corpus_dir: Path,
                                                                hash_embedder) -> None:
    inside = corpus_dir / "index"
    first = ingest([corpus_dir], fake_config, hash_embedder, index_dir=inside, progress=False)
    again = ingest([corpus_dir], fake_config, hash_embedder, index_dir=inside, progress=False)
    assert not first.problems and not again.problems, again.problems  # no "skipped ... unsupported type"
    held = set(CorpusIndex(inside).manifest()["files"])
    assert held == {"harbour", "orchard"}


def test_a_renamed_folder_keeps_the_hashed_ids_of_its_documents(fake_config, tmp_path: Path, hash_embedder) -> None:
    """Two files with one stem get path-hashed ids; moving their folder (or reaching it through a
    link) changes every path, not the documents: they keep their ids and nothing is removed."""
    folder = tmp_path / "minutes"
    for year, text in (("2023", "The board met in March.\n"), ("2024", "The board met in April.\n")):
        (folder / year).mkdir(parents=True)
        (folder / year / "minutes.txt").write_text(text, encoding="utf-8")
    (folder / "llama.txt").write_text("Llamas graze on the hill.\n", encoding="utf-8")
    first = ingest([folder], fake_config, hash_embedder, progress=False)
    before = {Path(d["file"]).relative_to(folder.absolute()).as_posix(): d["doc_id"] for d in first.documents}
    assert before["2023/minutes.txt"].startswith("minutes-") and before["2024/minutes.txt"].startswith("minutes-")
    moved_to = tmp_path / "minutes-archive"
    folder.rename(moved_to)
    moved = ingest([moved_to], fake_config, hash_embedder, progress=False)
    after = {Path(d["file"]).relative_to(moved_to.absolute()).as_posix(): d["doc_id"] for d in moved.documents}
    assert after == before and moved.removed_documents == [] and moved.reused_documents == 3
    link = tmp_path / "via-link"
    link.symlink_to(moved_to)
    linked = ingest([link], fake_config, hash_embedder, progress=False)
    assert sorted(d["doc_id"] for d in linked.documents) == sorted(before.values()) and linked.removed_documents == []


def test_a_renamed_file_is_a_new_document_and_a_moved_one_keeps_its_id(fake_config, tmp_path: Path,
                                                                        hash_embedder) -> None:
    """Content alone does not carry an id: a file renamed (another name) becomes the document of
    its new name, and beside a moved note a copy of it under another name does not take its id."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "draft.txt").write_text("The harbour wall was rebuilt in 1901.\n", encoding="utf-8")
    ingest([folder], fake_config, hash_embedder, progress=False)
    (folder / "draft.txt").rename(folder / "final-report.txt")
    report = ingest([folder], fake_config, hash_embedder, progress=False)
    assert [d["doc_id"] for d in report.documents] == ["final-report"] and report.removed_documents == ["draft"]
    assert report.documents[0]["title"] != "draft"
    (folder / "final-report.txt").rename(folder / "final.txt")  # "final-report" starts like "final-": no matter
    report = ingest([folder], fake_config, hash_embedder, progress=False)
    assert [d["doc_id"] for d in report.documents] == ["final"] and report.removed_documents == ["final-report"]
    # a/notes.txt (hashed: another notes.txt) moves to b/, where a copy named summary.txt lies too.
    other = tmp_path / "other"
    (other / "a").mkdir(parents=True)
    (other / "x").mkdir()
    (other / "a" / "notes.txt").write_text("The miller pressed cider.\n", encoding="utf-8")
    (other / "x" / "notes.txt").write_text("The baker rose early.\n", encoding="utf-8")
    first = ingest([other], fake_config, hash_embedder, progress=False)
    ids = {Path(d["file"]).relative_to(other.absolute()).as_posix(): d["doc_id"] for d in first.documents}
    (other / "b").mkdir()
    (other / "a" / "notes.txt").rename(other / "b" / "notes.txt")
    (other / "b" / "summary.txt").write_text("The miller pressed cider.\n", encoding="utf-8")
    moved = ingest([other], fake_config, hash_embedder, progress=False)
    now = {Path(d["file"]).relative_to(other.absolute()).as_posix(): d["doc_id"] for d in moved.documents}
    assert now["b/notes.txt"] == ids["a/notes.txt"] and now["b/summary.txt"] == "summary"


def test_an_ingest_may_wait_for_another_to_finish(tmp_path):
    """A batch checking its index waits for another process's ingest of it; `sirag ingest`
    (no wait) says another ingest is writing."""
    import fcntl
    import threading

    from self_improving_rag.errors import IngestionError
    from self_improving_rag.ingestion.lock import ingest_lock

    root = tmp_path / "index"
    root.mkdir()
    held = (root / "ingest.lock").open("w")
    fcntl.flock(held, fcntl.LOCK_EX)
    with pytest.raises(IngestionError, match="another ingest is writing"):
        with ingest_lock(root):
            pass
    threading.Timer(0.5, lambda: fcntl.flock(held, fcntl.LOCK_UN)).start()
    with ingest_lock(root, wait_s=10):
        pass
    held.close()


def test_an_ingest_waiting_on_a_failed_first_one_takes_the_lock_it_made_again(tmp_path):
    """A failed first ingest removes its folder and lock file: the ingest that waited on that lock
    makes them again and locks the file that is there, not the removed one (a third ingest would
    lock a new file beside it and write at the same time)."""
    import threading

    from self_improving_rag.ingestion.lock import ingest_lock

    root = tmp_path / "new" / "index"
    inside, raised = threading.Event(), []

    def first() -> None:
        try:
            with ingest_lock(root):
                inside.set()
                time.sleep(0.5)  # the second ingest is waiting meanwhile
                raise RuntimeError("every file failed")
        except RuntimeError as exc:
            raised.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(5)
    with ingest_lock(root, wait_s=10):
        assert raised  # the first ingest failed and removed what it made, then this one took the lock
        with (root / "ingest.lock").open("w") as third:  # the lock held is the file there now
            with pytest.raises(BlockingIOError):
                fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
    thread.join()


def _ingested(tmp_path: Path, middle: dict[str, str], config, embedder) -> Path:
    """A folder of lamp.txt, the ``middle`` file and ferry.txt, ingested into the config's index."""
    folder = tmp_path / "docs"
    folder.mkdir()
    files = {"lamp.txt": "The keeper lit the lamp at dusk.\n", **middle, "ferry.txt": "The ferry left the quay at noon.\n"}
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    ingest([folder], config, embedder, progress=False)
    return folder


def test_a_held_document_whose_file_cannot_be_read_now_stops_the_ingest(fake_config, tmp_path: Path,
                                                                         hash_embedder) -> None:
    """A file the index held that turned binary (or unreadable) was dropped with a warning and exit 0:
    one bad save lost its document from the index. The ingest now stops and changes nothing; an
    emptied file is the user's edit and is dropped, as a removed one is."""
    folder = _ingested(tmp_path, {"mill.txt": "The miller pressed cider in the barn.\n"}, fake_config, hash_embedder)
    index = CorpusIndex(tmp_path / "index")
    live, chunks = index.current_dir(), _chunks(tmp_path / "index")

    (folder / "lamp.txt").write_bytes(b"\x00\x01binary\x00" * 50)
    with pytest.raises(IngestionError) as info:
        ingest([folder], fake_config, hash_embedder, progress=False)
    msg = str(info.value)
    assert msg.startswith(f"{folder / 'lamp.txt'}: looks like a binary file") and "\n" not in msg, msg
    assert "The index holds its document lamp from an earlier ingest, so nothing was changed" in msg, msg
    assert index.current_dir() == live and _chunks(tmp_path / "index") == chunks

    # Unreadable (permission denied: root reads any file, so the read is made to fail), and a
    # second document at once: both named.
    real = pipeline.file_sha256

    def denied(path: Path) -> str:
        if path.name == "mill.txt":
            raise PermissionError(13, "Permission denied")
        return real(path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "file_sha256", denied)
        with pytest.raises(IngestionError) as info:
            ingest([folder], fake_config, hash_embedder, progress=False)
    assert "and 1 more document(s) the index holds cannot be read now: mill" in str(info.value), info.value
    assert index.current_dir() == live

    (folder / "lamp.txt").write_text("The keeper lit the new lamp at dawn.\n", encoding="utf-8")
    (folder / "mill.txt").write_bytes(b"")  # emptied: dropped, with a warning
    (folder / "new.txt").write_bytes(b"\x00new\x00" * 20)  # a new bad file: left out, as before
    report = ingest([folder], fake_config, hash_embedder, progress=False)
    assert sorted(d["doc_id"] for d in report.documents) == ["ferry", "lamp"]
    assert report.removed_documents == ["mill"]
    assert any("file is empty" in p for p in report.problems) and any("new.txt" in p for p in report.problems)
    assert any("new lamp at dawn" in c.text for c in _chunks(tmp_path / "index")["fixed"])


def test_a_changed_chunker_setting_reports_the_documents_unchanged(tmp_path: Path, capsys) -> None:
    """After a chunker setting changed, `sirag ingest` said "0 unchanged" of documents none of which
    had changed (they were only re-chunked, which the chunker's line says)."""
    from tests.conftest import main_in_process

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "lamp.txt").write_text("The keeper lit the lamp at dusk. He trimmed the wick at dawn.\n", encoding="utf-8")
    (folder / "mill.txt").write_text("The miller pressed cider in the barn.\n", encoding="utf-8")
    sets = [x for s in fake_overrides(tmp_path) for x in ("--set", s)]
    assert main_in_process(["ingest", str(folder), *sets]) == 0
    capsys.readouterr()
    (folder / "mill.txt").write_text("The miller ground barley in the barn.\n", encoding="utf-8")
    assert main_in_process(["ingest", str(folder), *sets, "--set", "ingestion.fixed.size=30"]) == 0
    out = capsys.readouterr().out
    assert "indexed 2 document(s)" in out and "(1 unchanged," in out, out
    assert "(re-chunked: the index held other settings)" in out, out
    # A rebuild chunks every document again: it says so, not "0 unchanged".
    assert main_in_process(["ingest", str(folder), *sets, "--set", "ingestion.fixed.size=30", "--rebuild"]) == 0
    out = capsys.readouterr().out
    assert "indexed 2 document(s)" in out and "(all rebuilt, " in out and "unchanged" not in out, out


def test_a_held_document_left_without_text_is_dropped_not_a_stop(fake_config, tmp_path: Path, hash_embedder) -> None:
    """A file saved with nothing but a newline (what `echo > f` or an editor leaves), or an HTML page
    left with nothing visible, is the user's edit as an empty file is: its document is dropped with a
    warning, and the ingest goes on (only a file that cannot be read now stops it)."""
    folder = _ingested(tmp_path, {"page.html": "<html><body><p>The miller pressed cider.</p></body></html>"},
                       fake_config, hash_embedder)
    (folder / "lamp.txt").write_text("\n", encoding="utf-8")
    (folder / "page.html").write_text("<html><body><script>x()</script></body></html>", encoding="utf-8")
    report = ingest([folder], fake_config, hash_embedder, progress=False)
    assert sorted(d["doc_id"] for d in report.documents) == ["ferry"]
    assert sorted(report.removed_documents) == ["lamp", "page"]
    assert any("only whitespace" in p for p in report.problems) and any("no visible text" in p for p in report.problems)


def test_ask_says_when_documents_changed_or_went_away_since_the_ingest(tmp_path: Path, capsys) -> None:
    """An index is a snapshot: after a file was edited or removed, `ask` answered from the old text
    without a word. It now warns, naming the documents and the fix; a file only touched (same
    content, new time) is not reported, and an index up to date says nothing."""
    import os

    from tests.conftest import main_in_process

    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in (("lamp", "The keeper lit the lamp at dusk."), ("mill", "The miller pressed cider."),
                       ("ferry", "The ferry left the quay at noon.")):
        (folder / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
    sets = [x for s in fake_overrides(tmp_path) for x in ("--set", s)]
    sets += ["--set", 'generator.replies=["The keeper [1]."]', "--no-memory"]
    assert main_in_process(["ingest", str(folder), *sets[:-1]]) == 0

    def warnings() -> list[str]:
        capsys.readouterr()
        assert main_in_process(["ask", "Who lit the lamp?", *sets]) == 0
        return [line for line in capsys.readouterr().err.splitlines() if "holds documents as they were" in line]

    assert warnings() == []
    st = (folder / "ferry.txt").stat()
    os.utime(folder / "ferry.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))  # touched, same text
    assert warnings() == []
    (folder / "lamp.txt").write_text("The keeper lit the new lamp at dawn.\n", encoding="utf-8")
    (folder / "mill.txt").unlink()
    said = warnings()
    assert len(said) == 1 and "1 document(s) changed since (lamp); 1 document(s) whose file is gone (mill)" in said[0]
    assert "Run sirag ingest again with the same paths" in said[0]
    (folder / "lamp.txt").write_text("The keeper lit the lamp at dusk.\n", encoding="utf-8")  # edited back
    (folder / "mill.txt").write_text("The miller pressed cider.\n", encoding="utf-8")
    assert warnings() == []


def test_a_generation_folder_named_as_the_index_points_to_its_index(fake_config, built_index: Path, corpus_dir: Path,
                                                                     hash_embedder) -> None:
    # `--index index/gen-...` (a tab completion too far) was answered "no index in ...; build one with
    # sirag ingest", and that ingest built an index inside the live generation, which the outer
    # index's next ingest removes with it.
    from self_improving_rag.errors import IndexNotFoundError

    gen = CorpusIndex(built_index).live_dir()
    before = sorted(p.name for p in gen.iterdir())
    with pytest.raises(IndexNotFoundError, match=f"is a folder inside the index {built_index}.*pass --index "
                                                 f"{built_index}$"):
        CorpusIndex(gen).live_dir()
    for inside in (gen, gen / "sub"):
        with pytest.raises(IngestionError, match=f"is inside the index {built_index} .*nothing was changed"):
            ingest([corpus_dir], fake_config, hash_embedder, index_dir=inside, progress=False)
    assert sorted(p.name for p in gen.iterdir()) == before
    # A folder beside the index, or one never built, is still an index to build.
    with pytest.raises(IndexNotFoundError, match="no index in .*build one with"):
        CorpusIndex(built_index.parent / "other").live_dir()


def test_an_index_in_a_plain_subfolder_of_another_index_is_built_and_updated(fake_config, built_index: Path,
                                                                            corpus_dir: Path, hash_embedder) -> None:
    # index/ an index and index/sherlock another: the outer index's ingest removes only its gen-...
    # and .building-... folders, so index/sherlock is safe there. It was refused, even when it was
    # already built (its re-ingest said to ingest into index/, which would replace those documents).
    from self_improving_rag.errors import IndexNotFoundError

    inner = built_index / "sherlock"
    ingest([corpus_dir / "orchard.txt"], fake_config, hash_embedder, index_dir=inner, progress=False)
    ingest([corpus_dir], fake_config, hash_embedder, index_dir=inner, progress=False)  # updated
    assert set(CorpusIndex(inner).manifest()["files"]) == {"harbour", "orchard"}
    ingest([corpus_dir / "harbour.md"], fake_config, hash_embedder, index_dir=built_index, progress=False)
    assert CorpusIndex(inner).current_dir() is not None  # the outer index's ingest left it alone
    assert CorpusIndex(built_index).enclosing_index() is None and CorpusIndex(inner).enclosing_index() is None
    # One not built yet is an index to build, not "a folder inside the index".
    with pytest.raises(IndexNotFoundError, match="no index in .*build one with"):
        CorpusIndex(built_index / "other").live_dir()
    # Inside a generation folder (gen-..., or one being built), it is refused as before.
    live = CorpusIndex(built_index).current_dir()
    for inside in (live / "sub", built_index / "gen-20990101T000000-abcdef",
                   built_index / ".building-20990101T000000-abcdef" / "sub"):
        assert CorpusIndex(inside).enclosing_index() == built_index, inside


def test_an_index_folder_linked_into_a_generation_folder_is_refused(fake_config, built_index: Path, corpus_dir: Path,
                                                                    hash_embedder, tmp_path: Path) -> None:
    # The check read the path as written: `--index mylink`, a link to index/gen-..., built an index
    # inside that generation, and the outer index's next ingest removed it with the generation.
    from self_improving_rag.errors import IndexNotFoundError

    gen = CorpusIndex(built_index).live_dir()
    link = tmp_path / "mylink"
    link.symlink_to(gen, target_is_directory=True)
    before = sorted(p.name for p in gen.iterdir())
    for inside in (link, link / "sub"):
        with pytest.raises(IngestionError, match=f"is inside the index {built_index} .*nothing was changed"):
            ingest([corpus_dir], fake_config, hash_embedder, index_dir=inside, progress=False)
    assert sorted(p.name for p in gen.iterdir()) == before
    with pytest.raises(IndexNotFoundError, match=f"pass --index {built_index}$"):
        CorpusIndex(link).live_dir()
    # A link to a plain folder elsewhere is an index to build, as before.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "otherlink").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert CorpusIndex(tmp_path / "otherlink").enclosing_index() is None
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # a link in a loop: still "no index", not an internal error
    with pytest.raises(IndexNotFoundError, match="no index in"):
        CorpusIndex(loop).live_dir()


def test_a_folder_of_the_user_s_named_gen_something_in_the_index_folder_is_not_removed(
        fake_config, built_index: Path, corpus_dir: Path, hash_embedder) -> None:
    # remove_stale removed every folder whose name starts with gen- or .building- beside the live
    # generation: an index built in a folder holding gen-ai-notes/ deleted it, files and all, at
    # its next ingest. Only sirag's own names (gen-YYYYmmddTHHMMSS-xxxxxx) are generations.
    notes = built_index / "gen-ai-notes"
    notes.mkdir()
    (notes / "plan.txt").write_text("keep me\n", encoding="utf-8")
    old = CorpusIndex(built_index).live_dir()
    ingest([corpus_dir / "harbour.md"], fake_config, hash_embedder, progress=False)
    assert (notes / "plan.txt").read_text(encoding="utf-8") == "keep me\n"
    assert not old.exists() and CorpusIndex(built_index).live_dir() != old  # the old generation is gone
    # Not a generation either for the check of an index folder inside another index.
    assert CorpusIndex(notes / "idx").enclosing_index() is None
    assert CorpusIndex(old.parent / "gen-20990101T000000-abcdef" / "x").enclosing_index() == built_index


def test_an_index_or_memory_path_that_is_a_loop_of_links_is_named(fake_config, corpus_dir: Path, hash_embedder,
                                                                   tmp_path: Path) -> None:
    # `--index loop` where loop -> loop ended the ingest with "internal error: RuntimeError: Symlink
    # loop" (and --memory too): a path the user gave, said as such, with nothing written.
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(IngestionError, match=r"--index .*loop is a link that leads to itself.*nothing was changed"):
        ingest([corpus_dir], fake_config, hash_embedder, index_dir=loop, progress=False)
    config = load_config(None, [*fake_overrides(tmp_path), f"paths.memory_db={loop}"])
    with pytest.raises(IngestionError, match=r"--memory .*loop is a link that leads to itself"):
        ingest([corpus_dir], config, hash_embedder, index_dir=tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()
