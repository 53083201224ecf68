"""Ingest documents into a corpus index: every configured chunker, embedded once, persisted."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from .. import __version__
from ..config import Config
from ..errors import IngestionError, InterruptedAfterCommit, NoTextError, SiragError
from ..retrieval.embedder import Embedder
from ..retrieval.embedding_cache import EmbeddingCache
from ..retrieval.index import ANN_THRESHOLD, FORMAT_VERSION, CorpusIndex
from ..types import Chunk
from .chunk_vectors import chunker_params, pooled_vectors
from .chunkers import make_chunker
from .doc_ids import assign_doc_ids
from .fingerprints import file_sha256, stamp
from .loaders import load_document
from .lock import ingest_lock
from .report import IngestReport
from .source_files import SUPPORTED_SUFFIXES, iter_source_files


def _parts_present(gen: Path | None, manifest: dict) -> bool:
    """Whether a generation holds the chunks and dense index of every chunker its manifest lists."""
    return gen is not None and all((gen / f"chunks-{n}.jsonl").is_file() and (gen / f"dense-{n}.faiss").is_file()
                                   for n in manifest.get("chunkers", {}))


def _check_index_folder(root: Path, paths: list[str | Path]) -> None:
    """Refuse an index folder that is a documents folder: the index files would be written among
    the user's documents. (An index inside a documents folder is left out of the walk.)"""
    where = root.resolve()
    for p in paths:
        if Path(p).is_dir() and Path(p).resolve() == where:
            raise IngestionError(f"the index folder {root} is the documents folder {p}: the index files would be "
                                 "written among the documents; nothing was changed. Pass --index another folder, "
                                 f"e.g. --index index/{where.name or 'docs'}")
    if (outer := CorpusIndex(root).enclosing_index()) is not None:
        # In a generation folder (gen-...) its files would be removed with it by that index's next
        # ingest. (Another folder inside an index, index/sherlock beside index/gen-..., is safe.)
        raise IngestionError(f"the index folder {root} is inside the index {outer} (in one of its generation "
                             "folders, gen-..., which that index's next ingest removes with all they hold); "
                             f"nothing was changed. Pass --index a folder outside {outer}'s gen-... folders, or "
                             f"--index {outer} to ingest into that index")
    if root.is_dir() and not (root / "CURRENT").exists():
        docs = sorted(c.name for c in root.iterdir() if c.is_file() and c.suffix.lower() in SUPPORTED_SUFFIXES)
        if docs:
            raise IngestionError(f"{root} holds documents ({', '.join(docs[:3])}{' ...' if len(docs) > 3 else ''}) "
                                 "and is not an index; nothing was changed. Pass the documents as PATH and "
                                 "--index a new or empty folder (or an existing index)")


