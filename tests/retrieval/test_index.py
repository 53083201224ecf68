"""The corpus index on disk: manifest, compatibility checks, missing indexes, embedding cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from self_improving_rag.config import load_config
from self_improving_rag.errors import IndexMismatchError, IndexNotFoundError
from self_improving_rag.ingestion.chunk_vectors import chunker_params
from self_improving_rag.ingestion.pipeline import ingest
from self_improving_rag.retrieval.embedder import HashEmbedder
from self_improving_rag.retrieval.embedding_cache import EmbeddingCache
from self_improving_rag.retrieval.index import (
    FORMAT_VERSION,
    CorpusIndex,
    atomic_write_text,
    build_dense,
)
from self_improving_rag.retrieval.searcher import Searcher
from self_improving_rag.types import Strategy
from tests.conftest import fake_overrides


def _params(config, embedder) -> dict[str, dict]:
    return chunker_params(config, embedder.max_tokens)


# ---------------------------------------------------------------- missing index


def test_missing_index_raises_index_not_found(tmp_path: Path, fake_config, hash_embedder) -> None:
    index = CorpusIndex(tmp_path / "nowhere")
    assert index.current_dir() is None
    with pytest.raises(IndexNotFoundError, match="sirag ingest"):
        index.manifest()
    with pytest.raises(IndexNotFoundError):
        index.check_compatible("hash-64", 64, {})
    with pytest.raises(IndexNotFoundError):
        index.load_chunker("section")
    assert index.load_chunks("section") == []
    searcher = Searcher(fake_config, hash_embedder)
    with pytest.raises(IndexNotFoundError, match="sirag ingest"):
        searcher.search("Who built the lighthouse?", Strategy())


def test_current_pointing_at_a_missing_generation_counts_as_no_index(built_index: Path) -> None:
    (built_index / "CURRENT").write_text("gen-gone\n", encoding="utf-8")
    with pytest.raises(IndexNotFoundError, match=r"damaged: CURRENT points to 'gen-gone'.*sirag ingest --rebuild"):
        CorpusIndex(built_index).manifest()
    with pytest.raises(IndexNotFoundError, match="damaged"):
        CorpusIndex(built_index).load_chunker("section")


def test_a_built_chunker_whose_chunks_file_is_gone_is_a_damaged_index(built_index: Path) -> None:
    index = CorpusIndex(built_index)
    (index.current_dir() / "chunks-section.jsonl").unlink()
    with pytest.raises(IndexNotFoundError, match="damaged: chunker 'section' was built but chunks-section.jsonl"):
        index.load_chunker("section")


def test_a_chunks_file_that_lost_a_line_is_a_damaged_index(built_index: Path) -> None:
    # One line fewer than vectors: hits would point past the chunk list (it crashed in dedupe).
    index = CorpusIndex(built_index)
    path = index.current_dir() / "chunks-section.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")
    with pytest.raises(IndexNotFoundError, match=r"damaged \(\d+ vectors for \d+ chunks\).*sirag ingest --rebuild"):
        index.load_chunker("section")


def test_a_missing_bm25_folder_is_a_damaged_index(built_index: Path) -> None:
    # Without it BM25 found nothing and the hybrid retriever quietly ran on dense alone.
    import shutil

    index = CorpusIndex(built_index)
    shutil.rmtree(index.current_dir() / "bm25-section")
    with pytest.raises(IndexNotFoundError, match=r"damaged \(bm25-section is missing\)"):
        index.load_chunker("section")


def test_unreadable_manifest_says_to_rebuild(built_index: Path) -> None:
    index = CorpusIndex(built_index)
    (index.current_dir() / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexNotFoundError, match="sirag ingest --rebuild"):
        index.manifest()


# ---------------------------------------------------------------- manifest and compatibility


def test_manifest_records_the_build(built_index: Path, fake_config, hash_embedder, corpus_dir: Path) -> None:
    index = CorpusIndex(built_index)
    m = index.manifest()
    assert m["format_version"] == FORMAT_VERSION
    assert m["embedder"] == {"name": "hash-64", "dim": 64, "max_tokens": 256}
    assert m["chunkers"] == _params(fake_config, hash_embedder)
    assert m["sources"] == [str(corpus_dir.resolve())]
    assert set(m["files"]) == {"harbour", "orchard"}
    assert all(len(f["sha256"]) == 64 for f in m["files"].values())
    assert m["counts"] == {name: len(index.load_chunks(name)) for name in m["chunkers"]}
    assert index.current_dir().name.startswith("gen-")
    assert (built_index / "CURRENT").read_text(encoding="utf-8").strip() == index.current_dir().name


def test_check_compatible_accepts_the_same_configuration(built_index: Path, fake_config, hash_embedder) -> None:
    m = CorpusIndex(built_index).check_compatible("hash-64", 64, _params(fake_config, hash_embedder))
    assert m["embedder"]["name"] == "hash-64"


@pytest.mark.parametrize(
    ("name", "dim", "mentions"),
    [("all-minilm-l6-v2", 64, "all-minilm-l6-v2"), ("hash-64", 384, "dim 384"),
     # The same model through another runner (the name carries it, e.g. all-minilm-l6-v2+onnx-int8).
     ("hash-64+onnx-int8", 64, "the same model with another embedder.backend")],
)
def test_check_compatible_rejects_another_embedder(built_index: Path, fake_config, hash_embedder,
                                                   name: str, dim: int, mentions: str) -> None:
    with pytest.raises(IndexMismatchError) as info:
        CorpusIndex(built_index).check_compatible(name, dim, _params(fake_config, hash_embedder))
    message = str(info.value)
    assert "sirag ingest --rebuild" in message
    assert mentions in message and "hash-64" in message


def test_check_compatible_rejects_other_chunker_params(built_index: Path, fake_config, hash_embedder) -> None:
    params = _params(fake_config, hash_embedder)
    params["section"] = {**params["section"], "max_tokens": 61}
    with pytest.raises(IndexMismatchError, match="sirag ingest --rebuild") as info:
        CorpusIndex(built_index).check_compatible("hash-64", 64, params)
    assert "'section'" in str(info.value)
    # The settings that differ usually came from --config or --set: the rebuild must use them too.
    assert "with the --config and --set options given here" in str(info.value)


def test_an_index_chunked_by_older_code_is_named_as_such(built_index: Path, fake_config, hash_embedder) -> None:
    index = CorpusIndex(built_index)
    path = index.current_dir() / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for params in manifest["chunkers"].values():
        params.pop("algorithm")  # as written before chunking versions were recorded
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(IndexMismatchError, match=r"chunked by an older sirag \(chunking version 1, this one writes "
                                                 r"\d+\); re-ingest with: sirag ingest --rebuild"):
        index.check_compatible("hash-64", 64, _params(fake_config, hash_embedder))


def test_check_compatible_rejects_another_format(built_index: Path, fake_config, hash_embedder) -> None:
    index = CorpusIndex(built_index)
    path = index.current_dir() / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**manifest, "format_version": FORMAT_VERSION + 1}), encoding="utf-8")
    with pytest.raises(IndexMismatchError, match="sirag ingest --rebuild"):
        index.check_compatible("hash-64", 64, _params(fake_config, hash_embedder))


def test_searcher_refuses_an_index_built_by_another_embedder(built_index: Path, fake_config) -> None:
    searcher = Searcher(fake_config, HashEmbedder(dim=32))
    with pytest.raises(IndexMismatchError, match="sirag ingest --rebuild"):
        searcher.search("Who built the lighthouse?", Strategy())


def test_searcher_refuses_changed_chunker_params(built_index: Path, tmp_path: Path, hash_embedder) -> None:
    config = load_config(None, [*fake_overrides(tmp_path), "ingestion.fixed.size=48"])
    with pytest.raises(IndexMismatchError, match="fixed"):
        Searcher(config, hash_embedder).warm_up()


def test_a_chunker_that_was_not_built(tmp_path: Path, corpus_dir: Path, hash_embedder) -> None:
    config = load_config(None, [*fake_overrides(tmp_path), "ingestion.chunkers=[section]"])
    ingest([corpus_dir], config, hash_embedder, progress=False)
    index = CorpusIndex(config.paths.index_dir)
    # Parameters of a chunker the index lacks cannot conflict with it.
    full = chunker_params(load_config(None, fake_overrides(tmp_path)), hash_embedder.max_tokens)
    index.check_compatible("hash-64", 64, full)
    with pytest.raises(IndexMismatchError, match="no 'fixed' chunker"):
        index.load_chunker("fixed")
    assert index.load_chunks("fixed") == []


def test_load_chunker_maps_ids_and_neighbours(built_index: Path) -> None:
    ci = CorpusIndex(built_index).load_chunker("semantic")
    assert ci.dense.ntotal == len(ci.chunks) and ci.dense.d == 64
    for i, c in enumerate(ci.chunks):
        assert ci.by_id[c.chunk_id] == i
        assert ci.neighbours[(c.doc_id, c.position)] == i


# ---------------------------------------------------------------- building blocks


def test_embedding_cache_embeds_each_distinct_text_once(tmp_path: Path, hash_embedder) -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return hash_embedder.embed(texts)

    cache = EmbeddingCache(tmp_path / "cache.sqlite", "hash-64")
    try:
        vecs = cache.embed(["a lamp", "a tree", "a lamp"], embed)
        assert calls == [["a lamp", "a tree"]]
        assert vecs.shape == (3, 64) and np.allclose(vecs[0], vecs[2])
        assert np.allclose(vecs, hash_embedder.embed(["a lamp", "a tree", "a lamp"]))
        again = cache.embed(["a tree", "a boat"], embed)
        assert calls[-1] == ["a boat"]
        assert np.allclose(again[0], vecs[1])
        assert (cache.hits, cache.misses) == (2, 3)
        assert cache.embed([], embed).shape[0] == 0
    finally:
        cache.close()
    # Another embedder never sees these vectors.
    other = EmbeddingCache(tmp_path / "cache.sqlite", "hash-32")
    try:
        assert other.get_many(["a lamp"]) == {}
    finally:
        other.close()


def test_build_dense_switches_to_hnsw_above_the_threshold(hash_embedder) -> None:
    import faiss

    vecs = hash_embedder.embed([f"text number {i}" for i in range(20)])
    assert isinstance(build_dense(vecs, 100), faiss.IndexFlatIP)
    hnsw = build_dense(vecs, 10)
    assert isinstance(hnsw, faiss.IndexHNSWFlat) and hnsw.ntotal == 20
    _, ids = hnsw.search(vecs[7:8], 1)
    assert ids[0][0] == 7


def test_atomic_write_text_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "CURRENT"
    atomic_write_text(target, "gen-1\n")
    atomic_write_text(target, "gen-2\n")
    assert target.read_text(encoding="utf-8") == "gen-2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["CURRENT"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # bm25s divides by a zero average length
def test_write_chunker_accepts_a_chunker_without_chunks(tmp_path: Path) -> None:
    index = CorpusIndex(tmp_path / "index")
    gen = index.new_generation()
    index.write_chunker(gen, "fixed", [], np.zeros((0, 64), np.float32), 10)
    assert (gen / "chunks-fixed.jsonl").read_text(encoding="utf-8") == ""


def test_commit_fsyncs_every_file_of_the_generation(tmp_path: Path, corpus_dir: Path, hash_embedder, monkeypatch) -> None:
    import os

    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    config = load_config(None, fake_overrides(tmp_path))
    ingest([corpus_dir], config, hash_embedder, progress=False)
    live = CorpusIndex(config.paths.index_dir).current_dir()
    files = [p for p in live.rglob("*") if p.is_file() and p.name != "manifest.json"]
    assert any(p.suffix == ".faiss" for p in files) and any("bm25-" in str(p) for p in files)
    # Synced under the building name, before the rename to gen-...
    # Synced under the building folder's name, before the rename to gen-...: compare the paths
    # inside the generation (each chunker's BM25 folder holds files of the same names).
    synced_rel = {Path(*Path(s).parts[i + 1:]) for s in synced
                  for i, part in enumerate(Path(s).parts) if part.startswith(".building-")}
    for p in files:
        assert p.relative_to(live) in synced_rel, f"{p.relative_to(live)} was never fsynced"
    # The building folder itself is synced after its manifest.json was renamed into it, so the
    # generation never goes live without its manifest.
    manifest_at = max(i for i, s in enumerate(synced) if ".manifest.json." in s)
    assert any(s.endswith(f"/{live.name.replace('gen-', '.building-')}") for s in synced[manifest_at + 1:]), synced


def test_dense_index_moves_to_the_gpu_only_when_faiss_has_one(monkeypatch) -> None:
    import faiss

    from self_improving_rag.retrieval.index import on_gpu_if_available

    flat = build_dense(np.eye(4, dtype=np.float32), 100)
    hnsw = build_dense(np.eye(4, dtype=np.float32), 1)
    assert on_gpu_if_available(flat) is flat  # faiss-cpu: no GPU
    moved = []
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", lambda index: moved.append(index) or "gpu-index")
    assert on_gpu_if_available(flat) == "gpu-index" and moved == [flat]
    assert on_gpu_if_available(hnsw) is hnsw  # GPU FAISS has no HNSW: it stays on the CPU


def test_two_local_model_folders_with_one_name_are_two_embedders(tmp_path: Path) -> None:
    from self_improving_rag.retrieval.embedder import make_embedder

    names = []
    for variant, backend in (("a", "onnx-int8"), ("b", "onnx-int8"), ("a", "torch")):
        d = tmp_path / variant / "model"
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps({"hidden_size": 384, "variant": variant}))
        names.append(make_embedder(str(d), backend=backend).name)
    assert names[0] != names[1], "another model in a folder of the same name must not reuse its vectors"
    assert names[0].startswith("model-") and names[0].endswith("+onnx-int8") and names[2] == names[0][:-len("+onnx-int8")]


def test_max_tokens_above_the_embedding_model_limit_is_refused() -> None:
    from self_improving_rag.errors import ConfigError
    from self_improving_rag.generation.registry import embedder_model_dir
    from self_improving_rag.retrieval.embedder import OnnxEmbedder, SentenceTransformerEmbedder

    from self_improving_rag.errors import ModelNotFoundError
    from tests.conftest import skip_or_fail

    try:
        model_dir = embedder_model_dir()
    except ModelNotFoundError:
        skip_or_fail("the packaged embedder is not installed")
    for cls in (OnnxEmbedder, SentenceTransformerEmbedder):
        cls(max_tokens=256)._check_max_tokens(model_dir)
        with pytest.raises(ConfigError, match="embedder.max_tokens=512 .* limit of 256"):
            cls(max_tokens=512)._check_max_tokens(model_dir)


def test_a_searcher_loads_chunkers_only_from_a_generation_it_checked(built_index: Path, fake_config, corpus_dir,
                                                                     hash_embedder, tmp_path: Path) -> None:
    searcher = Searcher(fake_config, hash_embedder)
    searcher.search("Who built the lighthouse?", Strategy(chunker="section"))
    first = searcher._generation
    # Re-ingested meanwhile with other fixed-chunker settings: a chunker this searcher has not
    # loaded yet must not come from the new generation unchecked.
    other = load_config(None, [*fake_overrides(tmp_path), "ingestion.fixed.size=48"])
    ingest([corpus_dir], other, hash_embedder, progress=False)
    assert CorpusIndex(built_index).current_dir() != first
    with pytest.raises(IndexMismatchError, match="'fixed'"):
        searcher.search("Who built the lighthouse?", Strategy(chunker="fixed"))
    # Re-ingested again as this searcher's config reads it: checked, then loaded from.
    ingest([corpus_dir], fake_config, hash_embedder, progress=False, rebuild=True)
    res = searcher.search("Who built the lighthouse?", Strategy(chunker="fixed"))
    assert res.hits and searcher._generation == CorpusIndex(built_index).current_dir()
    searcher.close()


def test_the_rebuild_command_quotes_paths_with_spaces(tmp_path: Path, fake_config, hash_embedder) -> None:
    """The mismatch error's command is meant to be pasted: a folder named "my docs" must stay one argument."""
    import shlex

    from self_improving_rag.ingestion.pipeline import ingest

    docs = tmp_path / "my docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Holmes looked at the lamp. " * 30, encoding="utf-8")
    root = tmp_path / "the index"
    ingest([docs], fake_config, hash_embedder, index_dir=root, progress=False)
    with pytest.raises(IndexMismatchError) as info:
        CorpusIndex(root).check_compatible("other", 64, _params(fake_config, hash_embedder))
    command = str(info.value).split("re-ingest with: ", 1)[1].split(" (with the", 1)[0]
    assert shlex.split(command)[-3:] == ["--index", str(root), str(docs)]


