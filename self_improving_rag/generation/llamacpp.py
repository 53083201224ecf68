"""llama.cpp backend (default): a GGUF model on the CPU through llama-cpp-python.

Decoding is done here token by token so that each answer token's log-probability is read
from the logits without ``logits_all`` (which would compute the vocabulary projection for
every prompt token). A new prompt that shares a token prefix with the previous one reuses
the KV cache for that prefix: the passages come first in every prompt of a question, so the
verification and retry calls only pay for what changed.
"""

from __future__ import annotations

import codecs
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..errors import GenerationError, GeneratorUnavailableError
from ..types import Generation
from .base import Generator, TokenCallback

log = logging.getLogger(__name__)


@contextmanager
def _interrupt_held() -> Iterator[None]:
    """Hold a Ctrl-C that arrives while llama.cpp loads, and raise it once loading returns.

    While the model loads, llama.cpp calls back into Python to log. A KeyboardInterrupt raised
    inside such a ctypes callback is dropped, so Ctrl-C during loading went unnoticed and the
    answer was made and stored. Off the main thread (where no signal handler can be set) this
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


class LlamaCppGenerator(Generator):
    """Chat generation with a GGUF file; the chat template comes from the file's metadata."""

    reads_prompt = True  # generate(read=...) fills Generation.prompt_read (question_prior)

    def __init__(self, model_path: str, n_ctx: int = 4096, n_threads: int = 2, n_batch: int = 512, seed: int = 0,
                 temperature: float = 0.0, max_tokens: int = 160, name: str | None = None) -> None:
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be >= 256, got {n_ctx}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.name = name or model_path
        self._llm = None
        self._formatter = None
        self._rng = np.random.default_rng(seed)
        self.load_ms = 0.0
        # Prompt tokens whose KV cache the last call reused (generate or yes_probability).
        self.last_reused_tokens = 0

    def warm_up(self) -> None:
        if self._llm is not None:
            return
        try:
            import llama_cpp
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as exc:
            raise GeneratorUnavailableError(
                "the llama.cpp backend needs llama-cpp-python; install it with: "
                "CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" pip install llama-cpp-python"
            ) from exc
        t = time.perf_counter()
        try:
            with _interrupt_held():
                llm = Llama(model_path=self.model_path, n_ctx=self.n_ctx, n_threads=self.n_threads,
                            n_threads_batch=self.n_threads, n_batch=self.n_batch, seed=self.seed,
                            logits_all=False, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise GeneratorUnavailableError(f"cannot load model {self.model_path} ({exc}); check the file or choose another --set generator.model=...") from exc
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise GeneratorUnavailableError(f"model {self.model_path} has no chat template in its metadata; use an instruct GGUF")
        eos_id, bos_id = llm.token_eos(), llm.token_bos()
        eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._llama_cpp = llama_cpp
        self._llm = llm
        self.load_ms = (time.perf_counter() - t) * 1000
        log.info("loaded %s in %.0f ms", self.model_path, self.load_ms)

    def format(self, messages: list[dict[str, str]]) -> str:
        self.warm_up()
        return self._formatter(messages=messages).prompt

    def tokenize(self, text: str) -> list[int]:
        self.warm_up()
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def _logits(self) -> np.ndarray:
        return np.ctypeslib.as_array(self._llm._ctx.get_logits(), shape=(self._llm.n_vocab(),)).astype(np.float64)

    def _cached_prefix(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` the KV cache already holds."""
        prefix = 0
        for a, b in zip(self._llm.input_ids[: self._llm.n_tokens].tolist(), tokens):
            if a != b:
                break
            prefix += 1
        return prefix

    def _prefill(self, tokens: list[int]) -> int:
        """Evaluate ``tokens``, reusing the cached prefix; returns the number of reused tokens."""
        llm = self._llm
        prefix = min(self._cached_prefix(tokens), len(tokens) - 1)  # at least one token must run for fresh logits
        llm.n_tokens = prefix
        llm.eval(tokens[prefix:])
        self.last_reused_tokens = prefix
        return prefix

    def _fit(self, tokens: list[int], max_tokens: int) -> None:
        if len(tokens) + max_tokens > self.n_ctx:
            raise GenerationError(
                f"prompt of {len(tokens)} tokens + {max_tokens} to generate exceeds n_ctx={self.n_ctx}; "
                "lower strategy.context_budget or raise generator.n_ctx"
            )

    def _span_in(self, prompt: str, tokens: list[int], span: str,
                 max_tokens: int = 64) -> tuple[int, list[int]] | None:
        """Where the last ``span`` of ``prompt`` lies in its tokens: (index of its first token,
        its first ``max_tokens`` tokens as the whole prompt has them), or None when the text is
        not there, starts the prompt, or a token crosses its start. Its last token may run on
        past it: the vocabulary joins "?" and the newline after it into one token ("?\n"),
        which is then read as the span's last."""
        at = prompt.rfind(span) if span else -1
        if at < 0:
            return None
        before = self.tokenize(prompt[:at])
        upto = self.tokenize(prompt[:at + len(span)])
        n, m = len(before), len(upto)
        if not before or upto[:n] != before or m <= n or tokens[:m - 1] != upto[:m - 1] or len(tokens) < m:
            return None
        return n, tokens[n:m][:max_tokens]

    def _span_pieces(self, cont: list[int], span: str) -> list[str]:
        """The text of each of a span's tokens, the last one cut at the span's end if it runs on
        past it ("?\n"). A character can take several tokens: they are decoded incrementally, so
        the pieces join into the span's text (a token that ends inside a character gives "" and
        the next one the rest)."""
        stream = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces = [stream.decode(self._llm.detokenize([tok])) for tok in cont]
        over = len("".join(pieces)) - len(span)
        if over > 0 and "".join(pieces).startswith(span):
            pieces[-1] = pieces[-1][:len(pieces[-1]) - over]
        return pieces

    def _prefill_reading(self, tokens: list[int], start: int, wanted: list[bool]) -> tuple[int, np.ndarray, dict[int, float]]:
        """Evaluate ``tokens`` as :meth:`_prefill` does, also computing a row of logits before
        each token ``start + j`` with ``wanted[j]``: (reused tokens, the last token's logits, the
        log-probability of each wanted token by its index j)."""
        llm = self._llm
        rows_at = {start + j - 1: start + j for j, w in enumerate(wanted) if w}
        # At least one token runs (for fresh logits), and every row wanted is computed now.
        prefix = min(self._cached_prefix(tokens), len(tokens) - 1, *rows_at)
        llm.n_tokens = prefix
        last = len(tokens) - 1
        rows = self._eval_logits_at(tokens[prefix:], [i in rows_at or i == last for i in range(prefix, len(tokens))])
        self.last_reused_tokens = prefix
        read = {}
        for pos, at in rows_at.items():
            row = rows[pos - prefix]
            read[at - start] = float(row[tokens[at]] - np.logaddexp.reduce(row))
        return prefix, rows[last - prefix], read

    def generate(self, messages: list[dict[str, str]], max_tokens: int | None = None,
                 on_token: TokenCallback | None = None, read: tuple[str, Callable] | None = None) -> Generation:
        """The reply to ``messages``, greedy (or sampled at ``temperature``), with each token's
        log-probability. ``read`` = (span, need) also reads the last ``span`` of the prompt while
        the prompt is evaluated: :attr:`Generation.prompt_read` holds its tokens (the first 64), with the
        log-probability of each one ``need(pieces)`` marks (one row of logits each; None for the
        others)."""
        self.warm_up()
        llm = self._llm
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        prompt = self.format(messages)
        tokens = self.tokenize(prompt)
        self._fit(tokens, max_tokens)
        where = self._span_in(prompt, tokens, read[0]) if read is not None else None
        prompt_read = None
        first = None
        t0 = time.perf_counter()
        try:
            if where is None:
                reused = self._prefill(tokens)
            else:
                start, cont = where
                pieces = self._span_pieces(cont, read[0])
                wanted = [bool(w) for w in read[1](pieces)]
                reused, first, lps = self._prefill_reading(tokens, start, wanted)
                prompt_read = tuple((piece, lps.get(j)) for j, piece in enumerate(pieces))
        except RuntimeError as exc:
            raise GenerationError(f"llama.cpp failed while reading the prompt ({exc})") from exc
        t1 = time.perf_counter()
        out_ids: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        vocab = llm._model.vocab
        # A character can span several tokens: decode the stream incrementally, not token by token.
        stream = codecs.getincrementaldecoder("utf-8")(errors="replace")
        first_token_ms = None
        for _ in range(max_tokens):
            # After a prefill that computed several rows, the last one is the next token's.
            logits, first = (first, None) if first is not None else (self._logits(), None)
            lse = float(np.logaddexp.reduce(logits))
            if self.temperature > 0:
                z = logits / self.temperature
                p = np.exp(z - np.logaddexp.reduce(z))
                tok = int(self._rng.choice(len(p), p=p / p.sum()))
            else:
                tok = int(np.argmax(logits))
            if first_token_ms is None:
                first_token_ms = (time.perf_counter() - t0) * 1000
            if self._llama_cpp.llama_vocab_is_eog(vocab, tok):
                finish = "stop"
                break
            logprobs.append(float(logits[tok]) - lse)
            out_ids.append(tok)
            if on_token is not None:
                piece = stream.decode(llm.detokenize([tok], prev_tokens=out_ids[:-1]))
                if piece:
                    on_token(piece)
            llm.eval([tok])
        t2 = time.perf_counter()
        # A character cut off by max_tokens is dropped, not shown as "\ufffd": the text is decoded
        # as the stream was, so what was streamed and what is returned agree.
        text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(llm.detokenize(out_ids)).strip()
        if not text and finish == "length":
            raise GenerationError("the model produced no text; try another prompt or model")
        return Generation(
            text=text, token_logprobs=tuple(logprobs), prompt_tokens=len(tokens), completion_tokens=len(out_ids),
            timings_ms={"prompt": (t1 - t0) * 1000, "generate": (t2 - t1) * 1000,
                        "first_token": first_token_ms or 0.0},
            reused_prefix_tokens=reused, finish_reason=finish, prompt_read=prompt_read,
        )

    def yes_probability(self, messages: list[dict[str, str]]) -> float | None:
        """P(yes) / (P(yes) + P(no)) for the next token after the assistant turn opens."""
        self.warm_up()
        tokens = self.tokenize(self.format(messages))
        self._fit(tokens, 1)
        self._prefill(tokens)
        logits = self._logits()
        yes, no = self._answer_tokens("yes"), self._answer_tokens("no")
        py = np.logaddexp.reduce(logits[yes])
        pn = np.logaddexp.reduce(logits[no])
        return float(1.0 / (1.0 + np.exp(pn - py)))

    def _eval_logits_at(self, tokens: list[int], wanted: list[bool]) -> dict[int, np.ndarray]:
        """Evaluate ``tokens`` after the cached ones, in batches, and return the logits after
        token i for each i whose ``wanted[i]`` is true (llama-cpp-python's ``eval`` keeps only the
        last row unless the whole context was made with ``logits_all``, which would cost a
        vocabulary projection for every prompt token)."""
        llm = self._llm
        n_vocab = llm.n_vocab()
        rows: dict[int, np.ndarray] = {}
        for i in range(0, len(tokens), self.n_batch):
            part = tokens[i:i + self.n_batch]
            n_past = llm.n_tokens
            llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
            llm._batch.set_batch(batch=part, n_past=n_past, logits_all=False)
            for j in range(len(part)):
                llm._batch.batch.logits[j] = bool(wanted[i + j])
            llm._ctx.decode(llm._batch)
            for j in range(len(part)):
                if wanted[i + j]:
                    rows[i + j] = np.ctypeslib.as_array(llm._ctx.get_logits_ith(j), shape=(n_vocab,)).astype(np.float64)
            llm.input_ids[n_past:n_past + len(part)] = part
            llm.n_tokens += len(part)
        return rows

    def _answer_tokens(self, word: str) -> list[int]:
        """The token ids that spell ``word`` whole ("yes", "Yes", " yes", ...). A spelling the
        vocabulary splits ("YES" as "Y" + "ES") is left out: its first piece is not the word."""
        spellings = (word, word.capitalize(), " " + word, " " + word.capitalize(), word.upper())
        whole = sorted({ids[0] for ids in map(self.tokenize, spellings) if len(ids) == 1})
        return whole or self.tokenize(word)[:1]
