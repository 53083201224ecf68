"""Retrieval for one strategy: candidates, fusion, reranking, neighbours and refinement."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..config import Config
from ..errors import InputError
from ..types import Chunk, Hit, Passage, RetrievalResult, Strategy
from .bm25 import BM25Retriever
from .dense import FaissDenseRetriever
from .embedder import Embedder
from .hybrid import dedupe_overlapping, weighted_fuse
from .embedding_cache import EmbeddingCache
from .index import ChunkerIndex, CorpusIndex
from .refine import (CONTEXT_AFTER_TOKENS, CONTEXT_SENTENCES, EVERY_PASSAGE, KEEP_REPLIES, RANK_WEIGHT, join_spans,
                     refine_passage_spans)
from .reranker import EmbeddingReranker

#: Hits each retriever returns before fusion and reranking (at least 3 × top_k).
CANDIDATES = 30
#: With rerank on, final score = (1 - w) * fused score (min-max over the pool) + w * relevance:
#: the embedding judge refines the lexical/dense order instead of replacing it.
RERANK_WEIGHT = 0.3


class Searcher:
    """Finds passages for a question with a given strategy. Indexes load lazily, once."""

    def __init__(self, config: Config, embedder: Embedder, index_dir: str | None = None) -> None:
        self.config = config
        self.embedder = embedder
        self.index = CorpusIndex(index_dir if index_dir is not None else config.paths.index_dir)
        self._chunkers: dict[str, ChunkerIndex] = {}
        self._cache: EmbeddingCache | None = None
        self._manifest: dict | None = None
        self._generation: Path | None = None  # the index generation checked by warm_up
        self.reranker: EmbeddingReranker | None = None

    def warm_up(self) -> None:
        if self._manifest is not None:
            return
        from ..ingestion.chunk_vectors import chunker_params

        self.embedder.warm_up()
        # Every chunker is loaded from the generation checked here, never from a newer one an
        # ingest made meanwhile without the same check (see chunker()).
        generation = self.index.live_dir()
        built = set(self.index.manifest(generation).get("chunkers", {}))
        params = {k: v for k, v in chunker_params(self.config, self.embedder.max_tokens).items() if k in built}
        manifest = self.index.check_compatible(self.embedder.name, int(self.embedder.dim), params, generation)
        self._generation = generation
        self._cache = EmbeddingCache(self.index.root / "embeddings.sqlite", self.embedder.name)
        self.reranker = EmbeddingReranker(self.embed_cached, midpoint=self.config.retrieval.relevance_midpoint)
        self._manifest = manifest

    @property
    def manifest(self) -> dict:
        self.warm_up()
        assert self._manifest is not None
        return self._manifest

    def available_chunkers(self) -> list[str]:
        return list(self.manifest.get("chunkers", {}))

    def embed_cached(self, texts: list[str]) -> np.ndarray:
        assert self._cache is not None
        return self._cache.embed(texts, self.embedder.embed)

    def chunker(self, name: str) -> ChunkerIndex:
        self.warm_up()
        if name not in self._chunkers:
            if self.index.current_dir() != self._generation:
                # Re-ingested since the check: check the new generation before loading from it
                # (the chunkers loaded so far are dropped, so no search mixes two generations).
                self._manifest = None
                self._chunkers.clear()
                self.close()  # the embedding cache reopens with the new check
                self.warm_up()
            self._chunkers[name] = self.index.load_chunker(name, self._generation)
        return self._chunkers[name]

    def search(self, question: str, strategy: Strategy, query: str | None = None) -> RetrievalResult:
        """Retrieve, fuse, rerank, expand and refine; returns hits and numbered passages."""
        if not question.strip():
            raise InputError("the question is empty; ask a question in words")
        self.warm_up()
        assert self.reranker is not None
        timings: dict[str, float] = {}
        t = time.perf_counter()
        ci = self.chunker(strategy.chunker)
        query = question if query is None else query
        n_cand = max(CANDIDATES, strategy.top_k * 3)
        rankings: dict[str, list[tuple[int, float]]] = {}
        qvec = self.embedder.embed([query])[0]
        if strategy.retriever in ("dense", "hybrid"):
            rankings["dense"] = FaissDenseRetriever(ci.dense).retrieve(qvec, n_cand)
        if strategy.retriever in ("bm25", "hybrid"):
            rankings["bm25"] = BM25Retriever(ci.bm25, len(ci.chunks)).retrieve(query, n_cand)
        if strategy.retriever == "hybrid":
            w = self.config.retrieval.dense_weight
            fused = weighted_fuse(rankings, {"dense": w, "bm25": 1 - w})
        else:
            fused = rankings[strategy.retriever]
        spans = [(c.doc_id, c.start, c.end) for c in ci.chunks]
        fused = dedupe_overlapping(fused, spans)
        timings["retrieve"] = (time.perf_counter() - t) * 1000
        per = {name: dict(r) for name, r in rankings.items()}

        t = time.perf_counter()
        pool = fused[: n_cand if strategy.rerank else strategy.top_k]
        texts = [ci.chunks[i].text for i, _ in pool]
        ranked, sent_scores = self.reranker.rerank(qvec, texts)
        rel = dict(ranked)
        order = [(pool[j][0], pool[j][1], rel[j], sent_scores[j]) for j in range(len(pool))]
        if strategy.rerank and order:
            w = RERANK_WEIGHT
            lo, hi = min(o[1] for o in order), max(o[1] for o in order)
            norm = [((o[1] - lo) / (hi - lo) if hi > lo else 1.0) for o in order]
            final = [(1 - w) * n + w * o[2] for n, o in zip(norm, order)]
            order = [o for _, _, o in sorted(zip(final, range(len(order)), order), key=lambda t: (-t[0], t[1]))]
            final_by_idx = {o[0]: f for f, o in zip(sorted(final, reverse=True), order)}
        else:
            final_by_idx = {}
        order = order[: strategy.top_k]
        timings["rerank"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        hits = []
        for rank, (idx, fused_score, rel, _) in enumerate(order, start=1):
            scores = {name: per[name][idx] for name in per if idx in per[name]}
            scores["fused"] = fused_score
            scores["relevance"] = rel
            if idx in final_by_idx:
                scores["reranked"] = final_by_idx[idx]
            hits.append(Hit(chunk=ci.chunks[idx], score=final_by_idx.get(idx, fused_score), scores=scores, rank=rank))
        # A neighbour that is a hit itself, or already joined an earlier passage, is not repeated.
        taken = {h.chunk.chunk_id for h in hits}
        texts = []
        for h in hits:
            texts.append(self._with_neighbours(ci, h.chunk, strategy.neighbors, taken))
            taken.update(texts[-1][1])
        notes: list[str] = []
        if strategy.neighbors:
            sent_scores = self.reranker.sentence_scores(qvec, [t_[0] for t_ in texts])
        else:
            sent_scores = [o[3] for o in order]
        if self.config.retrieval.refine and hits:
            keep = refine_passage_spans(
                question, [t_[0] for t_ in texts], sent_scores, strategy.context_budget,
                self.embedder.tokenizer.count, CONTEXT_SENTENCES, RANK_WEIGHT, EVERY_PASSAGE,
                CONTEXT_AFTER_TOKENS, KEEP_REPLIES,
            )
            bodies = [join_spans(t_[0], k) for t_, k in zip(texts, keep)]
        else:
            bodies = [t_[0] for t_ in texts]
        passages = []
        for h, (full, cids, s, e), body in zip(hits, texts, bodies):
            if not body:
                continue
            passages.append(Passage(number=len(passages) + 1, text=body, chunk_ids=cids, doc_id=h.chunk.doc_id,
                                    section=h.chunk.section, start=s, end=e, score=h.score))
        timings["refine"] = (time.perf_counter() - t) * 1000
        return RetrievalResult(query=query, hits=tuple(hits), passages=tuple(passages), timings_ms=timings,
                               notes=tuple(notes))

    def _with_neighbours(self, ci: ChunkerIndex, chunk: Chunk, n: int,
                         taken: set[str] = frozenset()) -> tuple[str, tuple[str, ...], int, int]:
        """The chunk's text extended with up to ``n`` adjacent chunks of the same section that are
        not in ``taken`` (the other hits, and neighbours that earlier passages hold)."""
        group = [chunk]
        for step in (-1, 1):
            for d in range(1, n + 1):
                j = ci.neighbours.get((chunk.doc_id, chunk.position + step * d))
                if j is None or ci.chunks[j].section != chunk.section or ci.chunks[j].chunk_id in taken:
                    break
                group.append(ci.chunks[j])
        group.sort(key=lambda c: c.start)
        text = ""
        end = None
        for c in group:
            if end is None:
                text = c.text
            elif c.start >= end:
                text += "\n\n" + c.text
            else:
                text += c.text[end - c.start:]
            end = c.end if end is None else max(end, c.end)
        return text, tuple(c.chunk_id for c in group), group[0].start, max(c.end for c in group)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None



def search_json(question: str, query: str | None, strategy: Strategy, result: RetrievalResult) -> dict:
    """What ``sirag search --json`` prints (and ``POST /v1/search`` answers): the hits with each
    retriever's score, and the passages the strategy builds from them."""
    hits = [{"rank": h.rank, "doc": h.chunk.doc_id, "section": h.chunk.section, "start": h.chunk.start,
             "end": h.chunk.end, "chunk_id": h.chunk.chunk_id, "scores": {k: round(v, 4) for k, v in h.scores.items()},
             "text": h.chunk.text} for h in result.hits]
    return {"question": question, "query": query or question, "strategy": strategy.to_json(), "hits": hits,
            "passages": [p.__dict__ for p in result.passages], "timings_ms": result.timings_ms}
