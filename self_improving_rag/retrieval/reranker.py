"""The reranker: ``relevance(question, question_vec, texts) -> [float]``, one per text in the
texts' order, after an explicit activation (a logistic sigmoid) so that it lies in (0, 1) before
it is compared with a threshold.

``EmbeddingReranker``: mean of the ``top_sentences`` best cosine similarities between the question
and a passage's sentences, then ``sigmoid(slope * (cos - midpoint))``; for all-MiniLM-L6-v2 a
cosine of 0.35 (``retrieval.relevance_midpoint``) is where question/sentence pairs turn from
unrelated to related. Its ``rerank`` also returns the per-sentence scores that context refinement
uses. (A local cross-encoder and the generator as a yes/no judge of the top hits were tried in its
place or after it; no cross-encoder is packaged, and the judge's ~28 s per question bought no
recall on sherlock_dev: docs/results.md, "Retrieval".)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ingestion.sentences import split_sentences


#: The passage's relevance is the mean cosine of its this many best sentences.
RERANK_SENTENCES = 2
#: How steeply relevance turns from 0 to 1 around the midpoint, per unit of cosine.
RELEVANCE_SLOPE = 10.0


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


@dataclass(frozen=True)
class SentenceScores:
    """Sentence spans of one text (offsets within it) and their similarity to the question."""

    spans: tuple[tuple[int, int], ...]
    sims: tuple[float, ...]


class EmbeddingReranker:
    """Relevance from the question's similarity to each passage's best sentences."""

    name = "embedding"

    def __init__(self, embed: Callable[[list[str]], np.ndarray], top_sentences: int = RERANK_SENTENCES,
                 slope: float = RELEVANCE_SLOPE, midpoint: float = 0.35) -> None:
        if top_sentences < 1:
            raise ValueError(f"top_sentences must be >= 1, got {top_sentences}")
        self.embed = embed
        self.top_sentences = top_sentences
        self.slope = slope
        self.midpoint = midpoint

    def sentence_scores(self, question_vec: np.ndarray, texts: list[str]) -> list[SentenceScores]:
        spans_per = [split_sentences(t) or [(0, len(t))] for t in texts]
        flat = [t[s:e] for t, spans in zip(texts, spans_per) for s, e in spans]
        vecs = self.embed(flat) if flat else np.zeros((0, len(question_vec)), np.float32)
        sims = vecs @ question_vec.astype(np.float32) if len(flat) else np.zeros(0)
        out, i = [], 0
        for spans in spans_per:
            out.append(SentenceScores(tuple(spans), tuple(float(x) for x in sims[i:i + len(spans)])))
            i += len(spans)
        return out

    def activate(self, cos: float) -> float:
        return sigmoid(self.slope * (cos - self.midpoint))

    def score(self, s: SentenceScores) -> float:
        best = sorted(s.sims, reverse=True)[: self.top_sentences]
        return self.activate(sum(best) / len(best)) if best else 0.0

    def relevance(self, question: str, question_vec: np.ndarray, texts: list[str]) -> list[float]:
        return [self.score(s) for s in self.sentence_scores(question_vec, texts)]

    def rerank(self, question_vec: np.ndarray, texts: list[str]) -> tuple[list[tuple[int, float]], list[SentenceScores]]:
        scores = self.sentence_scores(question_vec, texts)
        ranked = sorted(((i, self.score(s)) for i, s in enumerate(scores)), key=lambda t: (-t[1], t[0]))
        return ranked, scores
