"""A batch's inputs on disk: its output, index and corpus folders (a SQuAD file's paragraphs
written as its corpus), the checks made before anything is written, and the ingest that keeps
its index up to date."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable

from ..config import Config
from ..errors import BatchError, SiragError
from ..evaluation.datasets import QAItem, squad_contexts
from .settings import CONFIG_INDEX
from .spec import BatchSpec, resolve_path


def _index_sources(index_dir: str) -> list[str] | None:
    """The paths the live index at ``index_dir`` was ingested from; None when there is no index
    or it is damaged (ingest rebuilds a damaged one, and says so)."""
    from ..retrieval.index import CorpusIndex

    idx = CorpusIndex(index_dir)
    if idx.current_dir() is None:
        return None
    try:
        return list(idx.manifest().get("sources") or [])
    except SiragError:
        return None


def check_index_sources(index_dir: str, corpus: list[Path], named_by: str = "--index") -> None:
    """An index named on the command line (``named_by``: --index, --set paths.index_dir, or a
    --config file's paths.index_dir) that was built from other documents is not re-ingested from
    the batch's corpus: that would replace the user's documents in it."""
    sources = sorted(_index_sources(index_dir) or [])
    wanted = sorted(str(Path(c).resolve()) for c in corpus)
    if sources and sources != wanted:
        raise BatchError(f"the index {index_dir} ({named_by}) was built from {', '.join(sources)}, not from this "
                         f"batch's corpus ({', '.join(wanted)}); ingesting the corpus there would replace its "
                         f"documents. Pass another --index (a new folder is built){_config_fix(named_by)}, or make "
                         "the corpus the same files (the batch file's corpus:, or eval's --corpus)")


def _config_fix(named_by: str) -> str:
    return " or change paths.index_dir in the --config file" if named_by == CONFIG_INDEX else ""


def check_index_keeps_documents(index_dir: str, corpus: list[Path]) -> None:
    """The batch's own index (its ``index:``, or the run's default) follows its corpus, so paths
    added to the corpus are ingested into it; but an ingest that would drop documents the index
    holds (built from other paths, e.g. with `sirag ingest`) is refused rather than replace them."""
    wanted = sorted({Path(c).resolve() for c in corpus})
    # A source is kept when the corpus names it or a folder that holds it (is_relative_to covers both).
    dropped = sorted(s for s in _index_sources(index_dir) or [] if not any(Path(s).is_relative_to(w) for w in wanted))
    if dropped:
        raise BatchError(f"the index {index_dir} holds documents from {', '.join(dropped)}, which this batch's corpus "
                         f"({', '.join(map(str, wanted))}) does not list; ingesting the corpus there would remove them. "
                         "Add those paths to the corpus, or run under another name (the batch file's name:, or sirag "
                         "eval --name NEW) with another index (the batch file's index:, or --index NEW), or rebuild "
                         "that index on purpose with `sirag ingest --rebuild`")


#: How long a batch waits for another process's ingest of its index before giving up.
INDEX_WAIT_S = 600.0


def ensure_index(config: Config, corpus: list[Path], index_dir: str, progress: bool,
                 out_root: Path | None = None) -> None:
    """Ingest the corpus when its index is missing or its files changed (cheap when unchanged). The
    batch's output folder (``out_root``) is left out of the corpus's folders: its results are not
    documents."""
    from ..ingestion.pipeline import ingest
    from ..retrieval.embedder import embedder_from_config

    embedder = embedder_from_config(config)
    # Batches started together on one index (shards, a grid and its comparison) take turns: the
    # second finds the index up to date once the first has built it, instead of failing.
    report = ingest([str(p) for p in corpus], config, embedder, index_dir=index_dir, progress=progress,
                    exclude=(out_root,) if out_root is not None else (), wait_s=INDEX_WAIT_S)
    # What `sirag ingest` would say: which documents were (re)indexed and why, and which files were left out.
    for line in report.summary_notes():
        print(f"note: {line}", file=sys.stderr)
    for line in report.notices():
        print(line, file=sys.stderr)


def run_inputs(spec: BatchSpec, base: Path, items: list[QAItem]) -> tuple[Path, str, list[Path], Path | None]:
    """The output folder, the index folder, the corpus paths of a batch, and the SQuAD file whose
    paragraphs are its corpus (None when the corpus is the user's documents). A SQuAD file without
    a corpus gets its paragraphs written under the output folder, in a folder named after the
    dataset (shared by every run of it, so one index serves them all; never beside a user's
    index): the corpus names that folder, and :func:`write_squad_corpus` writes it once every
    check that can refuse the batch has passed (a refused batch leaves the output folder as it was)."""
    out_root = resolve_path(base, spec.output_dir)
    index_dir = str(resolve_path(base, spec.index)) if spec.index else str(out_root / spec.name / "index")
    corpus = [resolve_path(base, c) for c in spec.corpus]
    squad = None
    if not corpus and spec.questions.file and items and items[0].context is not None:
        squad = resolve_path(base, spec.questions.file)
        paragraphs = out_root / "corpora" / re.sub(r"[^\w.-]", "_", squad.stem)
        # A file in the way is named now, before anything is written (mkdir would fail later
        # with a bare "Not a directory").
        _check_output_folder(out_root)
        if (f := _file_in_the_way(paragraphs)) is not None:
            raise BatchError(f"{f} is a file, where the paragraphs of {squad.name} go (the corpus of a SQuAD "
                             "file, under <output_dir>/corpora/); move that file away, or give another output "
                             "folder (the batch file's output_dir:, or sirag eval --output-dir DIR)")
        corpus = [paragraphs]
    return out_root, index_dir, corpus, squad


def write_squad_corpus(squad: Path | None, corpus: list[Path]) -> None:
    """Write the paragraphs of ``squad`` (from :func:`run_inputs`) into the corpus folder it names,
    right before the corpus is ingested; nothing when the corpus is the user's documents."""
    if squad is not None:
        squad_corpus(squad, corpus[0])


def index_chunkers(index_dir: str) -> list[str] | None:
    """The chunkers a built index holds (its manifest), or None when there is no readable index
    (check_documents and the engine say what is wrong with it)."""
    from ..retrieval.index import CorpusIndex

    try:
        index = CorpusIndex(index_dir)
        return list(index.manifest().get("chunkers", {})) if index.current_dir() is not None else None
    except (OSError, ValueError, SiragError):
        return None


def _file_in_the_way(folder: Path) -> Path | None:
    """The file standing where ``folder`` or one of its parents must be a folder, if any."""
    for p in (folder, *folder.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _check_output_folder(out_root: Path) -> None:
    if (f := _file_in_the_way(out_root)) is not None:
        what = "is a file, not a folder" if f == out_root else f"cannot be made: {f} is a file"
        raise BatchError(f"the output folder {out_root} {what}; give another output folder (the batch file's "
                         "output_dir:, or sirag eval --output-dir DIR), or move that file away")


def check_folders(out_root: Path | None, run_names: list[str], index_dir: str) -> None:
    """Before anything is written: a file where the output folder, a run's folder or the index
    folder goes made mkdir fail with a bare "Not a directory" or "File exists". ``out_root`` is
    None when nothing is written there (``--retrieval-only`` with an index elsewhere; a SQuAD
    file's paragraphs, written there once every check has passed, are checked by run_inputs)."""
    if out_root is not None:
        _check_output_folder(out_root)
    for name in run_names:
        if (out_root / name).exists() and not (out_root / name).is_dir():
            raise BatchError(f"{out_root / name} is a file, where run {name} keeps its results; move that file "
                             "away, or give the run another name (the batch file's name:, or sirag eval --name NEW)")
    if (f := _file_in_the_way(Path(index_dir))) is not None:
        what = "is a file, not a folder" if f == Path(index_dir) else f"cannot be made: {f} is a file"
        raise BatchError(f"the index folder {index_dir} {what}; give another index folder "
                         "(the batch file's index:, or --index DIR), or move that file away")


def check_documents(spec: BatchSpec, index_dir: str, corpus: list[Path], squad: Path | None = None,
                    finished: Callable[[], bool] | None = None) -> None:
    """Before anything is written: a batch needs documents to answer from, or an index of them,
    and every corpus path must exist (the ingest would refuse a missing one, but only after the
    memory store and the output folder were made). ``squad``: the corpus is that file's
    paragraph folder, written later. ``finished``: asked only when a corpus path is missing, whether
    every run is answered already; such runs are only summarised again, and nothing is ingested, so
    a corpus path gone since is not needed."""
    if not corpus and not spec.index and not Path(index_dir).is_dir():
        raise BatchError(f"batch {spec.name}: no corpus and no index: these questions carry no passages of their "
                         "own (only SQuAD files do); give the documents with corpus: in the batch file or "
                         "eval's --corpus DIR, or an index built from them with --index DIR")
    missing = [str(p) for p in corpus if not p.exists()] if squad is None else []
    if missing and not (finished is not None and finished()):
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise BatchError(f"batch {spec.name}: the corpus path {missing[0]} does not exist{more}; nothing was "
                         "changed. Fix the path or leave it out (the batch file's corpus:, read from its folder, "
                         "or eval's --corpus)")


def squad_corpus(squad_file: Path, out_dir: Path) -> Path:
    """Write the SQuAD paragraphs as one text file each (the corpus of a SQuAD evaluation), and
    remove the folder's other paragraph files: the folder is named after the file's stem, so
    another dataset of that name (``a/sq.json``, then ``b/sq.json``), or this one before an edit
    (a paragraph removed, a title changed), left paragraphs there that questions of this file
    would otherwise be answered from."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = set()
    for doc_id, text in squad_contexts(squad_file):
        p = out_dir / f"{doc_id}.txt"
        written.add(p.name)
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
    for stale in out_dir.glob("*.txt"):
        # Only paragraph files ("<title slug>_p<NN>.txt", as squad_contexts names them): any other
        # file there was not written by sirag.
        if stale.name not in written and _PARAGRAPH_FILE.fullmatch(stale.name):
            stale.unlink()
    return out_dir


_PARAGRAPH_FILE = re.compile(r"[a-z0-9_]+_p\d{2,}\.txt")
