"""Retrieval evaluation: evidence recall@k and MRR per chunker x retriever (``sirag eval --retrieval-only``).

A hit counts when its chunk text contains an evidence quote (whitespace-normalised) or, for
SQuAD, when it comes from the gold paragraph. The refinement columns compare the prompt
tokens of the refined context with the raw top-k chunks, and whether the evidence survives.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config import Config
from .datasets import QAItem
from .retrieval_metrics import collapse_spaces, evidence_hit, mrr, recall_at_k


def _hit(item: QAItem, doc_id: str, text: str) -> bool:
    if item.evidence:
        return any(evidence_hit(text, q) for q in item.evidence)
    if item.context is not None and item.book:
        return doc_id == item.book
    return False


def retrieval_eval(spec, base: Path, config: Config, limit: int | None = None, ks=(1, 3, 5, 10),
                   chunkers=None, retrievers=("dense", "bm25", "hybrid"), rerank=(False, True),
                   cli_overrides=(), offset: int | None = None, guard_index: str | None = None) -> dict:
    from ..batch.inputs import (check_documents, check_folders, check_index_keeps_documents, check_index_sources,
                                ensure_index, run_inputs, write_squad_corpus)
    from ..batch.questions import load_items
    from ..batch.settings import resolved_config
    from ..errors import BatchError
    from ..retrieval.embedder import embedder_from_config
    from ..retrieval.searcher import Searcher

    items = load_items(spec, base)[spec.offset if offset is None else offset:]
    items = items[: limit or spec.limit] if (limit or spec.limit) else items
    items = [it for it in items if it.answerable and (it.evidence or it.context)]
    if not items:
        raise BatchError(f"batch {spec.name}: no question to score retrieval on: --retrieval-only needs answerable "
                         "questions with evidence quotes (JSONL 'evidence') or SQuAD paragraphs")
    out_root, index_dir, corpus, squad = run_inputs(spec, base, items)
    cfg = resolved_config(config, spec, {}, index_dir, cli_overrides)
    # No run folder is written, only the index and, for a SQuAD file with no corpus, its paragraphs
    # under <output_dir>/corpora/ (run_inputs checks the output folder; they are written once every
    # check has passed, right before the index is built). A file in the way of the index is named
    # as a run names it (the output folder's problem when the index goes there, as
    # <output_dir>/<name>/index does by default).
    check_folders(out_root if Path(index_dir).is_relative_to(out_root) else None, [], index_dir)
    check_documents(spec, index_dir, corpus, squad)
    if corpus:
        if guard_index:
            check_index_sources(index_dir, corpus, guard_index)
        else:
            check_index_keeps_documents(index_dir, corpus)
        write_squad_corpus(squad, corpus)
        ensure_index(cfg, corpus, index_dir, progress=False, out_root=out_root)
    embedder = embedder_from_config(cfg)
    searcher = Searcher(cfg, embedder, index_dir)
    rows = []
    kmax = max(ks)
    try:
        chunkers = chunkers or searcher.available_chunkers()
        for ch in chunkers:
            for rt in retrievers:
                for rr in rerank:
                    strategy = replace(cfg.strategy.to_strategy(), chunker=ch, retriever=rt, rerank=rr, top_k=kmax)
                    flags, times = [], []
                    for it in items:
                        t = time.perf_counter()
                        res = searcher.search(it.question, strategy)
                        times.append((time.perf_counter() - t) * 1000)
                        flags.append([_hit(it, h.chunk.doc_id, h.chunk.text) for h in res.hits])
                    row = {"chunker": ch, "retriever": rt, "rerank": rr, "n": len(items),
                           **{f"recall@{k}": recall_at_k(flags, k) for k in ks}, "mrr": mrr(flags),
                           "p50_ms": float(np.percentile(times, 50)) if times else None}
                    rows.append(row)
        default = cfg.strategy.to_strategy()
        rows_ref = refinement_eval(searcher, items, default)
        nowhere = evidence_found_nowhere(items, [searcher.chunker(ch).chunks for ch in chunkers])
    finally:
        searcher.close()
    from ..batch.report import markdown_table

    return {"rows": rows, "refinement": rows_ref, "evidence_found_nowhere": nowhere,
            "markdown": markdown_table(rows) + "\n" + markdown_table([rows_ref])}


def evidence_found_nowhere(items: list[QAItem], chunk_lists: list[list]) -> list[str]:
    """The ids of the questions none of whose evidence quotes is in any one passage of any chunker:
    their recall is 0 whatever the retriever, most often for a quote that is not the documents'
    words verbatim (a typo, a paraphrase, other quote marks). Compared as :func:`evidence_hit`
    compares, with each passage collapsed once instead of once per quote."""
    texts = [collapse_spaces(c.text) for chunks in chunk_lists for c in chunks]
    return [it.id for it in items if it.evidence
            and not any(q in t for q in map(collapse_spaces, it.evidence) if q for t in texts)]


def refinement_eval(searcher, items: list[QAItem], strategy, count_prompt=None) -> dict:
    """Prompt tokens and evidence presence: raw top-k chunks vs the refined context.

    Tokens are the embedder's word pieces (what ``strategy.context_budget`` counts). With
    ``count_prompt`` (the generator's token counter) the passages are also counted as the
    prompt shows them, numbered one per line: the unit generation time is paid in.
    """
    from ..generation.prompts import number_texts

    count = searcher.embedder.tokenizer.count
    raw_tokens, ref_tokens, raw_ev, ref_ev, raw_ans, ref_ans = [], [], [], [], [], []
    raw_prompt, ref_prompt = [], []

    def has_answer(texts: list[str]) -> bool:
        hay = " ".join(" ".join(t.split()).lower() for t in texts)
        return any(" ".join(a.split()).lower() in hay for a in it.answers if a.strip())

    for it in items:
        res = searcher.search(it.question, strategy)
        raw_text = [h.chunk.text for h in res.hits]
        ref_text = [p.text for p in res.passages]
        raw_tokens.append(sum(count(t) for t in raw_text))
        ref_tokens.append(sum(count(t) for t in ref_text))
        if count_prompt is not None:
            raw_prompt.append(count_prompt(number_texts(raw_text)))
            ref_prompt.append(count_prompt(number_texts(ref_text)))
        raw_ev.append(any(_hit(it, h.chunk.doc_id, h.chunk.text) for h in res.hits))
        ref_ev.append(any(_hit(it, p.doc_id, p.text) for p in res.passages) if it.evidence else raw_ev[-1])
        if it.answers:
            raw_ans.append(has_answer(raw_text))
            ref_ans.append(has_answer(ref_text))
    n = max(1, len(items))
    out = {"strategy": strategy.key, "raw_tokens_mean": sum(raw_tokens) / n, "refined_tokens_mean": sum(ref_tokens) / n,
           "token_reduction": 1 - (sum(ref_tokens) / max(1, sum(raw_tokens))),
           "evidence_in_raw": sum(raw_ev) / n, "evidence_in_refined": sum(ref_ev) / n,
           # A gold answer string (whitespace- and case-normalised) in the raw / refined context.
           "answer_in_raw": sum(raw_ans) / len(raw_ans) if raw_ans else None,
           "answer_in_refined": sum(ref_ans) / len(ref_ans) if ref_ans else None}
    if count_prompt is not None:
        out.update({"raw_prompt_tokens_mean": sum(raw_prompt) / n, "refined_prompt_tokens_mean": sum(ref_prompt) / n,
                    "prompt_token_reduction": 1 - (sum(ref_prompt) / max(1, sum(raw_prompt)))})
    return out
