"""The ``sirag`` command line. Each command parses its arguments, makes one library call and
formats the result; the library holds the logic."""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, NoReturn

from . import __version__
from .config import Config, load_config, pins_strategy
from .errors import AnswerNotRecordedError, IngestionError, InputError, InterruptedAfterCommit, SiragError

log = logging.getLogger("sirag")

COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {}


#: What Ctrl-C leaves behind, per command (said after "interrupted: ").
_INTERRUPTED = {
    "ingest": "stopped; the index is as it was before this ingest (a new index goes live only when it is "
              "complete), so run the ingest again",
    "fetch-gutenberg": "stopped; the index is as it was before (a new index goes live only when it is complete), "
                       "so run the command again",
    "batch": "stopped cleanly; finished questions were kept, and the same command resumes the run",
    "eval": "stopped cleanly; finished questions were kept, and the same command resumes the run",
    "ask": "stopped; the unfinished answer was not stored in memory",
    "calibrate": "stopped; no new fit was stored",
}


def command(fn: Callable[[argparse.Namespace, Config], int]) -> Callable[[argparse.Namespace, Config], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_").replace("_", "-")] = fn
    return fn


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None) + "\n")


def _memory(config: Config, read_only: bool = False):
    from .memory import MemoryStore

    return MemoryStore(config.paths.memory_db, read_only=read_only)


def _existing_memory(config: Config, command: str, read_only: bool = False):
    """The memory store for a command that reads what was recorded: a missing path is an
    error (a typo must not create an empty store), not a new database."""
    from .errors import MemoryStoreError

    path = Path(config.paths.memory_db)
    if not path.exists():
        raise MemoryStoreError(f"no memory store at {config.paths.memory_db} yet, so `sirag {command}` has "
                               "nothing to work on; it is created by the first `sirag ask` or `sirag batch` "
                               "(or pass --memory with an existing database)")
    if not read_only and path.is_file() and path.stat().st_size == 0:
        # An empty file (a `touch`, a failed copy) would be made a store before the command found
        # nothing in it: opened read-only first, it is said to be empty, as `sirag memory` says, and
        # left as it is (one whose records are all still in its -wal file opens and goes on).
        _memory(config, read_only=True).close()
    return _memory(config, read_only=read_only)


def _readable_memory(config: Config, command: str):
    """The existing memory store opened read-only for a command that only reads it; a store of an
    older schema is upgraded first (opened writable once), as any recording command would. A
    store that cannot be written then says to upgrade a copy."""
    from .errors import MemoryStoreError, OlderSchemaError

    try:
        return _existing_memory(config, command, read_only=True)
    except OlderSchemaError:
        pass
    try:
        store = _memory(config)
    except MemoryStoreError as exc:
        path = Path(config.paths.memory_db)
        if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            raise MemoryStoreError(
                f"memory database {path} has an older schema and could not be upgraded: {exc}") from exc
        raise MemoryStoreError(
            f"memory database {path} has an older schema and cannot be upgraded where it is, since it cannot be "
            f"written there; copy it (with its -wal file, if any) to a writable folder and pass the copy as --memory: "
            "the first command upgrades it") from exc
    store.close()
    return _memory(config, read_only=True)


def _png_file(path: str, option: str, config: Config) -> Path:
    if Path(path).suffix.lower() != ".png":
        raise InputError(f"{option} {path}: the histogram is a PNG image; give a file name ending in .png")
    return _output_file(path, option, config)


_OUTPUT_SUFFIX = {"--csv": ".csv", "--json-file": ".json", "--html": ".html", "--png": ".png", "--stats-png": ".png"}


