"""``sirag ask`` and ``sirag search``: a question answered, or the passages a strategy retrieves for it."""

from __future__ import annotations

import argparse
import sys
import textwrap

from ..config import Config
from ..errors import AnswerNotRecordedError, InputError
from .common import add_command, command, make_engine, print_json


def source_snippet(text: str, focus: set[str], width: int = 220) -> str:
    """A source shown in ``width`` characters: from the sentence holding the most of the ``focus``
    terms (claim terms), so that the words that state the answer show even deep in a long
    passage; from the start when no sentence holds one. A cut start or end is marked "…"."""
    from ..ingestion.sentences import split_sentences
    from ..text import claim_terms

    start = 0
    if focus and text:
        best = 0
        for s, e in split_sentences(text):
            hits = len(focus & set(claim_terms(text[s:e])))
            if hits > best:
                best, start = hits, s
    shown = textwrap.shorten(text[start:], width - (2 if start else 0), placeholder=" …")
    return ("… " if start else "") + shown


def format_answer(ans: dict, verbose: bool, held_out: bool = False) -> str:
    """The answer for a person: the answer and, when its confidence is the shipped model's
    (``held_out``: loop.target_precision set), what that confidence meant on corpora the model
    never saw; the sources it cites (document > section, a short quote), then one line per
    attempt; ``verbose`` adds each attempt's signals, diagnosis, tokens and timings."""
    from ..evaluation.shipped import meaning

    lines = []
    if ans["refused"]:
        lines.append("REFUSED: " + (ans["refusal_reason"] or ""))
        lines.append(f"confidence of the refusal {ans['confidence']:.2f}")
        if ans["sources"]:
            lines.append("closest passages:")
    else:
        lines.append(ans["answer"])
        chosen = next((a for a in ans["attempts"] if a["number"] == ans["chosen_attempt"]), None)
        means = meaning(ans["confidence"]) if held_out else None
        lines.append(f"confidence {ans['confidence']:.2f}" + (f": {means}" if means else ""))
        if chosen is not None and chosen["failure"] != "NONE":
            # Accepted on its confidence although a check flagged it (no attempt passed them all).
            lines.append(f"note: its checks flagged {chosen['failure']}: {chosen['failure_reason']}")
        from ..evaluation.faithfulness import miscitations

        claims = ((chosen or {}).get("signals", {}).get("faithfulness", {}).get("detail") or {}).get("claims") or []
        if miscited := miscitations(claims):
            # The sources below include the passages that state those claims.
            lines.append("note: " + "; ".join(miscited))
        lines.append("sources:")
    # The words to show in each source: what the answer adds to the question (its answer), or
    # for a refusal the question's own words.
    from ..generation.prompts import strip_citations
    from ..text import claim_terms

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
                     + f"  {a['failure']}  {'loop ' if held_out else ''}confidence "
                     f"{'n/a' if conf is None else format(conf, '.2f')}  {secs:.1f}s")
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
    from ..questions import check_question

    if args.stream and args.json:
        raise InputError("--stream writes the answer as it is generated and --json writes it once at the end; "
                         "choose one")
    question = check_question(_read_question(args))
    engine = make_engine(args, config, record=not args.no_memory)
    stream = args.stream
    on_token = (lambda piece: (sys.stderr.write(piece), sys.stderr.flush())) if stream else None

    def on_attempt(a) -> None:
        if stream:  # after each attempt's streamed text: its diagnosis (a retry's text follows)
            sys.stderr.write(f"\n[attempt {a.number}: {a.attribution.failure}]\n")

    try:
        answer = engine.ask(question, loop=False if args.no_retry else None, on_token=on_token, on_attempt=on_attempt)
    except AnswerNotRecordedError as exc:
        _print_answer(exc.answer.to_json(), args, engine)  # the work is not lost; main() then says what failed
        raise
    finally:
        engine.close()
    if engine.calibrated:  # as `sirag batch` says it: the confidence weights changed with this command
        print(f"note: {engine.calibrated}", file=sys.stderr)
    _print_answer(answer.to_json(), args, engine)
    return 0


def _print_answer(data: dict, args: argparse.Namespace, engine) -> None:
    if args.json:
        print_json(data)
    else:
        print(format_answer(data, args.verbose, held_out=engine.returns_checked))


@command
def cmd_search(args: argparse.Namespace, config: Config) -> int:
    """Show the passages a strategy retrieves for a question, with each retriever's score.

    Example: sirag search "Who killed Drebber?" --chunker section --retriever hybrid --top-k 10
    """
    from dataclasses import replace

    from ..attempt import rewrite_query
    from ..questions import check_question
    from ..retrieval.embedder import embedder_from_config
    from ..retrieval.searcher import Searcher, search_json

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
        from ..generation.factory import make_generator

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
        print_json(data)
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



def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``ask`` and ``search`` to the ``sirag`` parser."""
    from ..batch import int_at_least

    for name, fn in (("ask", cmd_ask), ("search", cmd_search)):
        sp = add_command(sub, name, fn, common)
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
