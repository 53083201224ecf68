"""``sirag ingest``, ``sirag fetch-gutenberg`` and ``sirag stats``: documents into the corpus index,
and the lengths of its chunks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import Config
from ..errors import IngestionError, InputError, InterruptedAfterCommit, SiragError
from .common import add_command, command, png_file, print_json


@command
def cmd_ingest(args: argparse.Namespace, config: Config) -> int:
    """Ingest files or folders (.txt .md .html .pdf) into the corpus index with every chunker.

    Example: sirag ingest ../shared/data/corpora/sherlock --index index/sherlock
    The index then holds exactly the given paths: to add a document, list the earlier paths
    too (their unchanged files reuse their chunks and embeddings); a file not listed, or
    removed (or emptied), has its chunks dropped, and the documents dropped are named (so are the
    chunkers dropped: the index holds those ingestion.chunkers lists). A path that
    does not exist, or a file the index holds that cannot be read now (turned binary, say), stops
    the ingest with nothing changed. When no file, path or setting changed,
    nothing is written and the index is reported up to date (--rebuild builds it again).
    Folders are walked without hidden entries (names starting with "."); other files left out
    (unsupported types, broken links or links in a loop) are named in a warning.
    """
    from ..ingestion.pipeline import ingest
    from ..retrieval.embedder import embedder_from_config

    png = png_file(args.stats_png, "--stats-png", config) if args.stats_png else None  # checked before any work
    embedder = embedder_from_config(config)
    report = ingest(args.paths, config, embedder, index_dir=args.index, rebuild=args.rebuild,
                    progress=not args.json and sys.stderr.isatty())
    stats, stats_error = None, None
    if args.stats or png:  # --stats-png implies --stats
        from ..ingestion.stats import chunk_stats

        try:
            stats = chunk_stats(args.index or config.paths.index_dir, png=png)
        except (SiragError, OSError) as exc:  # the index is built: say so before the error
            stats_error = exc
        except KeyboardInterrupt as exc:
            if report.unchanged or isinstance(exc, InterruptedAfterCommit):
                raise  # nothing was written: the index is as it was
            # Counting or drawing the chunks (a PNG takes seconds) comes after the new index went live.
            raise InterruptedAfterCommit(f"stopped while counting the chunks; the new index in {report.index_dir} "
                                         "is complete and in use") from exc
    if args.json:
        print_json({**report.to_json(), **({"stats": stats} if stats else {})})
    elif report.unchanged:
        print(f"{report.index_dir} is up to date: {len(report.documents)} document(s), none changed, same settings; "
              "nothing was written (--rebuild to build it again)")
        for name, n in report.chunks.items():
            print(f"  {name:9s} {n:6d} chunks")
        if stats:
            _print_stats(stats)
    else:
        print(f"indexed {len(report.documents)} document(s) into {report.index_dir} "
              + ("(all rebuilt, " if args.rebuild else f"({len(report.documents) - report.changed_documents} unchanged, ")
              + f"{report.embedded_texts} texts embedded, "
              f"{report.cached_texts} reused from the cache or this run) in {report.timings_ms['total'] / 1000:.1f} s")
        for name, n in report.chunks.items():
            why = ("  (re-chunked: the index was made by an older sirag)" if name in report.older_chunking
                   else "  (re-chunked: the index held other settings)" if name in report.changed_settings else "")
            print(f"  {name:9s} {n:6d} chunks{why}")
        if stats:
            _print_stats(stats)
    for line in report.notices():
        print(line, file=sys.stderr)
    if stats_error is not None:
        print(f"error: the index was built, but the chunk statistics were not: {stats_error}", file=sys.stderr)
        return 2
    return 0


@command
def cmd_fetch_gutenberg(args: argparse.Namespace, config: Config) -> int:
    """Download Project Gutenberg books by id from the configured mirror, clean and ingest them.

    Example: sirag fetch-gutenberg 1661 2852 --index index/books
    Books are kept in ingestion.gutenberg_dir (a book already there is reused); the mirror is
    ingestion.gutenberg_mirror ({id} is the id). The index keeps the documents it holds and adds
    that folder, so every book in it, fetched now or before (for any index), is indexed: give
    each index its own folder (--set ingestion.gutenberg_dir=...) to keep them apart. A source
    of the index that no longer exists stops the command before any download.
    """
    from ..ingestion.gutenberg import fetch_gutenberg, parse_ids
    from ..ingestion.pipeline import _check_index_folder, ingest
    from ..retrieval.embedder import embedder_from_config

    from ..retrieval.index import CorpusIndex

    ids = parse_ids(args.ids)
    dest = Path(config.ingestion.gutenberg_dir)
    # The index keeps what it had and adds the downloaded books (every file in the download
    # folder): checked before anything is downloaded, so a source that is gone stops the command
    # instead of silently taking its documents out of the index.
    index_dir = args.index or config.paths.index_dir
    sources = []
    if CorpusIndex(index_dir).current_dir() is not None:
        sources = list(CorpusIndex(index_dir).manifest().get("sources", []))
    missing = [s for s in sources if not Path(s).exists() and Path(s).resolve() != dest.resolve()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise InputError(f"the index {index_dir} holds documents from paths that no longer exist ({missing[0]}{more}): "
                         "restore them, or run `sirag ingest` with the paths to keep, then fetch again; "
                         "nothing was downloaded or changed")
    if Path(index_dir).resolve() == dest.resolve():
        raise InputError(f"the index folder {index_dir} is the download folder (ingestion.gutenberg_dir {dest}): the "
                         "books would be written among the index files; nothing was downloaded or changed. Pass "
                         "--index another folder, or set ingestion.gutenberg_dir to another")
    _check_index_folder(Path(index_dir), sources)  # an index folder that holds documents: refused before downloading
    fresh, reused = fetch_gutenberg(ids, dest, config.ingestion.gutenberg_mirror,
                                    max_bytes=int(config.ingestion.max_file_mb * 2**20))
    files = fresh + reused
    embedder = embedder_from_config(config)
    paths = list(dict.fromkeys([*sources, str(dest.resolve())]))
    try:
        report = ingest(paths, config, embedder, index_dir=index_dir, progress=not args.json and sys.stderr.isatty())
    except IngestionError:
        # Nothing was indexed: this fetch's downloads are not left in the folder, where every later
        # fetch would warn about them again (the error below says why they could not be indexed).
        for f in fresh:
            f.unlink(missing_ok=True)
            print(f"error: {f} was downloaded but not indexed (the error below says why); it was removed, so a "
                  "later fetch downloads it again", file=sys.stderr)
        raise
    indexed = {d["doc_id"] for d in report.documents}
    left_out = [f for f in files if f.stem not in indexed]
    if args.json:
        print_json({"downloaded": [str(f) for f in fresh], "reused": [str(f) for f in reused],
                     "removed": [str(f) for f in left_out if f in fresh], **report.to_json()})
    else:
        again = f", reused {len(reused)} already there" if reused else ""
        print(f"downloaded {len(fresh)} book(s) into {dest}{again}; indexed {len(report.documents)} document(s) "
              f"into {report.index_dir}")
        asked = {f.stem for f in files}
        others = {f.stem for f in dest.glob("*.txt")} - asked
        for d in report.documents:
            if d["doc_id"] in asked or d["doc_id"] in others:
                extra = "  (in the folder from before)" if d["doc_id"] in others else ""
                print(f"  {d['doc_id']}: {d['title']}" + (f" by {d['author']}" if d.get("author") else "") + extra)
    for line in report.notices():
        print(line, file=sys.stderr)
    for f in left_out:
        if f in fresh:  # not left in the folder, where every later ingest would warn about it again
            f.unlink(missing_ok=True)
            print(f"error: {f} was downloaded but not indexed (the warning above says why); it was removed, so a "
                  "later fetch downloads it again", file=sys.stderr)
        else:
            print(f"error: {f} was already in {dest} but could not be indexed (the warning above says why); it is "
                  "kept: delete it to download it again", file=sys.stderr)
    return 2 if left_out else 0


@command
def cmd_stats(args: argparse.Namespace, config: Config) -> int:
    """Chunk-length distribution per chunker and per document; with --png, a histogram PNG too.

    Example: sirag stats --index index/sherlock --png chunk_lengths.png
    """
    from ..ingestion.stats import chunk_stats

    stats = chunk_stats(args.index or config.paths.index_dir, png=png_file(args.png, "--png", config) if args.png else None)
    if args.json:
        print_json(stats)
    else:
        _print_stats(stats)
    return 0


def _print_stats(stats: dict) -> None:
    print("tokens per chunk: count mean p10 p50 p90 p99 max")
    for name, s in stats["chunkers"].items():
        print(f"  {name:9s} {s['count']:6d} {s['mean']:6.1f} {s['p10']:5.0f} {s['p50']:5.0f} {s['p90']:5.0f} {s['p99']:5.0f} {s['max']:5.0f}")
    for name, docs in stats["documents"].items():
        for doc, s in docs.items():
            print(f"  {name:9s} {doc:40s} {s['count']:5d} mean {s['mean']:.0f} max {s['max']:.0f}")
    if stats.get("png"):
        print(f"histogram: {stats['png']}")



def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``ingest``, ``fetch-gutenberg`` and ``stats`` to the ``sirag`` parser."""
    sp = add_command(sub, "ingest", cmd_ingest, common)
    sp.add_argument("paths", nargs="+", metavar="PATH", help="files or folders of documents")
    sp.add_argument("--rebuild", action="store_true", help="ignore the previous index and re-chunk everything")
    sp.add_argument("--stats", action="store_true", help="print chunk-length statistics afterwards")
    sp.add_argument("--stats-png", metavar="FILE", help="write a chunk-length histogram PNG (implies --stats)")

    sp = add_command(sub, "fetch-gutenberg", cmd_fetch_gutenberg, common)
    sp.add_argument("ids", nargs="+", metavar="ID", help="Project Gutenberg book ids, e.g. 1661")

    sp = add_command(sub, "stats", cmd_stats, common)
    sp.add_argument("--png", metavar="FILE", help="write a chunk-length histogram PNG")
