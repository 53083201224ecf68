"""Rerankers behind one interface: ``relevance(question, question_vec, texts) -> [float]``.

Each returns one relevance per text, in the texts' order, after an explicit activation (a
logistic sigmoid) so that it lies in (0, 1) before it is compared with a threshold:

* ``EmbeddingReranker`` (offline default): mean of the ``top_sentences`` best cosine
  similarities between the question and a passage's sentences, then
  ``sigmoid(slope * (cos - midpoint))``; for all-MiniLM-L6-v2 a cosine of 0.35 (midpoint)
  is where question/sentence pairs turn from unrelated to related. Its ``rerank`` also
  returns the per-sentence scores that context refinement uses.
* ``CrossEncoderReranker``: a sentence-transformers CrossEncoder from a local directory
  (``retrieval.cross_encoder_dir``); its logits pass the same sigmoid (slope 1, midpoint 0).

The third judge, the generator's yes/no relevance on the top few hits
(``retrieval.llm_judge_top``), is applied by the searcher after these, because it needs the
generator and a token budget rather than a model of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ingestion.sentences import split_sentences


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

    def __init__(self, embed: Callable[[list[str]], np.ndarray], top_sentences: int = 2,
                 slope: float = 10.0, midpoint: float = 0.35) -> None:
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


class CrossEncoderReranker:
    """A local sentence-transformers CrossEncoder; logits are passed through a sigmoid."""

    name = "cross_encoder"

    def __init__(self, model_dir: str, batch_size: int = 16) -> None:
        self.model_dir = model_dir
        self.batch_size = batch_size
        self._model = None

    def warm_up(self) -> None:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            # No activation inside the model: we apply the sigmoid ourselves, explicitly.
            import torch

            self._model = CrossEncoder(self.model_dir, device="cpu", local_files_only=True,
                                       trust_remote_code=False, activation_fn=torch.nn.Identity())

    def relevance(self, question: str, question_vec: np.ndarray | None, texts: list[str]) -> list[float]:
        self.warm_up()
        if not texts:
            return []
        logits = self._model.predict([(question, t) for t in texts], batch_size=self.batch_size,
                                     convert_to_numpy=True)
        logits = np.asarray(logits, dtype=np.float64).reshape(len(texts), -1)[:, -1]
        return [sigmoid(float(x)) for x in logits]

    def rerank(self, question: str, texts: list[str]) -> list[tuple[int, float]]:
        rel = self.relevance(question, None, texts)
        return sorted(enumerate(rel), key=lambda t: (-t[1], t[0]))