def test_a_current_file_of_random_bytes_is_a_damaged_index(built_index: Path) -> None:
    """Not text, with a NUL byte: the index is named damaged with the rebuild hint, never a
    decoding error; a plain ingest then builds a new live generation."""
    (built_index / "CURRENT").write_bytes(b"\xfc\x00\x81gen\xff")
    index = CorpusIndex(built_index)
    assert index.current_dir() is None
    with pytest.raises(IndexNotFoundError, match=r"damaged: CURRENT points to .*sirag ingest --rebuild"):
        index.manifest()
    for name in ("../elsewhere", ".", "a/b"):
        (built_index / "CURRENT").write_text(name + "\n", encoding="utf-8")
        assert index.current_dir() is None


def test_a_folder_named_current_is_reported_before_anything_is_built(built_index: Path, fake_config,
                                                                     hash_embedder, corpus_dir: Path) -> None:
    (built_index / "CURRENT").unlink()
    (built_index / "CURRENT").mkdir()
    with pytest.raises(IndexNotFoundError, match=r"CURRENT is a folder, not the file .*remove that folder"):
        CorpusIndex(built_index).manifest()
    before = sorted(p.name for p in built_index.iterdir())
    with pytest.raises(IndexNotFoundError, match="remove that folder"):
        ingest([corpus_dir], fake_config, hash_embedder, rebuild=True, progress=False)
    assert sorted(p.name for p in built_index.iterdir()) == before  # no generation built for nothing


def test_atomic_write_text_onto_a_folder_fails_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "CURRENT").mkdir()
    with pytest.raises(IsADirectoryError, match="a folder is in the way"):
        atomic_write_text(tmp_path / "CURRENT", "gen-1\n")
    assert [p.name for p in tmp_path.iterdir()] == ["CURRENT"]


def test_documents_without_a_searchable_word_are_one_clear_error(tmp_path: Path, fake_config,
                                                                 hash_embedder) -> None:
    """Only stop words and single letters: BM25 would have an empty vocabulary. The error says
    so, and the unfinished generation is removed."""
    from self_improving_rag.errors import IngestionError

    docs = tmp_path / "stop"
    docs.mkdir()
    (docs / "a.txt").write_text("It is what it is. x y z\n", encoding="utf-8")
    with pytest.raises(IngestionError, match="no searchable words"):
        ingest([docs], fake_config, hash_embedder, progress=False)
    root = Path(fake_config.paths.index_dir)
    assert not root.exists()  # nothing left of a first ingest that failed: no generation, no folder
    assert CorpusIndex(root).current_dir() is None
