"""Chunk vectors: which chunkers pool theirs from sentence vectors (one shared sentence pass) and
which embed each chunk whole, and the chunker parameters an index records."""

from __future__ import annotations

import numpy as np

from ..config import Config
from ..retrieval.embedding_cache import EmbeddingCache
from ..types import Chunk
from .chunkers import make_chunker
from .chunkers.base import CHUNKING_VERSION
from .sentences import split_sentences


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