def _output_file(path: str, option: str, config: Config) -> Path:
    """Check a file a command will write (its missing folders are created by the writer): not a
    folder, not under a file, not a device, pipe or socket, and not the memory store. A symlink
    stands for its target: the file is written there and the link is kept (the writers write
    beside the file and rename, which would otherwise replace the link with a file)."""
    if path == "-":
        stdout = " (for JSON on standard output, use --json instead)" if option == "--json-file" else ""
        raise InputError(f"{option} - would write a file named '-', not standard output; give a file name, e.g. "
                         f"out{_OUTPUT_SUFFIX.get(option, '.txt')}{stdout}")
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()
    if p.exists() and not p.is_file() and not p.is_dir():
        raise InputError(f"{option} {path} is not a regular file (a device, pipe or socket); the file is written "
                         "whole and then renamed into place, so give a file name, e.g. "
                         f"out{_OUTPUT_SUFFIX.get(option, '.txt')}")
    if p.is_dir():
        raise InputError(f"{option} {path} is a folder; give a file name, e.g. "
                         f"{p / ('out' + _OUTPUT_SUFFIX.get(option, '.txt'))}")
    blocker = next((a for a in p.parents if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise InputError(f"{option} {path}: {blocker} is a file, not a folder; write elsewhere")
    want, got = _OUTPUT_SUFFIX.get(option), p.suffix.lower()
    if want and got != want and got in set(_OUTPUT_SUFFIX.values()):  # e.g. --csv out.json: surely a slip
        raise InputError(f"{option} {path}: a {got} name for a {want} file; name it {p.with_suffix(want).name}, "
                         "or use the option of that format")
    store = Path(config.paths.memory_db).resolve()
    if p.resolve() in {store, Path(f"{store}-wal"), Path(f"{store}-shm"), Path(f"{store}-journal")}:
        raise InputError(f"{option} {path} is the memory database itself; writing there would destroy it; "
                         "choose another file")
    return p


def _engine(args: argparse.Namespace, config: Config, record: bool = True):
    """The engine; without ``record`` (--no-memory) the store is still read, read-only, for the
    calibration fit and the learned strategy choices, but nothing is written to it."""
    from .engine import Engine
    from .errors import MemoryStoreError
    from .retrieval.index import CorpusIndex

    # No index is said before the memory store is created for nothing.
    CorpusIndex(Path(args.index if args.index is not None else config.paths.index_dir)).live_dir()
    if record:
        memory = _memory(config)
    elif Path(config.paths.memory_db).is_file():
        try:
            memory = _memory(config, read_only=True)
        except MemoryStoreError as exc:
            log.warning("memory not read (%s): default confidence weights and strategy", exc)
            memory = None
    else:
        memory = None
        db = Path(config.paths.memory_db)
        # Said as a store that cannot be read is: a folder, or a store named (--memory, --set, a
        # --config file) that is not there, is not the calibration fit the answer is scored with.
        # The default store not there yet is a memory with nothing in it.
        # The default store by any spelling ("./memory/memory.db", its absolute path) is the default.
        default = Path(type(config.paths)().memory_db)
        try:
            named = db.resolve() != default.resolve()
        except (OSError, RuntimeError):  # a link in a loop (Python 3.11 raises RuntimeError)
            named = True
        why = (f"{db} is a folder, not a memory database file" if db.is_dir()
               else f"no memory store at {db}" if named else None)
        if why:
            log.warning("memory not read (%s): default confidence weights and strategy", why)
    return Engine(config, memory=memory, index_dir=args.index, record=record)


# -- commands -----------------------------------------------------------------------------

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
    from .ingestion.pipeline import ingest
    from .retrieval.embedder import embedder_from_config

    png = _png_file(args.stats_png, "--stats-png", config) if args.stats_png else None  # checked before any work
    embedder = embedder_from_config(config)
    report = ingest(args.paths, config, embedder, index_dir=args.index, rebuild=args.rebuild,
                    progress=not args.json and sys.stderr.isatty())
    stats, stats_error = None, None
    if args.stats or png:  # --stats-png implies --stats
        from .ingestion.stats import chunk_stats

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
        _print_json({**report.to_json(), **({"stats": stats} if stats else {})})
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
    from .ingestion.gutenberg import fetch_gutenberg, parse_ids
    from .ingestion.pipeline import _check_index_folder, ingest
    from .retrieval.embedder import embedder_from_config

    from .retrieval.index import CorpusIndex

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
        _print_json({"downloaded": [str(f) for f in fresh], "reused": [str(f) for f in reused],
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
    from .ingestion.stats import chunk_stats

    stats = chunk_stats(args.index or config.paths.index_dir, png=_png_file(args.png, "--png", config) if args.png else None)
    if args.json:
        _print_json(stats)
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


def source_snippet(text: str, focus: set[str], width: int = 220) -> str:
    """A source shown in ``width`` characters: from the sentence holding the most of the ``focus``
    terms (claim terms), so that the words that state the answer show even deep in a long
    passage; from the start when no sentence holds one. A cut start or end is marked "…"."""
    from .ingestion.sentences import split_sentences
    from .text import claim_terms

    start = 0
    if focus and text:
        best = 0
        for s, e in split_sentences(text):
            hits = len(focus & set(claim_terms(text[s:e])))
            if hits > best:
                best, start = hits, s
    shown = textwrap.shorten(text[start:], width - (2 if start else 0), placeholder=" …")
    return ("… " if start else "") + shown


def _format_answer(ans: dict, verbose: bool) -> str:
    """The answer for a person: the answer and what its confidence means, the sources it cites
    (document > section, a short quote), then one line per attempt; ``verbose`` adds each
    attempt's signals, diagnosis, tokens and timings."""
    from .evaluation.shipped import meaning

    lines = []
    if ans["refused"]:
        lines.append("REFUSED: " + (ans["refusal_reason"] or ""))
        lines.append(f"confidence of the refusal {ans['confidence']:.2f}")
        if ans["sources"]:
            lines.append("closest passages:")
    else:
        lines.append(ans["answer"])
        chosen = next((a for a in ans["attempts"] if a["number"] == ans["chosen_attempt"]), None)
        means = meaning(ans["confidence"])
        lines.append(f"confidence {ans['confidence']:.2f}" + (f": {means}" if means else ""))
        if chosen is not None and chosen["failure"] != "NONE":
            # Accepted on its confidence although a check flagged it (no attempt passed them all).
            lines.append(f"note: its checks flagged {chosen['failure']}: {chosen['failure_reason']}")
        from .evaluation.signals import miscitations

        claims = ((chosen or {}).get("signals", {}).get("faithfulness", {}).get("detail") or {}).get("claims") or []
        if miscited := miscitations(claims):
            # The sources below include the passages that state those claims.
            lines.append("note: " + "; ".join(miscited))
        lines.append("sources:")
    # The words to show in each source: what the answer adds to the question (its answer), or
    # for a refusal the question's own words.
    from .generation.prompts import strip_citations
    from .text import claim_terms

    question_terms = set(claim_terms(ans.get("question") or ""))
    focus = (set(claim_terms(strip_citations(ans["answer"] or ""))) - question_terms
             if not ans["refused"] else set()) or question_terms
    for s in ans["sources"]:
        where = f"{s['doc']} › {s['section']}" if s.get("section") else s["doc"]
        lines.append(f"  [{s['number']}] {where}" + (f"  (chars {s['start']}-{s['end']})" if verbose else ""))
        lines.append(f"      {source_snippet(s['text'], focus)}")
    lines.append("attempts:")
    for a in ans["attempts"]:
        sig = a["signals"]
        conf = sig["confidence"]["value"]
        secs = (a["timings_ms"].get("total") or sum(a["timings_ms"].values())) / 1000
        lines.append(f"  {a['number']}. {a['strategy_key']}" + (f" (repair: {a['repair']})" if a["repair"] else "")
                     + f"  {a['failure']}  confidence {'n/a' if conf is None else format(conf, '.2f')}  {secs:.1f}s")
        if not verbose:
            continue
        vals = " ".join(f"{k}={'n/a' if sig[k]['value'] is None else format(sig[k]['value'], '.2f')}"
                        for k in ("coverage", "redundancy", "grounding", "faithfulness", "confidence"))
        lines.append(f"     {vals} refusal={sig['refusal']}")
        lines.append(f"     diagnosis {a['failure']}: {a['failure_reason']}")
        for k in ("coverage", "grounding", "faithfulness"):
            lines.append(f"       {k}: {sig[k]['reason']}")
        lines.append(f"     tokens: prompt {a['prompt_tokens']} completion {a['completion_tokens']}; "
                     + " ".join(f"{k} {v / 1000:.2f}s" for k, v in a["timings_ms"].items()))
    if verbose:
        lines.append("time: " + " ".join(f"{k} {v / 1000:.2f}s" for k, v in ans["timings_ms"].items()))
    if ans.get("outcome_id"):
        lines.append(f"memory: outcome {ans['outcome_id'][:12]} (sirag feedback {ans['outcome_id'][:12]} --correct|--wrong)")
    return "\n".join(lines)


def _read_question(args: argparse.Namespace) -> str:
    if args.question[0] == "-" and len(args.question) > 1:
        raise InputError("'-' reads the question from stdin and stands alone; give the question as words or as "
                         "'-' with the question on stdin, not both")
    q = " ".join(args.question)
    if q == "-":
        q = sys.stdin.read()
    return q


@command
def cmd_ask(args: argparse.Namespace, config: Config) -> int:
    """Answer a question from the indexed documents, with sources, signals and timings.

    Example: sirag ask "What did Holmes call the magazine article's title?" --json
    The loop retries with another strategy when the checks fail, or refuses; --no-retry
    answers in one attempt. Every attempt is recorded in the memory store, whose record
    chooses the first strategy per kind of question; a strategy given with --set (e.g.
    --set strategy.top_k=8) is used for the first attempt instead.
    """
    from .questions import check_question

    if args.stream and args.json:
        raise InputError("--stream writes the answer as it is generated and --json writes it once at the end; "
                         "choose one")
    question = check_question(_read_question(args))
    engine = _engine(args, config, record=not args.no_memory)
    stream = args.stream
    on_token = (lambda piece: (sys.stderr.write(piece), sys.stderr.flush())) if stream else None

    def on_attempt(a) -> None:
        if stream:  # after each attempt's streamed text: its diagnosis (a retry's text follows)
            sys.stderr.write(f"\n[attempt {a.number}: {a.attribution.failure}]\n")

    try:
        answer = engine.ask(question, loop=False if args.no_retry else None, on_token=on_token, on_attempt=on_attempt)
    except AnswerNotRecordedError as exc:
        _print_answer(exc.answer.to_json(), args)  # the work is not lost; main() then says what failed
        raise
    finally:
        engine.close()
    if engine.calibrated:  # as `sirag batch` says it: the confidence weights changed with this command
        print(f"note: {engine.calibrated}", file=sys.stderr)
    _print_answer(answer.to_json(), args)
    return 0


def _print_answer(data: dict, args: argparse.Namespace) -> None:
    if args.json:
        _print_json(data)
    else:
        print(_format_answer(data, args.verbose))


@command
def cmd_search(args: argparse.Namespace, config: Config) -> int:
    """Show the passages a strategy retrieves for a question, with each retriever's score.

    Example: sirag search "Who killed Drebber?" --chunker section --retriever hybrid --top-k 10
    """
    from dataclasses import replace

    from .attempt import rewrite_query
    from .questions import check_question
    from .retrieval.embedder import embedder_from_config
    from .retrieval.searcher import Searcher, search_json

    question = check_question(_read_question(args))
    strategy = config.strategy.to_strategy()
    over = {k: v for k, v in (("chunker", args.chunker), ("retriever", args.retriever), ("top_k", args.top_k)) if v is not None}
    if args.no_rerank:
        over["rerank"] = False
    strategy = replace(strategy, **over)
    embedder = embedder_from_config(config)
    searcher = Searcher(config, embedder, args.index)
    generator = None
    if strategy.query_rewrite == "keywords":
        from .generation.factory import make_generator

        generator = make_generator(config)
    try:
        # As an attempt searches: with query_rewrite: keywords, the generator's keywords follow
        # the question (the reranker and the refinement still read the question).
        query = rewrite_query(generator, question)[0] if strategy.query_rewrite == "keywords" else None
        result = searcher.search(question, strategy, query)
    finally:
        searcher.close()
    data = search_json(question, query, strategy, result)
    hits = data["hits"]
    if args.json:
        _print_json(data)
        return 0
    print(f"strategy {strategy.key}")
    if query is not None:
        # The generator may give no keywords (it declines): the search is then for the question alone.
        print(f"query (rewritten): {query}" if query != question
              else "query (rewritten): unchanged: the generator gave no keywords, so the question alone is searched")
    if not hits:  # as an attempt's diagnosis says it (bm25 alone matches only the question's words)
        print("no passage found for the question with this strategy"
              + ("; bm25 finds only passages that share a word with the question: try --retriever hybrid"
                 if strategy.retriever == "bm25" else ""))
    for h in hits:
        sc = " ".join(f"{k}={v:.3f}" for k, v in h["scores"].items())
        print(f"{h['rank']:2d}. {h['doc']} [{h['start']}-{h['end']}] {h['section']}\n    {sc}\n    "
              + textwrap.shorten(h["text"], 240, placeholder=" …"))
    print("time: " + " ".join(f"{k} {v:.1f}ms" for k, v in result.timings_ms.items()))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors as the rest of sirag gives them: one ``error:`` line
    that names the command and where to read its options, and exit code 2 (argparse would print
    the command's whole usage block first, burying the line that says what is wrong)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}; see `{self.prog} --help`\n")


class _MemoryParser(_Parser):
    """The parser of `sirag memory`: words given after its options, or after ``--``, are its words
    (``memory search --limit 5 Holmes``, ``memory search --config c.yaml -- -Marsh``, ``memory show
    --json -- ID``). argparse fills the ``nargs="*"`` positional, empty, together with the action
    before it, and returns every later word as unrecognized. An option it does not know (a word
    that begins with - before any --, as in every CLI) is still reported, with what followed it."""

    def error(self, message: str) -> NoReturn:
        # argparse names the optional word list too ("required: action, arg"), as if every
        # action needed one: `sirag memory` alone lacks only the action.
        if message.startswith("the following arguments are required: action"):
            actions = next(a.choices for a in self._actions if a.dest == "action")
            message = f"name an action: {', '.join(actions)}"
        super().error(message)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extra = super().parse_known_args(args, namespace)
        cut = extra.index("--") if "--" in extra else len(extra)
        if any(w.startswith("-") for w in extra[:cut]):
            return namespace, extra
        namespace.arg = [*(getattr(namespace, "arg", None) or []), *extra[:cut], *extra[cut + 1:]]
        return namespace, []


#: The memory actions that --limit applies to, and how many matches `memory search` shows without it.
_MEMORY_LIMITED = ("search", "strategies", "failures")
_SEARCH_LIMIT = 20


def _either(names: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _both(names: tuple[str, ...]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@command
def cmd_memory(args: argparse.Namespace, config: Config) -> int:
    """Analyse the memory store: stats, strategies, failures, show ID, search TEXT, export, report;
    merge other stores into it; back it up.

    Examples: sirag memory stats; sirag memory show 3f2a9c; sirag memory search Baskerville;
    sirag memory export --csv out.csv; sirag memory report --html report.html;
    sirag memory merge shard1.db shard2.db --memory memory/memory.db;
    sirag memory backup backups/memory-2024-06-01.db
    Backup writes a consistent copy of the whole store (SQLite's backup API: safe while other
    commands write to it), never over an existing file unless --force; to restore, pass the copy
    as --memory, or copy it over the store while no sirag command runs. Every command checks the
    store when it opens it and refuses a damaged one.
    Merge creates the --memory store if it does not exist; every file is checked before any is
    merged, and a file of an older schema must be upgraded first (`sirag memory stats --memory
    FILE`). Merging the same file again adds only what is still missing.
    """
    action = args.action
    words = list(args.arg or [])
    cut = None  # what --limit left out of search, strategies or failures, said under the rows
    # Options of one action given to another are mistakes, not something to ignore.
    if words and action not in ("show", "search", "merge", "backup"):
        raise InputError(f"sirag memory {action} takes no argument (got {' '.join(words)!r}); only show ID, "
                         "search TEXT, merge FILE... and backup FILE do")
    if action == "show" and len(words) > 1:
        raise InputError(f"sirag memory show takes one outcome id, got {len(words)}: {' '.join(words)!r}")
    args.arg = " ".join(words) if words else None
    for flag, value in (("--csv", args.csv), ("--json-file", args.json_file), ("--html", args.html)):
        if value is not None and not value.strip():  # an empty variable in a script ("--csv $OUT")
            raise InputError(f"{flag} is empty; give a file name, e.g. out{_OUTPUT_SUFFIX[flag]}")
    owned = [(flag, owners) for flag, value, owners in (
        ("--csv", args.csv, ("export",)), ("--json-file", args.json_file, ("export",)),
        ("--html", args.html, ("report",)), ("--limit", args.limit is not None, _MEMORY_LIMITED),
        ("--force", args.force, ("backup",)))
        if value and action not in owners]
    if owned:
        stray = [flag for flag, _ in owned]
        raise InputError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not an option of memory {action} "
                         f"({'; '.join(f'{flag} to memory {_either(owners)}' for flag, owners in owned)})")
    if action == "merge":
        return _memory_merge(words, args, config)
    if action == "backup":
        return _memory_backup(words, args, config)
    # Analysis only reads: the store is opened read-only, once its schema is upgraded if it needs that.
    store = _readable_memory(config, "memory")
    try:
        if action == "stats":
            from .evaluation.calibrate import calibration_status

            c = config.calibration
            data: Any = {**store.stats(), "calibration": calibration_status(store, c.auto_fit, c.auto_min_labels,
                                                                            c.auto_refit_after)}
        elif action in ("strategies", "failures"):
            data = store.strategies() if action == "strategies" else store.failures()
            if args.limit is not None and len(data) > args.limit:  # the most used (or most frequent) first
                cut = (f"(the first {args.limit} of {len(data)} "
                       + ("strategies, by attempts" if action == "strategies" else "failure types, by count")
                       + "; --limit sets how many)")
                data = data[:args.limit]
        elif action == "show":
            if not args.arg:
                raise InputError("sirag memory show needs an outcome id (or its first 6+ characters)")
            data = store.show(args.arg)
        elif action == "search":
            if not args.arg:
                raise InputError("sirag memory search needs some text to look for")
            from .memory.analysis import search_words

            if not search_words(args.arg):  # nothing would be searched: "no outcome matches" would mislead
                raise InputError(f"sirag memory search: {args.arg!r} holds no word to look for (quotes, "
                                 "punctuation and operators such as * are not searched); give a word, e.g. "
                                 "sirag memory search Holmes")
            limit = args.limit or _SEARCH_LIMIT
            data = store.search(args.arg, limit=limit + 1)  # one more, to tell whether the limit left some out
            if len(data) > limit:
                cut = f"(only the best {limit} shown; more outcomes match: --limit sets how many)"
                data = data[:limit]
        elif action == "export":
            targets = [(fmt, path) for fmt, path in (("csv", args.csv), ("json", args.json_file)) if path]
            if not targets and args.json:
                data = store.export_records()  # the JSON export on stdout
            elif not targets:
                raise InputError("sirag memory export needs --csv FILE and/or --json-file FILE, or --json for "
                                 "JSON on stdout")
            elif len(targets) == 2 and Path(args.csv).resolve() == Path(args.json_file).resolve():
                raise InputError("--csv and --json-file name the same file; give each format its own file")
            else:
                checked = [_output_file(path, "--csv" if fmt == "csv" else "--json-file", config)
                           for fmt, path in targets]
                # Both files or neither: a JSON file that cannot be written leaves no CSV behind.
                n = store.export_files([(fmt, path) for (fmt, _), path in zip(targets, checked)])
                data = {"exported_outcomes": n,
                        "files": [{"path": str(path), "format": fmt} for fmt, path in targets]}
        elif action == "report":
            if not args.html:
                raise InputError("sirag memory report needs --html FILE")
            from .memory.report import write_html_report

            data = {"report": str(write_html_report(store, _output_file(args.html, "--html", config)))}
        else:
            raise InputError(f"unknown memory action {action!r}")
    finally:
        store.close()
    if args.json:
        _print_json(data)
    elif action == "show":
        print(json.dumps(data, ensure_ascii=False, indent=2))
    elif isinstance(data, list):
        for row in data:
            print("  ".join(f"{k}={_short(v)}" for k, v in row.items()))
        if not data:
            print(f"(no outcome matches {args.arg!r})" if action == "search" else "(nothing yet)")
        if cut:
            print(cut)
    else:
        for k, v in data.items():
            _print_item(k, v)
    if action in ("stats", "strategies", "failures") and data and not args.json:
        print("(successes and success rates are the engine's own verdict when the attempt ran: the answer passed "
              "its checks, over every index folder in this memory; feedback and labelled_* count labels, which the "
              "strategy policy counts only through the confidence weights a calibration fits on them; the policy "
              "judges each attempt again under the confidence weights in use now, so its counts can differ from "
              "these, and counts each index folder's own record first)")
    return 0


def _memory_merge(files: list[str], args: argparse.Namespace, config: Config) -> int:
    """``sirag memory merge FILE...``: every store is checked before any is merged."""
    from .evaluation.calibrate import calibration_status
    from .memory.store import open_merge_source, same_file

    if not files:
        raise InputError("sirag memory merge needs the file(s) of the store(s) to merge into --memory")
    target = Path(config.paths.memory_db).resolve()
    for f in files:
        if same_file(f, target):
            raise InputError(f"{f} is the --memory store itself; merge other stores into it")
        open_merge_source(f).close()  # missing, damaged, foreign or older: says so, and nothing is merged
    store = _memory(config)
    results: list[dict[str, Any]] = []
    try:
        for f in files:
            try:
                results.append({"file": f, **store.merge_from(f)})
            except BaseException:
                # Each file is merged in its own transaction: the ones before this failure stay merged.
                # Say what is in the store now before the error, which names only the failure.
                _print_merged(results, files[len(results):], config, args.json)
                raise
        fit = store.latest_calibration() if any(r["fits_added"] for r in results) else None
        c = config.calibration
        due = (calibration_status(store, c.auto_fit, c.auto_min_labels, c.auto_refit_after)["automatic_fit"]
               if fit is None and any(r["feedback_added"] for r in results) and not args.json else None)
    finally:
        store.close()
    _print_merged(results, [], config, args.json)
    if not args.json:
        if fit is not None:
            what = ("the default weights (a reset)" if (fit["metrics"] or {}).get("reset_to_defaults")
                    else f"fit {fit['id']} made {fit['created_at']} on {fit['n']} label(s)")
            print(f"calibration in use now: {what} (the newest); run `sirag calibrate` to fit on all labels here, "
                  "or `sirag calibrate --reset` for the default weights")
        elif any(r["feedback_added"] for r in results):
            when = {"off": "off (calibration.auto_fit)", "due": "due at the engine's next start"}.get(due, due)
            print("labels added: `sirag calibrate` fits the confidence on all labels here; the automatic fit is "
                  + when)
    return 0


def _memory_backup(words: list[str], args: argparse.Namespace, config: Config) -> int:
    """``sirag memory backup FILE``: a consistent copy of the store, checked first (a damaged store is
    refused when it is opened, as by every command)."""
    from .memory.integrity import backup

    if len(words) != 1:
        raise InputError(f"sirag memory backup takes one file to write, got {len(words)}; e.g. sirag memory backup "
                         "backups/memory.db")
    if Path(words[0]).expanduser().is_dir():
        raise InputError(f"sirag memory backup {words[0]}: a folder; name the file to write, e.g. "
                         f"{Path(words[0]) / 'memory.db'}")
    target = _output_file(str(Path(words[0]).expanduser()), "backup", config)  # not the store itself, nor a device
    store = _readable_memory(config, "memory")
    try:
        backup(store.db.conn, target, force=args.force)
    finally:
        store.close()
    if args.json:
        _print_json({"memory": config.paths.memory_db, "backup": str(target)})
    else:
        print(f"backed up {config.paths.memory_db} to {words[0]} (to restore it, pass --memory {words[0]}, or copy it "
              "over the store while no sirag command runs)")
    return 0


def _print_merged(results: list[dict[str, Any]], unmerged: list[str], config: Config, as_json: bool) -> None:
    """What ``memory merge`` added from each file merged; when a file failed (``unmerged``: it and those
    after it), what was merged before the failure and what was not, said before the error itself."""
    if as_json:
        _print_json(results if not unmerged else {"merged": results, "not_merged": unmerged})
    else:
        for r in results:
            print(f"{r['file']}: {r['outcomes_added']} outcome(s) added with {r['attempts_added']} attempt(s), "
                  f"{r['questions_added']} new question(s), {r['feedback_added']} label(s), {r['fits_added']} "
                  f"calibration fit(s); skipped {r['outcomes_present']} already here and "
                  f"{r['outcomes_same_run_item']} of batch items recorded here under another id")
        if results or not unmerged:
            print(f"into {config.paths.memory_db}")
    if unmerged:
        done = (f"{_both(tuple(r['file'] for r in results))} {'was' if len(results) == 1 else 'were'} merged "
                f"into {config.paths.memory_db} and stay{'s' if len(results) == 1 else ''} merged"
                if results else f"nothing was merged into {config.paths.memory_db}")
        print(f"{done}; {_both(tuple(unmerged))} {'was' if len(unmerged) == 1 else 'were'} not merged (the message "
              "below says why): once that is fixed, run the same command again, which adds only what is still "
              "missing", file=sys.stderr)


def _print_item(key: str, value: Any, indent: str = "") -> None:
    """``key: value`` on one line, or, for a dict too long for one (or the corpora), one line an item."""
    if isinstance(value, dict) and value and (key == "corpora" or _short(value).endswith("...")):
        print(f"{indent}{key}:")
        for k, v in value.items():
            _print_item(str(k), v, indent + "  ")
    else:
        print(f"{indent}{key}: {_short(value)}")


def _short(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        s = ", ".join(f"{k} {_short(x)}" for k, x in v.items()) or "none"
    elif isinstance(v, list):
        s = "; ".join(_short(x) for x in v)
    else:
        s = " ".join(str(v).split())  # an answer's newlines and tabs would spread one row over lines
    return s if len(s) < 120 else s[:117] + "..."


@command
def cmd_feedback(args: argparse.Namespace, config: Config) -> int:
    """Label an answer in memory as correct or wrong (used by `sirag calibrate`, whose fit the policy's
    counts then follow).

    Example: sirag feedback 3f2a9c1b --correct
    A different label replaces the outcome's earlier one; the same label again (without a new
    --note) changes nothing, and says so.
    """
    store = _existing_memory(config, "feedback")
    try:
        outcome = store.show(args.outcome_id)
        oid = outcome["id"]
        seen: dict[str, Any] = {}  # the label in use, as the write found it (not as show() did, before it)
        written = store.add_feedback(oid, correct=args.correct, source="user", note=args.note or "",
                                     unless_current=True, current=seen)
    finally:
        store.close()
    before = seen or None
    notes = []
    same = before is not None and before["label"] == int(args.correct)
    if before is not None and written and not same:
        notes.append(f"it replaces the earlier {before['source']} label ({'correct' if before['label'] else 'wrong'})")
    elif written and same and before["source"] == "gold":
        notes.append("the gold label said the same; as a user label it is kept over any later gold label")
    elif written and same:
        notes.append("the outcome already had this label; the new note is kept with it")
    if outcome["refused"]:
        notes.append("this outcome is a refusal: the label is kept and counted, but calibration learns only from "
                     "labelled answers")
    if args.json:
        _print_json({"outcome_id": oid, "correct": bool(args.correct), "source": "user", "note": args.note or "",
                     "replaced": before if written and not same else None, "written": written,
                     "refusal": bool(outcome["refused"])})
    elif not written:
        print(f"unchanged: outcome {oid[:12]} was already labelled {'correct' if args.correct else 'wrong'} by a "
              "user; nothing was written")
    else:
        print(f"recorded: outcome {oid[:12]} is {'correct' if args.correct else 'wrong'}")
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
    return 0


@command
def cmd_calibrate(args: argparse.Namespace, config: Config) -> int:
    """Fit the confidence weights on labelled outcomes in memory; print AUROC and ECE before and after,
    and how many right answers loop.answer_threshold would withhold and wrong ones it would return.

    Example: sirag calibrate   (labels come from `sirag feedback` and from `sirag eval` gold)
    A fit either rescales the default weights' score (two numbers; their ranking of answers kept) or
    refits every weight, whichever scores the labels better held out.
    The engine also fits by itself at start once enough new labels arrive (calibration.auto_fit;
    `sirag memory stats` shows the weights in use and when the next fit is due). With labels from
    several corpora (index folders), each corpus with enough of them, right and wrong, also gets a
    fit of its own, which questions on it use, unless that fit scores a worse held-out Brier than
    the shared one.
    """
    from .evaluation.calibrate import calibrate_from_memory, calibration_status, reset_calibration

    if args.reset and (args.dry_run or args.force or args.min_labels is not None):
        raise InputError("--reset puts the default weights back and fits nothing; it takes no --dry-run, --force "
                         "or --min-labels")
    # A dry run stores no fit (an older store's schema is upgraded first, as `sirag memory` does).
    store = _readable_memory(config, "calibrate") if args.dry_run else _existing_memory(config, "calibrate")
    try:
        if args.reset:
            fit_id = reset_calibration(store)
            if args.json:
                _print_json({"fit_id": fit_id, "reset_to_defaults": True})
            else:
                auto = config.calibration
                due = calibration_status(store, auto.auto_fit, auto.auto_min_labels,
                                         auto.auto_refit_after)["automatic_fit"]
                later = ("" if due == "off" else ", or the engine's own at its next start (calibration.auto_fit)"
                         if due == "due" else f", or the engine's own {due} (calibration.auto_fit)")
                print(f"default weights stored as fit {fit_id}: used by every later answer until a newer fit "
                      f"(`sirag calibrate`, one merged in{later})")
            return 0
        result = calibrate_from_memory(store, min_labels=20 if args.min_labels is None else args.min_labels,
                                       seed=config.policy.seed,
                                       save=not args.dry_run, force=args.force,
                                       answer_threshold=config.loop.answer_threshold)
    finally:
        store.close()
    if args.json:
        _print_json(result)
    else:
        _print_calibration(result)
    return 0


def _print_calibration(result: dict) -> None:
    def fmt(x) -> str:
        return "  n/a" if x is None else f"{x:5.3f}"

    def span(m: dict) -> str:
        # In-sample scores have no interval: the same labels fitted and scored say nothing of others.
        if "auroc_interval" not in m:
            return ""
        iv = m["auroc_interval"]
        return " " * 14 + ("n/a" if iv is None else f"{iv['low']:.2f}–{iv['high']:.2f}")

    held = result["held_out"]
    print(f"labelled answered outcomes: {result['n']}")
    print(f"{'':46s} AUROC   ECE    Brier  ECE if calibrated  AUROC 95% interval")
    rows = [("default weights", held["before"]),
            (f"fitted, each label held out ({held['folds']} folds)", held["after"]),
            ("fitted on all labels, scored in-sample", result["in_sample_after"])]
    for name, m in rows:
        print(f"{name:46s} {fmt(m['auroc'])}  {fmt(m['ece'])}  {fmt(m['brier'])}  {fmt(m.get('ece_floor'))}"
              + span(m))
    print(f"(held out: each label scored by weights fitted on the other {held['folds'] - 1} of {held['folds']} folds, "
          f"at least {held['n_train']} labels each; one question's answers share a fold)")
    print("(ECE if calibrated: what perfectly calibrated confidences would measure on this few labels; "
          "an ECE near it is sampling noise)")
    print("(AUROC 95% interval: the middle 95% of the AUROCs of 1000 draws, with replacement, of as many questions "
          "from these, each with its held-out confidences; a target inside it is neither shown met nor shown missed "
          "by these labels)")
    by_corpus = held.get("by_corpus") or {}
    if len(by_corpus) > 1:
        from .memory.analysis import NOT_RECORDED

        own = result.get("corpus_fits") or {}
        stored = "fit_id" in result
        print("by corpus, each label held out (a corpus's own fit is pulled toward the fit on all labels, "
              "by an l2 of its own; the figures above score each label by the fit its corpus keeps):")
        for corpus, figures in by_corpus.items():
            name = "corpus not recorded (answers recorded by an older sirag)" if corpus == NOT_RECORDED else corpus
            print(f"  {name} ({figures['n']} labels)")
            lines = [("default weights", figures["before"]), ("one fit for every corpus", figures["pooled"])]
            if "own" in figures:
                what = f"its own fit ({figures['own_folds']} of {held['folds']} folds)"
                lines.append((what + (", in use" if corpus in own and stored else ""), figures["own"]))
            for what, m in lines:
                print(f"    {what:42s} {fmt(m['auroc'])}  {fmt(m['ece'])}  {fmt(m['brier'])}  {fmt(m.get('ece_floor'))}"
                      + span(m))
            if corpus in own:
                chose = "; each held-out fold chose its own" if result.get("l2_chosen") else ", fixed"
                print(f"    its weights (l2 {own[corpus]['l2']:g}{chose}): "
                      + ", ".join(f"{k} {v:+.2f}" for k, v in own[corpus]["weights"].items()))
            else:
                why = ("its corpus is unknown" if corpus == NOT_RECORDED
                       else "its own fits scored none of its held-out labels (each fold that held one out left too "
                            "few, or one kind, to fit on)" if figures.get("eligible") and "own" not in figures
                       else f"its own fit scored a worse held-out Brier, {figures['own']['brier']:.4f} against "
                            f"{figures['pooled']['brier']:.4f}" if "own" in figures
                       else "too few labelled answers, or not both right and wrong ones, for a fit of its own")
                print(f"    (scored by the fit on all labels: {why})")
    print(("weights of the fit on all labels: " if len(by_corpus) > 1 else "weights: ")
          + ", ".join(f"{k} {v:+.2f}" for k, v in result["weights"].items()))
    if "model" in result:
        if result["model"] == "scaled":
            sc = result.get("scaled") or {}
            what = (f"scaled, the default weights' score times {sc.get('slope', float('nan')):.2f} and shifted by "
                    f"{sc.get('shift', float('nan')):+.2f}: answers ranked as the default weights rank them")
        else:
            what = "full, every weight refitted"
        how = ("chosen from the labels: the lower cross-fitted Brier score; each held-out fold chose its own"
               if result.get("model_chosen")
               else "fixed")
        print(f"model: {what} ({how})")
    if result.get("l2") is not None:
        how = ("chosen from the labels: the lowest cross-fitted Brier score; each held-out fold chose its own"
               if result.get("l2_chosen") else "fixed")
        print(f"pull toward the default weights: l2 {result['l2']:g} ({how})")
    if "at_threshold" in result:
        t = result["at_threshold"]
        b, a = t["before"], t["after"]
        # A calibration moves the confidences past the loop's bar: what that does to answers, before it is used.
        print(f"at loop.answer_threshold {t['threshold']:.2f} (what a first attempt must reach to be returned): "
              f"right answers below it, withheld: {b['right_below']} of {b['right']} with the default weights, "
              f"{a['right_below']} with the fit (each label held out); wrong answers at or above it, returned: "
              f"{b['wrong_at_or_above']} of {b['wrong']}, {a['wrong_at_or_above']} with the fit")
    if "fit_id" in result:
        own = result.get("corpus_fits") or {}
        with_own = (f", with the own fit{'' if len(own) == 1 else 's'} shown above for {len(own)} "
                    f"corp{'us' if len(own) == 1 else 'ora'} (questions on {'it' if len(own) == 1 else 'them'} use "
                    f"{'it' if len(own) == 1 else 'theirs'})" if own else "")
        print(f"stored as fit {result['fit_id']}{with_own}: used by every later answer (the latest fit wins; "
              "`sirag calibrate --reset` goes back to the default weights)")
    elif result.get("not_stored"):
        print(f"not stored: {result['not_stored']}")
    elif result.get("would_not_store"):
        print(f"dry run: nothing stored; {result['would_not_store']}")
    else:
        print("dry run: nothing stored; a real run would store this fit")


# -- parser -------------------------------------------------------------------------------

def _doc(fn: Callable) -> str:
    return inspect.cleandoc(fn.__doc__ or "")  # the first line is not indented, the rest are


def build_parser() -> argparse.ArgumentParser:
    from .batch import int_at_least

    def parent(index_help: str) -> argparse.ArgumentParser:
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument("--config", metavar="FILE", action="append",
                            help="YAML config layered over the packaged defaults; repeat to layer several files, "
                                 "later ones winning")
        common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help="override one setting, e.g. --set strategy.top_k=8 (repeatable)")
        common.add_argument("--index", metavar="DIR", help=index_help)
        common.add_argument("--memory", metavar="DB", help="memory store file (default: paths.memory_db)")
        common.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
        common.add_argument("-v", "--verbose", action="store_true",
                            help="more detail: INFO log lines on stderr, DEBUG ones in the log file, and for ask "
                                 "the reasons of each attempt's checks")
        common.add_argument("--debug", action="store_true",
                            help="show tracebacks: of unexpected errors (raised), and of path errors (printed)")
        return common

    common = parent("corpus index directory (default: paths.index_dir; for batch and eval: --index, or "
                    "--set paths.index_dir, which means the same there, replaces the batch file's index:; "
                    "without them, the batch file's index:, else a --config file's paths.index_dir (other "
                    "than the packaged index/default), else <output_dir>/<name>/index)")
    # The commands of the memory store alone take no --index (main says why, rather than ignore it).
    store_only = parent(argparse.SUPPRESS)

    p = _Parser(prog="sirag", description=(
        "A self-correcting RAG engine: answers questions from your documents with a local model, "
        "checks each answer, retries with another strategy or refuses, and remembers what worked."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start with: sirag ingest DOCS/  then  sirag ask \"QUESTION\". Each command has --help.")
    p.add_argument("--version", action="version", version=f"sirag {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable) -> argparse.ArgumentParser:
        doc = _doc(fn)
        return sub.add_parser(name, parents=[store_only if name in _NO_INDEX else common],
                              help=" ".join(doc.split("\n\n")[0].split()), description=doc,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    sp = add("ingest", cmd_ingest)
    sp.add_argument("paths", nargs="+", metavar="PATH", help="files or folders of documents")
    sp.add_argument("--rebuild", action="store_true", help="ignore the previous index and re-chunk everything")
    sp.add_argument("--stats", action="store_true", help="print chunk-length statistics afterwards")
    sp.add_argument("--stats-png", metavar="FILE", help="write a chunk-length histogram PNG (implies --stats)")

    sp = add("fetch-gutenberg", cmd_fetch_gutenberg)
    sp.add_argument("ids", nargs="+", metavar="ID", help="Project Gutenberg book ids, e.g. 1661")

    sp = add("stats", cmd_stats)
    sp.add_argument("--png", metavar="FILE", help="write a chunk-length histogram PNG")

    for name, fn in (("ask", cmd_ask), ("search", cmd_search)):
        sp = add(name, fn)
        sp.add_argument("question", nargs="+", help="the question (use - to read it from stdin)")
        if name == "ask":
            sp.add_argument("--no-retry", action="store_true", help="one attempt only (the loop off)")
            sp.add_argument("--no-memory", action="store_true",
                            help="do not record this question in memory (its calibration fit and learned strategy "
                                 "choices are still used)")
            sp.add_argument("--stream", action="store_true",
                            help="stream each attempt's tokens to stderr, each followed by its number and "
                                 "diagnosis; not with --json")
        else:
            sp.add_argument("--chunker", choices=["fixed", "section", "semantic"],
                            help="the chunks to search (default: strategy.chunker)")
            sp.add_argument("--retriever", choices=["dense", "bm25", "hybrid"],
                            help="how to search them (default: strategy.retriever)")
            sp.add_argument("--top-k", type=int_at_least(1, 100), help="passages to show (default: strategy.top_k)")
            sp.add_argument("--no-rerank", action="store_true", help="rank by retrieval score only")

    sub._parser_class, default_class = _MemoryParser, sub._parser_class  # its words may follow options
    sp = add("memory", cmd_memory)
    sub._parser_class = default_class
    sp.add_argument("action", choices=["stats", "strategies", "failures", "show", "search", "export", "report",
                                       "merge", "backup"])
    sp.add_argument("arg", nargs="*", help="outcome id for show, text for search, other stores' files for merge, "
                                           "the file to write for backup (after --, a word may begin with -: memory "
                                           "search -- -Marsh)")
    sp.add_argument("--limit", type=int_at_least(1),
                    help=f"rows shown by `memory search` (default {_SEARCH_LIMIT} matches), `strategies` (the most "
                         "used first) and `failures` (the most frequent first; both default: all)")
    sp.add_argument("--csv", metavar="FILE", help="export: write CSV here")
    sp.add_argument("--json-file", metavar="FILE", help="export: write JSON here")
    sp.add_argument("--html", metavar="FILE", help="report: write the HTML report here")
    sp.add_argument("--force", action="store_true", help="backup: replace FILE if it exists")

    sp = add("feedback", cmd_feedback)
    sp.add_argument("outcome_id", help="outcome id (or its first 6+ characters) from sirag ask")
    g = sp.add_mutually_exclusive_group(required=True)
    g.add_argument("--correct", action="store_true", dest="correct",
                   help="the answer is right (for a refusal: refusing was right)")
    g.add_argument("--wrong", action="store_false", dest="correct",
                   help="the answer is wrong (for a refusal: the documents did answer it)")
    sp.add_argument("--note", help="a note kept with the label")

    sp = add("calibrate", cmd_calibrate)
    sp.add_argument("--min-labels", type=int_at_least(2), default=None,
                    help="labelled outcomes needed to fit (default 20); also what a corpus needs for a fit of its own")
    sp.add_argument("--dry-run", action="store_true",
                    help="report the fit, and whether a real run would store it, without storing it (a store of an "
                         "older schema is upgraded first, as `sirag memory` does)")
    sp.add_argument("--force", action="store_true",
                    help="store the fit even when it scores worse than the default weights on held-out labels")
    sp.add_argument("--reset", action="store_true",
                    help="put the default weights back in use (stored as the newest fit; nothing is deleted)")

    from .batch import add_batch_commands

    add_batch_commands(sub, common, COMMANDS, command)
    from .serve.cli import add_serve_command

    add_serve_command(sub, common, COMMANDS)
    return p


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str],
                  action: str | None = None, words: list[str] | None = None) -> NoReturn:
    """Exit 2 with the usage of the command given (not the top-level one) and, for an option that
    belongs to other commands, which ones: ``sirag batch x.yaml --name n`` says --name is eval's.
    ``words``: the words ``memory search`` did take, for its hint about words beginning with -."""
    subs = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    target = subs.get(command, parser)
    hints = []
    dashed = []  # memory search: words that begin with -, not options
    for arg in extra:
        option = arg.split("=", 1)[0]
        owners = [name for name, sp in subs.items() if name != command and option in sp._option_string_actions]
        if option.startswith("-") and owners:
            hints.append(f"{option} is an option of `sirag {'`, `sirag '.join(owners)}`")
        elif option == "--resume" and command in ("batch", "eval"):
            # Runs resume by themselves: the same batch (the same name) run again skips what it answered.
            hints.append("a run resumes by itself: run the same batch again, under the same name, and the "
                         "questions already answered are kept, not asked again")
        elif action == "search" and option.startswith("-") and not option.startswith("--") \
                and option not in target._option_string_actions:
            # Not an option anywhere: most likely a word to search for that begins with -.
            dashed.append(arg)
    if dashed:
        # One hint with every word (a search finds outcomes holding them all, in any order).
        hints.append(f"a word to search for that begins with - goes after --, with the other words (options "
                     "before the --): "
                     f"`sirag memory search -- {' '.join(shlex.quote(w) for w in [*(words or []), *dashed])}`")
    target.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


#: Commands that work on the memory store alone, over every index folder (corpus) whose answers it holds.
_NO_INDEX = {
    "memory": "it works on the memory store, which holds the answers from every index folder (`sirag memory stats` "
              "lists them under corpora)",
    "feedback": "it labels an answer in the memory store by its outcome id, whatever index folder it came from",
    "calibrate": "it fits on the labels of every index folder in the memory store, and gives each one with enough "
                 "labels a fit of its own",
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args.command, extra, getattr(args, "action", None), getattr(args, "arg", None))
    if not args.command:
        parser.print_help()
        return 2
    debug = getattr(args, "debug", False) or os.environ.get("SIRAG_DEBUG") == "1"
    try:
        if args.command in _NO_INDEX and getattr(args, "index", None) is not None:
            # Accepted silently, it let `sirag calibrate --index A` look like a fit of A's labels alone.
            raise InputError(f"--index is not an option of sirag {args.command}: {_NO_INDEX[args.command]}; "
                             "leave --index out (--memory chooses the store)")
        for option in ("index", "memory"):
            value = getattr(args, option, None)
            if value is not None and not value.strip():
                # An empty variable in a script ("--index $DIR"): the current folder or the default
                # store would be used in its place.
                raise InputError(f"--{option} is empty; give a path, e.g. --{option} "
                                 + ("index/mine" if option == "index" else "memory/mine.db"))
        for option in ("index", "memory", "output_dir"):
            value = getattr(args, option, None)
            try:
                if value:
                    Path(value).expanduser().resolve()
            except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop of links
                raise InputError(f"--{option.replace('_', '-')} {value} is a link that leads to itself (a loop of "
                                 "links); remove the link, or give another path") from None
        if getattr(args, "index", None):
            args.index = os.path.expanduser(args.index)  # "--index=~/x" reaches us unexpanded, as paths.* would not
        # --memory is a --set of paths.memory_db; batch and eval re-apply these over a batch file's overrides.
        args.overrides = [*args.overrides, *([f"paths.memory_db={args.memory}"] if args.memory is not None else [])]
        if pins_strategy(args.overrides):
            args.overrides.append("policy.first_from_memory=false")
        from .logging_setup import console_handler, setup_logging

        if not logging.getLogger().handlers:
            # Until setup_logging (which needs the settings' log folder) replaces it: what loading the
            # settings warns of (a removed setting) reads as the CLI's other warnings do.
            logging.getLogger().addHandler(console_handler(args.verbose))
        config = load_config(args.config, args.overrides)

        setup_logging(config.paths.log_dir, args.verbose, args.command)
        return COMMANDS[args.command](args, config)
    except SiragError as exc:
        print(f"error: {exc}", file=sys.stderr)
        # The log file keeps why the command stopped (the terminal has the line above); an error
        # found before logging was set up (a bad setting) has no log file to go to, and Python's
        # last-resort handler would print it again.
        if logging.getLogger().handlers:
            logging.getLogger("sirag").warning("error: %s", exc, extra={"file_only": True})
        log.debug("error", exc_info=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        # An ingest stopped once its new index was live says so (a batch's own line says more: how to resume).
        what = str(exc) if isinstance(exc, InterruptedAfterCommit) and args.command in ("ingest", "fetch-gutenberg") \
            else _INTERRUPTED.get(args.command, "stopped cleanly")
        print(f"interrupted: {what}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        if exc.filename is None or _inside_package(exc.filename):  # not a path the user gave
            return _internal_error(exc, debug)
        # A path that cannot be read or written (missing folder, a folder where a file belongs,
        # no permission, a read-only file system): the user's to fix, not a bug to report, so the
        # same line and exit code with --debug, which adds the traceback.
        logging.getLogger("sirag").error("path error", exc_info=exc, extra={"file_only": True})
        if debug:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {exc.filename}: {exc.strerror or exc}; check that path (does its folder exist, is it a file "
              "and not a folder, may you write there?)", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        import sqlite3

        from .memory.interrupts import interrupted_in_sql

        if isinstance(exc, sqlite3.OperationalError) and interrupted_in_sql(exc):  # a Ctrl-C in a SQL function
            print(f"interrupted: {_INTERRUPTED.get(args.command, 'stopped cleanly')}", file=sys.stderr)
            return 130
        return _internal_error(exc, debug)


def _inside_package(filename: Any) -> bool:
    """Whether a path belongs to sirag itself (a missing packaged file is a bug, not a user error)."""
    try:
        return Path(os.fsdecode(filename)).resolve().is_relative_to(Path(__file__).resolve().parent)
    except (OSError, TypeError, ValueError):
        return False


def _internal_error(exc: BaseException, debug: bool) -> int:
    if debug:
        raise exc
    logging.getLogger("sirag").error("unexpected error", exc_info=exc, extra={"file_only": True})
    print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback; please report it)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
