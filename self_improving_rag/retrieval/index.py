"""A corpus index on disk: chunks, dense FAISS and BM25 indexes per chunker, with a manifest.

Layout of a corpus directory::

    CURRENT                 name of the live generation (replaced atomically)
    gen-<id>/manifest.json  embedder, chunker parameters, file hashes, versions, counts
    gen-<id>/chunks-<chunker>.jsonl
    gen-<id>/dense-<chunker>.faiss
    gen-<id>/bm25-<chunker>/      bm25s arrays (no pickle)
    embeddings.sqlite       embedding cache keyed by (embedder, sha256 of text): embedding_cache.py

An ingest writes a complete new generation and only then points ``CURRENT`` at it, so an
interrupted ingest leaves the previous index usable.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shlex
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexMismatchError, IndexNotFoundError, IngestionError
from ..types import Chunk

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file through a temporary file, fsync and rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(errno.EISDIR, "a folder is in the way of this file; remove it", str(path))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no stray temporary file, whatever went wrong
        raise


@dataclass
class ChunkerIndex:
    """Everything retrieval needs for one chunker."""

    name: str
    chunks: list[Chunk]
    dense: Any  # faiss.Index
    bm25: Any  # bm25s.BM25
    by_id: dict[str, int] = field(default_factory=dict)
    neighbours: dict[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        self.neighbours = {(c.doc_id, c.position): i for i, c in enumerate(self.chunks)}


#: Above this many vectors a chunker's dense index is HNSW (approximate) instead of exact.
ANN_THRESHOLD = 200_000


def build_dense(vectors: np.ndarray, ann_threshold: int = ANN_THRESHOLD):
    """Exact inner product on unit vectors; HNSW above ``ann_threshold`` vectors."""
    import faiss

    dim = vectors.shape[1]
    if len(vectors) > ann_threshold:
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexFlatIP(dim)
    if len(vectors):
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def bm25_tokenize(texts: list[str]):
    import bm25s

    from ..text import STOP_WORDS, stemmer

    return bm25s.tokenize(texts, stopwords=sorted(STOP_WORDS), stemmer=stemmer().stemWords, show_progress=False)


def build_bm25(texts: list[str]):
    import bm25s

    tokens = bm25_tokenize(texts)
    if not tokens.vocab:  # bm25s fails on an empty vocabulary with an error that names nothing
        raise IngestionError("the documents hold no searchable words (every word is a stop word, a single letter "
                             "or punctuation); add documents with text to search")
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    return retriever


class _PartsDisagree(ValueError):
    """A chunker's files that do not belong together (its message says how)."""


#: A generation folder's name as :meth:`CorpusIndex.new_generation` makes it (``.building-...``
#: while it is written, ``gen-...`` once live). Only such folders are an index's own: a user's
#: ``gen-ai-notes/`` beside them is neither removed with old generations nor read as one.
_GENERATION_NAME = re.compile(r"(?:gen|\.building)-\d{8}T\d{6}-[0-9a-f]{6}")


def is_generation_name(name: str) -> bool:
    return _GENERATION_NAME.fullmatch(name) is not None


