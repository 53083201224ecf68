"""llama.cpp backend (default): a GGUF model on the CPU through llama-cpp-python.

Decoding is done here token by token so that each answer token's log-probability is read
from the logits without ``logits_all`` (which would compute the vocabulary projection for
every prompt token). A new prompt that shares a token prefix with the previous one reuses
the KV cache for that prefix: the passages come first in every prompt of a question, so the
verification and retry calls only pay for what changed.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import zlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..errors import GenerationError, GeneratorUnavailableError
from ..types import Generation
from .base import TokenCallback

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


class LlamaCppGenerator:
    """Chat generation with a GGUF file; the chat template comes from the file's metadata."""

    reads_prompt = True  # generate(read=...) fills Generation.prompt_read (question_prior)

    def __init__(self, model_path: str, n_ctx: int = 4096, n_threads: int = 2, n_batch: int = 512, seed: int = 0,
                 temperature: float = 0.0, max_tokens: int = 160, name: str | None = None,
                 parallel: int = 1) -> None:
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be >= 256, got {n_ctx}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {parallel}")
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        # Sequences the context holds at once: 1 + the replies :meth:`sample_replies` may draw.
        self.parallel = parallel
        self.name = name or model_path
        self._llm = None
        self._formatter = None
        self._rng = np.random.default_rng(seed)
        self.load_ms = 0.0
        # Prompt tokens whose KV cache the last call reused (generate, yes_probability or span_logprobs).
        self.last_reused_tokens = 0
        # The last generate() call's prompt tokens, the logits its first reply token was drawn
        # from, and its reply's length in tokens: what sample_replies() draws from.
        self._last_prompt: tuple[list[int], np.ndarray, int] | None = None

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
                if self.parallel > 1:
                    self._hold_sequences(llm)
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

    def _hold_sequences(self, llm) -> None:
        """Give ``llm`` a context whose KV cache holds :attr:`parallel` sequences in one buffer
        (llama-cpp-python makes a one-sequence context and has no setting for more). Sequence 0
        is the one every call uses, with the whole cache, as before; the others hold sampled
        replies while they are drawn."""
        from llama_cpp import _internals as internals

        params = llm.context_params
        params.n_seq_max = self.parallel
        params.kv_unified = True  # every sequence may use the whole cache, not n_ctx / parallel
        llm._ctx.close()  # first: two caches at once would need twice the memory
        llm._ctx = llm._stack.enter_context(contextlib.closing(
            internals.LlamaContext(model=llm._model, params=params, verbose=False)))

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
        others), as :meth:`span_logprobs` would give them at the cost of those rows alone."""
        self.warm_up()
        llm = self._llm
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        self._last_prompt = None
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
        first_row = None
        for _ in range(max_tokens):
            # After a prefill that computed several rows, the last one is the next token's.
            logits, first = (first, None) if first is not None else (self._logits(), None)
            if first_row is None:
                first_row = logits
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
        self._last_prompt = (tokens, first_row, len(out_ids)) if first_row is not None else None
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

    def can_sample(self, k: int) -> bool:
        """Whether :meth:`sample_replies` can draw ``k`` replies (the context holds k + 1 sequences)."""
        return 1 <= k < self.parallel

    def sample_replies(self, k: int, max_tokens: int, temperature: float = 0.7, top: int = 64) -> list[str] | None:
        """``k`` more replies to the last :meth:`generate` call's prompt, drawn at ``temperature``
        from the ``top`` likeliest tokens at each step, each at most ``max_tokens`` tokens and
        cut at a newline; None when there is no such prompt or the context holds one sequence.

        The replies are decoded together, one sequence each in the KV cache (``parallel`` > 1),
        every sequence a copy of the prompt's cells: the prompt is not read again, and a step
        for ``k`` sequences costs about twice a step for one (for k = 6, 71-82 ms against
        36-37 ms for the default model here; docs/results.md, session 28). The draws are seeded
        by ``seed`` and the prompt, so the same prompt gets the same replies in any order. Sequence
        0 is left as it was (the prompt and the greedy reply, or the prompt alone when another call
        had overwritten it and it was read again); the others are emptied. GenerationError when
        the cache has no room for the replies; ValueError for a temperature of 0."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 to sample, got {temperature}")
        self.warm_up()
        k = min(k, self.parallel - 1)
        if k < 1 or max_tokens < 1 or self._last_prompt is None:
            return None
        tokens, first_row, reply = self._last_prompt
        llm, ctx = self._llm, self._llm._ctx
        n = len(tokens)
        if n + reply + k * max_tokens > self.n_ctx:
            raise GenerationError(f"no room to sample: a prompt of {n} tokens, a reply of {reply} and {k} replies of up "
                                  f"to {max_tokens} exceed n_ctx={self.n_ctx}; raise generator.n_ctx")
        rng = np.random.default_rng([self.seed, zlib.crc32(np.asarray(tokens, dtype=np.int32).tobytes())])
        vocab = llm._model.vocab
        n_vocab = len(first_row)
        top = min(top, n_vocab)
        outs: list[list[int]] = [[] for _ in range(k)]
        live = list(range(k))
        try:
            if self._cached_prefix(tokens) < n:
                # Another call has overwritten the prompt's cells since: read it again.
                self._prefill(tokens)
                first_row = self._logits()
            rows = [first_row] * k  # each reply's next-token logits
            for s in range(1, k + 1):
                ctx.kv_cache_seq_rm(s, -1, -1)  # nothing left from a draw cut short
                ctx.kv_cache_seq_cp(0, s, 0, n)
            for step in range(max_tokens):
                going = []
                for i in live:
                    cand = np.argpartition(-rows[i], top - 1)[:top]
                    z = rows[i][cand] / temperature
                    p = np.exp(z - np.logaddexp.reduce(z))
                    tok = int(cand[rng.choice(top, p=p / p.sum())])
                    if self._llama_cpp.llama_vocab_is_eog(vocab, tok) or b"\n" in llm.detokenize([tok]):
                        continue
                    outs[i].append(tok)
                    going.append(i)
                live = going
                if not live or step == max_tokens - 1:
                    break
                batch = llm._batch
                batch.reset()
                batch.batch.n_tokens = len(live)
                for j, i in enumerate(live):
                    batch.batch.token[j] = outs[i][-1]
                    batch.batch.pos[j] = n + step
                    batch.batch.seq_id[j][0] = i + 1
                    batch.batch.n_seq_id[j] = 1
                    batch.batch.logits[j] = True
                ctx.decode(batch)
                for j, i in enumerate(live):
                    rows[i] = np.ctypeslib.as_array(ctx.get_logits_ith(j), shape=(n_vocab,)).astype(np.float64)
        except RuntimeError as exc:
            raise GenerationError(f"llama.cpp failed while sampling replies ({exc})") from exc
        finally:
            for s in range(1, k + 1):
                ctx.kv_cache_seq_rm(s, -1, -1)
        return [codecs.getincrementaldecoder("utf-8")(errors="replace").decode(llm.detokenize(ids)).strip()
                for ids in outs]

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

    def span_logprobs(self, messages: list[dict[str, str]], span: str, need=None,
                      max_tokens: int = 64) -> list[tuple[str, float | None]] | None:
        """Each token of the last ``span`` in the prompt made from ``messages`` (at most
        ``max_tokens`` of them), with its log-probability given everything before it:
        (piece, log p). ``need(pieces)``, if given, says which tokens need their log p (a list of
        bools): the others get None, and their vocabulary-sized row of logits is not computed
        (about 30 ms each for the default model here, more than reading the token).

        The prompt's cached prefix is reused and the span is run as one batch, so the cost is
        that of reading the span once plus one row of logits per token needed; when no token is
        needed, nothing is run. The cache is left holding the prompt up to the span's last token
        (which is scored, not run). The span is tokenized as the prompt up to its end is."""
        self.warm_up()
        prompt = self.format(messages)
        at = prompt.rfind(span)
        if not span or at < 0:
            raise GenerationError("the text to score is not in the prompt")
        before = self.tokenize(prompt[:at])
        # The span's tokens as they stand after ``before`` (a SentencePiece vocabulary would
        # give a span tokenized alone a leading-space token of its own).
        upto = self.tokenize(prompt[:at + len(span)])
        cont = upto[len(before):] if upto[:len(before)] == before else self.tokenize(span)
        cont = cont[:max_tokens]
        if not before or not cont:
            return []
        self._fit(before + cont, 0)
        pieces = self._span_pieces(cont, span)
        wanted = [True] * len(cont) if need is None else [bool(w) for w in need(pieces)]
        if not any(wanted):
            return [(piece, None) for piece in pieces]  # nothing to read: the span is not run
        self._prefill(before)
        rows: dict[int, np.ndarray] = {0: self._logits()} if wanted[0] else {}  # the span's first token
        if len(cont) > 1:
            # The row after token j predicts token j + 1.
            after = self._eval_logits_at(cont[:-1], wanted[1:])
            rows.update({j + 1: row for j, row in after.items()})
        return [(piece, float(rows[i][tok] - np.logaddexp.reduce(rows[i])) if i in rows else None)
                for i, (tok, piece) in enumerate(zip(cont, pieces))]

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
