"""Ingest documents into a corpus index: every configured chunker, embedded once, persisted."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from .. import __version__
from ..config import Config
from ..errors import IngestionError, InterruptedAfterCommit, NoTextError, SiragError
from ..retrieval.embedder import Embedder
from ..retrieval.embedding_cache import EmbeddingCache
from ..retrieval.index import ANN_THRESHOLD, FORMAT_VERSION, CorpusIndex
from ..types import Chunk
from .chunkers import make_chunker
from .chunkers.base import CHUNKING_VERSION
from .loaders import SUPPORTED_SUFFIXES, doc_slug, iter_source_files, load_document
from .sentences import split_sentences

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What an ingest did, for the CLI and for benchmarks."""

    index_dir: str
    documents: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    chunks: dict[str, int] = field(default_factory=dict)
    reused_documents: int = 0
    # Documents the index held before and no longer holds (not among the paths given, removed,
    # or with no text now), by document id.
    removed_documents: list[str] = field(default_factory=list)
    # Chunkers the index held and ``ingestion.chunkers`` no longer lists: their chunks are not in
    # the new index (a search with one of them is refused until an ingest builds it again).
    removed_chunkers: list[str] = field(default_factory=list)
    # Documents that are new to the index or whose content changed (the others were chunked
    # again only because a chunker's settings changed, or reused).
    changed_documents: int = 0
    # Chunkers the index held with other settings (or with another embedder), re-chunked for
    # every document; empty for a new index or a rebuild.
    changed_settings: list[str] = field(default_factory=list)
    # Those of changed_settings whose settings are the same but were chunked by an older sirag
    # (another CHUNKING_VERSION): its loaders or chunkers read the same files differently.
    older_chunking: list[str] = field(default_factory=list)
    embedded_texts: int = 0
    cached_texts: int = 0
    # True when nothing changed (same files, settings and paths): the live index was left as it is.
    unchanged: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return self.__dict__.copy()

    def summary_notes(self) -> list[str]:
        """What changed in the index, one line each (empty when nothing did): the documents new
        or changed, and the chunkers re-chunked because their settings differ from the index's."""
        if self.unchanged:
            return []
        lines = []
        if self.changed_documents:
            lines.append(f"indexed {self.changed_documents} new or changed document(s) of {len(self.documents)} "
                         f"into {self.index_dir}")
        other = [n for n in self.changed_settings if n not in self.older_chunking]
        if other:
            lines.append(f"re-chunked all {len(self.documents)} document(s) of {self.index_dir} with chunker(s) "
                         f"{', '.join(other)}: the index held them with other settings (or none); "
                         "it now holds chunks made with the settings given")
        if self.older_chunking:
            lines.append(f"re-chunked all {len(self.documents)} document(s) of {self.index_dir} with chunker(s) "
                         f"{', '.join(self.older_chunking)}: the index was made by an older sirag, which reads or "
                         f"chunks some files differently (chunking version {CHUNKING_VERSION} now); same settings")
        return lines

    def notices(self) -> list[str]:
        """The console lines for files left out and documents dropped (stderr of every command that ingests)."""
        lines = [f"warning: {p}" for p in self.problems]
        if self.removed_documents:
            lines.append(f"note: {len(self.removed_documents)} document(s) the index held are no longer in it: "
                         f"{', '.join(self.removed_documents)} (a file removed or not among the paths given, or one "
                         "with no text now, is dropped)")
        if self.removed_chunkers:
            names = ", ".join(self.removed_chunkers)
            lines.append(f"note: the index no longer holds the chunks of chunker(s) {names}: ingestion.chunkers leaves "
                         f"them out (searching with them needs an ingest whose ingestion.chunkers includes {names})")
        return lines


#: Chunkers whose chunk vectors are pooled from their sentences' embeddings (one shared sentence
#: pass) instead of embedding each chunk's text: ingest ~2x faster. Section chunks (the default
#: chunker) keep full vectors: pooling them lowered their dense recall@5 on sherlock_dev from 0.514
#: to 0.405 (docs/results.md, "Ingestion").
POOLED_CHUNKERS = ("fixed", "semantic")


def chunker_params(config: Config, embed_limit: int) -> dict[str, dict]:
    """Parameters of each configured chunker, as recorded in the manifest (with how its
    chunk vectors are made: ``full`` embeds each chunk, ``pooled`` pools its sentences)."""
    out = {}
    for name in config.ingestion.chunkers:
        params = getattr(config.ingestion, name).model_dump()
        out[name] = make_chunker(name, params, embed_limit).params()
        out[name]["vectors"] = "pooled" if name in POOLED_CHUNKERS else "full"
        out[name]["algorithm"] = CHUNKING_VERSION
    return out