class CorpusIndex:
    """Reads and writes generations of a corpus directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- reading -------------------------------------------------------------
    def current_dir(self) -> Path | None:
        """The live generation's folder, or None when there is none: no CURRENT, or one that is
        damaged (unreadable, not text, naming no generation with a manifest)."""
        name = self._current_name()
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        d = self.root / name
        return d if (d / "manifest.json").is_file() else None

    def enclosing_index(self) -> Path | None:
        """The index whose generation folder (``gen-...``, or ``.building-...`` while one is built)
        this folder is or lies inside, if any: that index's next ingest removes such a folder with
        all it holds. Any other folder inside an index (``index/sherlock`` beside the generations
        of an index at ``index/``) is left alone by it, and is not reported. The path is read as
        written and as the folder it leads to: a link to a generation folder is inside it too."""
        written = Path(os.path.normpath(self.root.absolute()))
        try:
            real = self.root.resolve()
        except (OSError, RuntimeError):  # a link in a loop (Python 3.11 raises RuntimeError)
            real = written
        for path in dict.fromkeys((written, real)):
            for parent in path.parents:
                if (is_generation_name(path.relative_to(parent).parts[0])
                        and CorpusIndex(parent).current_dir() is not None):
                    return parent
        return None

    def live_dir(self) -> Path:
        """The live generation's folder; IndexNotFoundError (:meth:`missing_error`) when there is none."""
        d = self.current_dir()
        if d is None:
            raise self.missing_error()
        return d

    def _current_name(self) -> str | None:
        try:
            return (self.root / "CURRENT").read_bytes().decode("utf-8").strip()
        except (OSError, UnicodeDecodeError):  # missing, a folder, unreadable, not text
            return None

    def missing_error(self) -> IndexNotFoundError:
        """Why there is no live generation: never built, or a CURRENT pointer to nothing."""
        cur = self.root / "CURRENT"
        rebuild = "rebuild it with: sirag ingest --rebuild PATH... (--index " + str(self.root) + ")"
        if cur.is_dir():
            return IndexNotFoundError(f"the index in {self.root} is damaged: {cur} is a folder, not the file naming "
                                      f"the live generation; remove that folder, then {rebuild}")
        if cur.is_file():
            try:
                shown = repr(cur.read_bytes()[:80].decode("utf-8", errors="replace").strip())
            except OSError as exc:
                shown = f"nothing readable ({exc.strerror or exc})"
            return IndexNotFoundError(
                f"the index in {self.root} is damaged: CURRENT points to {shown}, which holds no manifest; {rebuild}"
            )
        if (outer := self.enclosing_index()) is not None:
            # A generation folder (gen-...) named as the index: building one there would be removed
            # with that generation by the outer index's next ingest.
            return IndexNotFoundError(f"{self.root} is a folder inside the index {outer} (in one of its generation "
                                      f"folders, gen-..., sirag's own files), not an index; pass --index {outer}")
        # The absolute folder: a relative paths.index_dir is read from the current folder.
        return IndexNotFoundError(f"no index in {self.root.absolute()}; build one with: sirag ingest PATH... "
                                  "(or pass --index DIR)")

    def manifest(self, directory: Path | None = None) -> dict[str, Any]:
        """The manifest of ``directory`` (a generation), by default the live one."""
        d = self.live_dir() if directory is None else directory
        try:
            return json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexNotFoundError(f"the index manifest in {d} is unreadable ({exc}); rebuild with: sirag ingest --rebuild PATH...") from exc

    def check_compatible(self, embedder_name: str, dim: int, chunker_params: dict[str, dict],
                         directory: Path | None = None) -> dict[str, Any]:
        """Raise IndexMismatchError when the index (``directory``, by default the live generation)
        was built with another configuration."""
        m = self.manifest(directory)
        emb = m.get("embedder", {})
        sources = " ".join(shlex.quote(str(s)) for s in m.get("sources", [])) or "PATH..."
        how = (f"re-ingest with: sirag ingest --rebuild --index {shlex.quote(str(self.root))} {sources}"
               " (with the --config and --set options given here, so that it is built as this command reads it)")
        if m.get("format_version") != FORMAT_VERSION:
            raise IndexMismatchError(f"index {self.root} has format {m.get('format_version')}, this sirag reads {FORMAT_VERSION}; {how}")
        if emb.get("name") != embedder_name or emb.get("dim") != dim:
            # The name carries the runner ("+onnx-int8"): the same model run another way is named so.
            same_model = str(emb.get("name", "")).split("+")[0] == embedder_name.split("+")[0]
            backend = " (the same model with another embedder.backend)" if same_model else ""
            raise IndexMismatchError(
                f"index {self.root} was built with embedder {emb.get('name')} (dim {emb.get('dim')}), "
                f"the config uses {embedder_name} (dim {dim}){backend}; vectors cannot be mixed: {how}"
            )
        for name, params in chunker_params.items():
            built = m.get("chunkers", {}).get(name)
            if built is not None and built != params:
                others = {k for k in set(built) | set(params) if built.get(k) != params.get(k)}
                if others == {"algorithm"}:  # same settings, older chunking code (a missing key is version 1)
                    raise IndexMismatchError(
                        f"index {self.root} was chunked by an older sirag (chunking version "
                        f"{built.get('algorithm', 1)}, this one writes {params.get('algorithm')}); {how}")
                raise IndexMismatchError(
                    f"index {self.root} built chunker '{name}' with {built}, the config asks for {params}; {how}"
                )
        return m

    def load_chunker(self, name: str, directory: Path | None = None) -> ChunkerIndex:
        """One chunker's index from ``directory`` (a generation), by default the live one."""
        import bm25s
        import faiss

        d = self.live_dir() if directory is None else directory
        chunks_path = d / f"chunks-{name}.jsonl"
        if not chunks_path.is_file():
            built = ", ".join(self.manifest(d).get("chunkers", {})) or "none"
            if name in self.manifest(d).get("chunkers", {}):
                raise IndexNotFoundError(
                    f"the index in {self.root} is damaged: chunker '{name}' was built but {chunks_path.name} is "
                    f"missing; rebuild it with: sirag ingest --rebuild PATH... (--index {shlex.quote(str(self.root))})"
                )
            raise IndexMismatchError(
                f"index {self.root} has no '{name}' chunker (built: {built}); "
                f"re-ingest with ingestion.chunkers including {name}"
            )
        try:
            with chunks_path.open(encoding="utf-8") as fh:
                chunks = [Chunk(**json.loads(line)) for line in fh if line.strip()]
            dense = faiss.read_index(str(d / f"dense-{name}.faiss"))
            bm25_dir = d / f"bm25-{name}"
            bm25 = (bm25s.BM25.load(str(bm25_dir), load_corpus=False, show_progress=False, allow_pickle=False)
                    if bm25_dir.is_dir() else None)
            # The three parts are written together: counts that disagree (a line lost from the
            # chunks file, a missing BM25 folder) would mis-map hits to chunks or silently empty a
            # retriever, so they are damage, named as such.
            if dense.ntotal != len(chunks):
                raise _PartsDisagree(f"{dense.ntotal} vectors for {len(chunks)} chunks")
            if chunks and bm25 is None:
                raise _PartsDisagree(f"{bm25_dir.name} is missing")
            if bm25 is not None and int(bm25.scores.get("num_docs", len(chunks))) != len(chunks):
                raise _PartsDisagree(f"BM25 holds {bm25.scores.get('num_docs')} documents for {len(chunks)} chunks")
        except (OSError, RuntimeError, ValueError, TypeError, KeyError) as exc:
            raise IndexNotFoundError(
                f"the '{name}' index in {d} is damaged ({exc if isinstance(exc, _PartsDisagree) else type(exc).__name__}); "
                "rebuild it with: "
                f"sirag ingest --rebuild --index {shlex.quote(str(self.root))} PATH..."
            ) from exc
        return ChunkerIndex(name=name, chunks=chunks, dense=on_gpu_if_available(dense), bm25=bm25)

    def load_chunks(self, name: str) -> list[Chunk]:
        d = self.current_dir()
        p = d / f"chunks-{name}.jsonl" if d else None
        if p is None or not p.is_file():
            return []
        with p.open(encoding="utf-8") as fh:
            return [Chunk(**json.loads(line)) for line in fh if line.strip()]

    # -- writing -------------------------------------------------------------
    def new_generation(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        d = self.root / f".building-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        d.mkdir()
        return d

    def write_chunker(self, gen: Path, name: str, chunks: list[Chunk], vectors: np.ndarray,
                      ann_threshold: int = ANN_THRESHOLD) -> None:
        import faiss

        with (gen / f"chunks-{name}.jsonl").open("w", encoding="utf-8") as fh:
            for c in chunks:
                fh.write(json.dumps(c.to_json(), ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        faiss.write_index(build_dense(vectors, ann_threshold), str(gen / f"dense-{name}.faiss"))
        if chunks:
            build_bm25([c.embed_text for c in chunks]).save(str(gen / f"bm25-{name}"), show_progress=False,
                                                             allow_pickle=False)

    def commit(self, gen: Path, manifest: dict[str, Any]) -> Path:
        """Seal a generation and make it current; older generations are removed.

        Every file of the generation (chunks, FAISS index, BM25 arrays) and its folders are
        fsynced before the manifest is written and the folder renamed, so a power cut can leave
        an unfinished ``.building-`` folder behind but never a live generation with torn files."""
        _fsync_tree(gen)
        atomic_write_text(gen / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False))
        _fsync_dir(gen)  # the manifest's rename, before the generation goes live
        final = self.root / gen.name.replace(".building-", "gen-")
        os.replace(gen, final)
        _fsync_dir(self.root)
        atomic_write_text(self.root / "CURRENT", final.name + "\n")
        _fsync_dir(self.root)
        self.remove_stale(final.name)
        return final

    def remove_stale(self, live: str) -> None:
        """Remove the generations other than ``live`` (a folder name): older ones, and the unfinished
        ones (``.building-`` folders) of ingests that were killed. Each can be as large as the index;
        an ingest that writes nothing (the index up to date) removes them too, or they would stay
        until one changes the index. A ``.building-`` folder younger than 5 s is left: perhaps
        another ingest's in flight; a later ingest removes it."""
        for old in self.root.iterdir():
            if old.is_dir() and old.name != live and is_generation_name(old.name):
                if old.name.startswith(".building-") and time.time() - old.stat().st_mtime < 5:
                    continue
                shutil.rmtree(old, ignore_errors=True)


def on_gpu_if_available(index):
    """The FAISS index copied to the GPUs when the installed faiss has any (the ``gpu`` extra,
    ``faiss-gpu-cu12`` in place of ``faiss-cpu``); the same index otherwise. Exact inner product
    gives the same results on the GPU up to floating-point ties; HNSW indexes stay on the CPU
    (GPU FAISS has no HNSW)."""
    import faiss

    get_num_gpus = getattr(faiss, "get_num_gpus", None)
    if get_num_gpus is None or get_num_gpus() < 1 or isinstance(index, faiss.IndexHNSW):
        return index
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError) as exc:  # a GPU build that cannot use its GPU: stay on the CPU
        log.warning("FAISS index stays on the CPU: %s", exc)
        return index


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then each folder (deepest first), then ``root``."""
    dirs = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with p.open("rb") as fh:
                os.fsync(fh.fileno())
        elif p.is_dir():
            dirs.append(p)
    for d in sorted(dirs, key=lambda x: len(x.parts), reverse=True):
        _fsync_dir(d)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