def ingest(paths: list[str | Path], config: Config, embedder: Embedder, index_dir: str | Path | None = None,
           rebuild: bool = False, progress: bool = True, exclude: tuple[str | Path, ...] = (),
           wait_s: float = 0.0) -> IngestReport:
    """Ingest files and folders into the corpus index; unchanged files reuse their chunks.

    Folders are walked without sirag's own files: the index, its log files (``sirag-*.jsonl`` in
    the log folder), the memory store (with its -wal and -shm files) and ``exclude`` (a batch's
    output folder). A path given directly is ingested whatever it is. ``wait_s``: how long to wait
    for another ingest of the same index to finish before giving up."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    root = Path(index_dir if index_dir is not None else config.paths.index_dir)
    report = IngestReport(index_dir=str(root))
    # A mistyped path must not quietly drop that document from an index that holds it.
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise IngestionError(
            f"no such file or folder: {', '.join(missing)}; nothing was changed. Fix the path or leave it out "
            "(the index holds exactly the paths given, so a missing one would remove its documents)"
        )
    for what, where in (("--index", root), ("--memory", Path(config.paths.memory_db))):
        try:
            where.resolve()
        except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop of links
            raise IngestionError(f"{what} {where} is a link that leads to itself (a loop of links); nothing was "
                                 f"changed. Remove the link, or pass {what} another path") from None
    _check_index_folder(root, paths)
    memory = Path(config.paths.memory_db)
    logs = sorted(Path(config.paths.log_dir).glob("sirag-*.jsonl")) if Path(config.paths.log_dir).is_dir() else []
    own = (root, *logs, memory, *(memory.with_name(memory.name + s) for s in ("-wal", "-shm")),
           *(Path(p) for p in exclude))
    files, problems = iter_source_files([Path(p) for p in paths], exclude=tuple(p.resolve() for p in own))
    report.problems.extend(problems)
    if not files:
        raise IngestionError(
            "nothing to ingest: " + ("; ".join(problems) if problems else "no .txt/.md/.html/.pdf files found")
            + "; pass files or folders with supported documents"
        )
    embedder.warm_up()
    tokenizer = embedder.tokenizer
    params = chunker_params(config, embedder.max_tokens)
    chunkers = {n: make_chunker(n, getattr(config.ingestion, n).model_dump(), embedder.max_tokens)
                for n in config.ingestion.chunkers}
    index = CorpusIndex(root)
    if (Path(root) / "CURRENT").is_dir():  # found before the build, not after it
        raise index.missing_error()
    with ingest_lock(root, wait_s):
        previous: dict = {}
        prev_manifest: dict | None = None
        prev_chunks: dict[str, dict[str, list[Chunk]]] = {}
        held_files: dict[str, dict] = {}
        held_chunkers: list[str] = []
        if index.current_dir() is not None:
            try:
                held_files = dict(index.manifest().get("files", {}))
                held_chunkers = list(index.manifest().get("chunkers", {}))
            except (SiragError, OSError, ValueError, TypeError):
                pass  # an unreadable manifest is rebuilt below; nothing to compare with
        held_before = set(held_files)
        if not rebuild and index.current_dir() is not None:
            try:
                m = index.manifest()
                same_embedder = m.get("embedder", {}).get("name") == embedder.name
                previous = m.get("files", {})
                report.changed_settings = [name for name in chunkers
                                           if not same_embedder or m.get("chunkers", {}).get(name) != params[name]]
                report.older_chunking = [name for name in report.changed_settings
                                         if same_embedder and _only_version_differs(m.get("chunkers", {}).get(name),
                                                                                    params[name])]
                if same_embedder:
                    for name in chunkers:
                        if name not in report.changed_settings:
                            by_doc: dict[str, list[Chunk]] = {}
                            held = index.load_chunks(name)
                            expected = m.get("counts", {}).get(name)
                            if expected is not None and expected != len(held):
                                raise ValueError(f"chunks-{name}.jsonl holds {len(held)} chunks, its manifest "
                                                 f"{expected}")
                            for c in held:
                                by_doc.setdefault(c.doc_id, []).append(c)
                            prev_chunks[name] = by_doc
                # Reported unchanged only when every part of the live generation is there.
                prev_manifest = m if _parts_present(index.current_dir(), m) else None
            except (SiragError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                # The index is derived from the documents: a damaged one is built again from them.
                previous, prev_chunks, prev_manifest = {}, {}, None
                report.changed_settings, report.older_chunking = [], []  # everything is built again: no setting to name
                report.problems.append(f"the index in {root} is damaged ({type(exc).__name__}: {exc}); "
                                       "it is built again from the documents")
        cache = EmbeddingCache(root / "embeddings.sqlite", embedder.name)
        hits0, miss0 = cache.hits, cache.misses
        try:
            all_chunks: dict[str, list[Chunk]] = {n: [] for n in chunkers}
            files_meta: dict[str, dict] = {}
            max_bytes = int(config.ingestion.max_file_mb * 2**20)
            shas: dict[Path, str] = {}

            def sha_of(f: Path) -> str:  # a file moved since the last ingest is hashed once, not twice
                if f not in shas:
                    shas[f] = file_sha256(f)
                return shas[f]

            ids = assign_doc_ids(files, held_files, max_bytes, sha_of)
            t_chunk = time.perf_counter()
            bar = tqdm(files, desc="chunking", unit="file", disable=not progress or None, leave=False)
            sentence_embed = lambda texts: cache.embed(texts, embedder.embed)  # noqa: E731
            # Files of documents the index holds that cannot be read now (binary, unreadable, too
            # large): the ingest stops rather than drop what the index holds (a file left without
            # text, empty or whitespace only, is the user's edit: its document is dropped, with a warning).
            unreadable: list[tuple[str, str]] = []
            for f in bar:
                doc_id = ids[f]
                try:
                    st = f.stat()
                    sha = sha_of(f) if st.st_size <= max_bytes else None
                except OSError as exc:
                    problem = f"{f}: cannot be read ({exc.strerror}); check the path and its permissions"
                    if doc_id in held_files:
                        unreadable.append((doc_id, problem))
                    report.problems.append(problem)
                    continue
                old = previous.get(doc_id)
                same_content = sha is not None and bool(old) and old.get("sha256") == sha
                if same_content and all(doc_id in prev_chunks.get(n, {}) for n in chunkers):
                    for n in chunkers:
                        all_chunks[n].extend(prev_chunks[n][doc_id])
                    # Same content, perhaps at another place: the manifest records where it is now.
                    files_meta[doc_id] = {**old, "path": str(f.resolve()), "file": str(f.absolute()), **stamp(st)}
                    report.reused_documents += 1
                    continue
                try:
                    doc = load_document(f, max_bytes=max_bytes)
                except IngestionError as exc:
                    if doc_id in held_files and not isinstance(exc, NoTextError):  # emptied: the user's edit
                        unreadable.append((doc_id, str(exc)))
                    report.problems.append(str(exc))
                    continue
                doc = _with_id(doc, doc_id)
                bad = doc.meta.get("invalid_utf8")
                if bad:
                    report.problems.append(
                        f"{f}: {bad['count']} byte sequence(s) are not valid UTF-8 (the first at byte {bad['first_byte']}); "
                        "they read as '\ufffd' and the rest as UTF-8; re-save the file as UTF-8 to keep those characters")
                counts = {}
                for n, chunker in chunkers.items():
                    t_c = time.perf_counter()
                    cs = chunker.chunk(doc, tokenizer, sentence_embed)
                    key = f"chunk_{n}"
                    report.timings_ms[key] = report.timings_ms.get(key, 0.0) + (time.perf_counter() - t_c) * 1000
                    all_chunks[n].extend(cs)
                    counts[n] = len(cs)
                if not any(counts.values()):
                    report.problems.append(f"{f}: no text to index after cleaning; check the file's content")
                    for n in chunkers:
                        all_chunks[n] = [c for c in all_chunks[n] if c.doc_id != doc_id]
                    continue
                files_meta[doc_id] = {
                    "path": str(f.resolve()), "file": str(f.absolute()), "sha256": doc.sha256 or sha, "title": doc.title,
                    "author": doc.author, "encoding": doc.encoding, "chars": len(doc.text),
                    "sections": len(doc.sections), **stamp(st),
                }
                if not same_content:
                    report.changed_documents += 1
            report.timings_ms["chunk"] = (time.perf_counter() - t_chunk) * 1000
            if unreadable:
                doc_id, problem = unreadable[0]
                more = (f"; and {len(unreadable) - 1} more document(s) the index holds cannot be read now: "
                        f"{', '.join(d for d, _ in unreadable[1:])}" if len(unreadable) > 1 else "")
                raise IngestionError(f"{problem}. The index holds its document {doc_id} from an earlier ingest, so "
                                     f"nothing was changed{more}: fix the file, or move it out of the paths given "
                                     "(or delete it) to drop its document from the index")
            if not files_meta:
                raise IngestionError("no document could be ingested: " + "; ".join(report.problems))
            settings = {
                "format_version": FORMAT_VERSION,
                "embedder": {"name": embedder.name, "dim": int(embedder.dim), "max_tokens": embedder.max_tokens},
                "chunkers": params,
                "files": files_meta,
                "sources": [str(Path(p).resolve()) for p in paths],
                "ann_threshold": ANN_THRESHOLD,
                "versions": _versions(),  # an upgraded sirag, FAISS or bm25s writes its files again
            }
            if (prev_manifest is not None and report.reused_documents == len(files_meta)
                    and _same(settings, {k: prev_manifest.get(k) for k in settings})):
                # Nothing to change: keep the live generation instead of writing an identical one.
                index.remove_stale(index.current_dir().name)
                report.unchanged = True
                report.chunks = dict(prev_manifest.get("counts", {}))
                report.documents = [{"doc_id": k, **v} for k, v in files_meta.items()]
                report.timings_ms["total"] = (time.perf_counter() - t0) * 1000
                return report
            t_embed = time.perf_counter()
            gen = index.new_generation()
            try:
                ebar = tqdm(total=0, desc="embedding", unit="text", disable=not progress or None, leave=False)

                def embed_cached(texts: list[str]) -> np.ndarray:
                    distinct, before = len(set(texts)), cache.misses
                    ebar.total += distinct
                    ebar.refresh()
                    got = cache.embed(texts, embedder.embed, progress=ebar.update)
                    ebar.update(distinct - (cache.misses - before))  # the cached ones
                    return got

                for n, cs in all_chunks.items():
                    t_e = time.perf_counter()
                    if not cs:
                        vecs = np.zeros((0, embedder.dim), np.float32)
                    elif params[n]["vectors"] == "pooled":
                        vecs = pooled_vectors(cs, embed_cached, embedder.dim, cache)
                    else:
                        vecs = embed_cached([c.embed_text for c in cs])
                    index.write_chunker(gen, n, cs, vecs, ANN_THRESHOLD)
                    report.timings_ms[f"embed_index_{n}"] = (time.perf_counter() - t_e) * 1000
                    report.chunks[n] = len(cs)
                ebar.close()
                report.cached_texts = cache.hits - hits0
                report.embedded_texts = cache.misses - miss0
                report.timings_ms["embed_and_index"] = (time.perf_counter() - t_embed) * 1000
                manifest = {
                    **settings,
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "counts": report.chunks,
                }
                try:
                    index.commit(gen, manifest)
                except KeyboardInterrupt as exc:
                    live = index.current_dir()
                    if live is not None and live.name == gen.name.replace(".building-", "gen-"):
                        # Ctrl-C while the older generation was being removed: the new one is live.
                        raise InterruptedAfterCommit(
                            f"stopped while finishing; the new index in {root} is complete and in use (an earlier "
                            "generation may be left on disk, which the next ingest removes)"
                        ) from exc
                    raise
            except BaseException:
                shutil.rmtree(gen, ignore_errors=True)  # an unfinished generation is never used: no debris
                raise
        finally:
            cache.close()
    report.documents = [{"doc_id": k, **v} for k, v in files_meta.items()]
    report.removed_documents = sorted(held_before - set(files_meta))
    report.removed_chunkers = [n for n in held_chunkers if n not in chunkers]
    report.timings_ms["total"] = (time.perf_counter() - t0) * 1000
    return report


def _only_version_differs(held: object, params: dict) -> bool:
    """Whether a chunker's recorded parameters differ from ``params`` only in the chunking version
    (a missing "algorithm" is version 1, as the index reader takes it)."""
    if not isinstance(held, dict):
        return False
    keys = set(held) | set(params)
    return {k for k in keys if held.get(k, 1 if k == "algorithm" else None) != params.get(k)} == {"algorithm"}


def _same(a: dict, b: dict) -> bool:
    """Equal once both are written as JSON (tuples read back as lists, as the manifest holds them)."""
    return json.loads(json.dumps(a, sort_keys=True)) == json.loads(json.dumps(b, sort_keys=True))


def _with_id(doc, doc_id: str):
    from dataclasses import replace

    return replace(doc, doc_id=doc_id)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"sirag": __version__}
    for pkg in ("faiss-cpu", "bm25s", "sentence-transformers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