def chunk_sentences(chunks: list[Chunk]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sentences of each chunk: (texts, owning chunk index, weight), weight = sqrt(characters)."""
    texts: list[str] = []
    owner: list[int] = []
    weight: list[float] = []
    for i, c in enumerate(chunks):
        spans = split_sentences(c.text) or [(0, len(c.text))]
        for s, e in spans:
            texts.append(c.text[s:e])
            owner.append(i)
            weight.append(max(e - s, 1) ** 0.5)
    return texts, np.asarray(owner, dtype=np.int64), np.asarray(weight, dtype=np.float32)


POOLED_KEY = "pooled-v1\x00"  # cache key prefix of a pooled chunk vector (bump if the pooling changes)


def pooled_vectors(chunks: list[Chunk], embed_texts, dim: int, cache: EmbeddingCache | None = None) -> np.ndarray:
    """Chunk vectors pooled from sentence vectors: the unit-normalised, sqrt(length)-weighted sum.

    One sentence pass serves every pooled chunker (the semantic chunker embeds the same
    sentences to find its breakpoints, and overlapping fixed windows share theirs), and no part
    of a chunk is cut off by the embedder's 256-word-piece window.
    """
    out = np.zeros((len(chunks), dim), dtype=np.float32)
    if not chunks:
        return out
    known = cache.get_many([POOLED_KEY + c.text for c in chunks]) if cache is not None else {}
    todo = [i for i, c in enumerate(chunks) if POOLED_KEY + c.text not in known]
    for i, c in enumerate(chunks):
        v = known.get(POOLED_KEY + c.text)
        if v is not None:
            out[i] = v
    if todo:
        sub = [chunks[i] for i in todo]
        texts, owner, weight = chunk_sentences(sub)
        vecs = embed_texts(texts)
        pooled = np.zeros((len(sub), dim), dtype=np.float32)
        np.add.at(pooled, owner, vecs * weight[:, None])
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        out[todo] = pooled
        if cache is not None:
            cache.put_many({POOLED_KEY + c.text: pooled[j] for j, c in enumerate(sub)})
    return out


# What an ingest writes in an index folder before its first generation is live: removed when that
# first ingest fails, so a failed first ingest leaves no index folder behind (nor a lock and a cache).
_FIRST_INGEST_FILES = ("ingest.lock", "embeddings.sqlite", "embeddings.sqlite-wal", "embeddings.sqlite-shm",
                       "embeddings.sqlite-journal")


@contextmanager
def _ingest_lock(root: Path, wait_s: float = 0.0) -> Iterator[None]:
    """The index folder's writer lock. ``wait_s``: how long to wait for another ingest to finish
    (a batch that only checks its index is up to date waits; ``sirag ingest`` does not).

    When the work under the lock fails and the folder holds no index (no ``CURRENT``), what the
    ingest made is removed: its lock and cache files, and the folders it created, when empty."""
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        created = [p for p in (root, *root.parents) if not p.exists()]  # made by this ingest, innermost first
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise IngestionError(f"index path {root} is not a directory; pass --index with a directory path") from exc
        except PermissionError as exc:
            raise IngestionError(f"cannot create index directory {root} (permission denied); pass a writable "
                                 "--index") from exc
        fresh = [n for n in _FIRST_INGEST_FILES if not (root / n).exists()]
        fh = (root / "ingest.lock").open("w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            if wait_s and not waiting:
                waiting = True
                log.warning("another ingest is writing %s; waiting for it to finish (up to %.0f s)", root, wait_s)
            if time.monotonic() >= deadline:
                waited = f" (waited {wait_s:.0f} s)" if wait_s else ""
                raise IngestionError(f"another ingest is writing {root}{waited}; wait for it to finish and "
                                     "retry") from exc
            time.sleep(0.2)
            continue
        try:
            held = os.fstat(fh.fileno()).st_ino == (root / "ingest.lock").stat().st_ino
        except OSError:
            held = False
        if held:
            break
        fh.close()  # a failed first ingest removed the lock file (and its folder) meanwhile: take the new one
    try:
        yield
    except BaseException:
        if not (root / "CURRENT").exists():
            for name in fresh:
                with suppress(OSError):
                    (root / name).unlink()
            for folder in created:
                with suppress(OSError):  # not empty: something else is in it now
                    folder.rmdir()
        raise
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def _doc_ids(files: list[Path], held: dict[str, dict] | None = None, max_bytes: int | None = None,
             sha_of=None) -> dict[Path, str]:
    """Each file's document id.

    A file the index already holds (``held``: the manifest's ``files``, id -> metadata) keeps its
    id, so adding, removing or moving another file never renames it (the memory store and
    earlier results cite documents by id). A file is known by its absolute path as given
    (``file``; a symlink beside its target is not ingested: see :func:`iter_source_files`), or, in an index written before that was
    recorded, by its resolved ``path`` when one held document has it; a file at a new path with the
    name and the content of a held document whose path is not among ``files`` is that document
    moved (its folder renamed, reached through a link), and keeps its id (files over ``max_bytes``
    are not read for this; ``sha_of`` hashes a file, default :func:`_file_sha256`). A new file gets its
    :func:`doc_slug`, with a path hash appended when that id is taken or another new file would
    get it too ("My Book.txt" and "my_book.txt" included).
    """
    held = {k: v for k, v in (held or {}).items() if isinstance(v, dict)}
    by_file = {str(meta["file"]): doc_id for doc_id, meta in held.items() if meta.get("file")}
    legacy: dict[str, list[str]] = {}
    for doc_id, meta in held.items():
        if not meta.get("file"):
            legacy.setdefault(str(meta.get("path")), []).append(doc_id)
    out: dict[Path, str] = {}
    assigned: set[str] = set()
    for f in files:
        old = by_file.get(str(f.absolute()))
        if old is None and len(legacy.get(str(f.resolve()), [])) == 1:
            old = legacy[str(f.resolve())][0]
        if old is not None and old not in assigned:
            out[f] = old
            assigned.add(old)
    # A file at a path the index does not know, with the name and content of a document whose own
    # path is not among these files, is that document moved (its folder renamed, reached through a
    # link): it keeps its id, which a hash of the new path would change. A renamed file (another
    # name) is a new document, as before.
    given = {str(f.absolute()) for f in files}
    gone: dict[str, list[str]] = {}
    for doc_id, meta in held.items():
        if doc_id not in assigned and meta.get("sha256") and str(meta.get("file")) not in given:
            gone.setdefault(str(meta["sha256"]), []).append(doc_id)
    if gone:
        for f in files:
            if f in out:
                continue
            slug = doc_slug(f)
            named = re.compile(re.escape(slug) + r"(-[0-9a-f]{6,64})?")  # its id, or its id with a path hash
            if not any(named.fullmatch(d) for ds in gone.values() for d in ds):
                continue  # no gone document of this name: a renamed file is a new document
            try:
                if max_bytes is not None and f.stat().st_size > max_bytes:
                    continue  # too large to be read: the ingest reports it
                candidates = [d for d in gone.get((sha_of or _file_sha256)(f), []) if d not in assigned]
            except OSError:
                continue  # unreadable now: the ingest reports it
            same_name = [d for d in candidates if named.fullmatch(d)]
            if same_name:
                out[f] = same_name[0]
                assigned.add(same_name[0])
    new = [f for f in files if f not in out]
    slugs = {f: doc_slug(f) for f in new}
    counts: dict[str, int] = {}
    for slug in slugs.values():
        counts[slug] = counts.get(slug, 0) + 1
    # Plain slugs are reserved first, so a hashed id never takes the id another file has by its
    # own name ("notes.txt" hashed to "notes-2b40d5" beside a file named "notes-2b40d5.txt");
    # a hashed id that is still taken grows its hash until it is unique.
    plain = {slug for slug in slugs.values() if counts[slug] == 1 and slug not in assigned}
    taken = assigned | plain
    for f, slug in slugs.items():
        if slug in plain:
            out[f] = slug
            continue
        digest = hashlib.sha256(str(f).encode()).hexdigest()
        width = 6
        while f"{slug}-{digest[:width]}" in taken and width < len(digest):
            width += 2
        out[f] = f"{slug}-{digest[:width]}"
        taken.add(out[f])
    return {f: out[f] for f in files}


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(4 * 2**20):
            h.update(block)
    return h.hexdigest()


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
    with _ingest_lock(root, wait_s):
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
                    shas[f] = _file_sha256(f)
                return shas[f]

            ids = _doc_ids(files, held_files, max_bytes, sha_of)
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
                    files_meta[doc_id] = {**old, "path": str(f.resolve()), "file": str(f.absolute()), **_stamp(st)}
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
                    "sections": len(doc.sections), **_stamp(st),
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


def _stamp(st: os.stat_result) -> dict[str, int]:
    """A file's size and modification time as the manifest records them, to tell later, without
    reading it, that the file is as it was when indexed (:func:`stale_documents`)."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def stale_documents(manifest: dict) -> tuple[list[str], list[str]]:
    """The documents of an index whose files changed since it was built, and those whose files
    are gone (or cannot be read): (changed, gone), by document id. A file whose size and
    modification time are as recorded is taken as unchanged without reading it; another is read
    and compared by its sha256, so a file only touched is not reported. Documents recorded before
    the manifest kept sizes and times are not checked (reading every file at every start of a
    large corpus would cost more than it tells)."""
    changed, gone = [], []
    for doc_id, meta in (manifest.get("files") or {}).items():
        if "mtime_ns" not in meta or not meta.get("path"):
            continue
        path = Path(meta["path"])
        try:
            st = path.stat()
            if (st.st_size, st.st_mtime_ns) != (meta.get("size"), meta["mtime_ns"]) and \
                    _file_sha256(path) != meta.get("sha256"):
                changed.append(doc_id)
        except OSError:
            gone.append(doc_id)
    return changed, gone


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


def manifest_summary(manifest: dict) -> str:
    return json.dumps({k: manifest[k] for k in ("embedder", "chunkers", "counts")}, indent=2)
