"""The llama.cpp backend without a model: its judge's yes/no token sets, and Ctrl-C while it loads."""

from __future__ import annotations

import pytest


def test_yes_no_tokens_leave_out_spellings_the_vocabulary_splits() -> None:
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator

    vocab = {"yes": [11], "Yes": [12], " yes": [13], " Yes": [14], "YES": [7, 8],  # "Y" + "ES"
             "no": [21], "No": [22], " no": [23], " No": [24], "NO": [25]}

    class Tokenizer:
        tokenize = staticmethod(lambda text: vocab[text])

    assert LlamaCppGenerator._answer_tokens(Tokenizer(), "yes") == [11, 12, 13, 14]
    assert LlamaCppGenerator._answer_tokens(Tokenizer(), "no") == [21, 22, 23, 24, 25]


def test_a_span_is_found_in_the_prompts_tokens_also_when_its_last_token_runs_on() -> None:
    """The question read while the prompt is evaluated needs the question's tokens as the whole
    prompt has them. A vocabulary that joins "?" and the newline after it ("?\n") gives the
    whole prompt another last token than the question alone: that token is read as the
    question's last. A token across the span's start cannot be read as the span's."""
    import re

    from self_improving_rag.generation.llamacpp import LlamaCppGenerator

    class Tokenizer:  # a word, "?\n" or any other character is a token
        @staticmethod
        def tokenize(text: str) -> list[str]:
            return re.findall(r" ?\w+|\?\n|\s|[^\w\s]", text)

    span = " Who built it?"
    prompt = "Passages: [1] The keeper built it.\n\nQuestion:" + span + "\nAnswer:"
    tokens = Tokenizer.tokenize(prompt)
    start, cont = LlamaCppGenerator._span_in(Tokenizer(), prompt, tokens, span)
    assert cont == [" Who", " built", " it", "?\n"] and tokens[start:start + 4] == cont
    assert LlamaCppGenerator._span_in(Tokenizer(), prompt, tokens, span, max_tokens=2)[1] == [" Who", " built"]
    plain = prompt.replace("?\n", "? ")  # no run-on: the span's own tokens
    assert LlamaCppGenerator._span_in(Tokenizer(), plain, Tokenizer.tokenize(plain), span)[1] == [" Who", " built", " it", "?"]
    assert LlamaCppGenerator._span_in(Tokenizer(), prompt, tokens, " not there") is None
    assert LlamaCppGenerator._span_in(Tokenizer(), prompt, tokens, "uestion:") is None  # starts inside a token
    assert LlamaCppGenerator._span_in(Tokenizer(), span, Tokenizer.tokenize(span), span) is None  # nothing before it


def test_the_read_takes_each_tokens_log_prob_from_the_row_before_it() -> None:
    """_prefill_reading asks for a row of logits before each wanted token of the span and for the
    prompt's last (the first generated token's); the cached prefix is kept up to the first row
    needed. Each row here puts all its mass on one token, named by the row's position, so a row
    read one position off would give a log-prob near -50 instead of 0."""
    import types

    import numpy as np

    from self_improving_rag.generation.llamacpp import LlamaCppGenerator

    vocab = 20
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # the span is tokens 4..6 (indices 3, 4, 5)
    asked: list[tuple[list[int], list[bool]]] = []

    def eval_logits_at(toks, wanted):
        asked.append((list(toks), list(wanted)))
        offset = len(tokens) - len(toks)
        rows = {}
        for i, w in enumerate(wanted):
            if w:
                row = np.full(vocab, -50.0)
                nxt = tokens[offset + i + 1] if offset + i + 1 < len(tokens) else 0
                row[nxt] = 0.0  # the row after position p predicts the token at p + 1
                rows[i] = row
        return rows

    gen = LlamaCppGenerator("unused.gguf")
    gen._llm = types.SimpleNamespace(input_ids=np.array([1, 2, 3, 4, 5, 6, 0, 0]), n_tokens=6)
    gen._eval_logits_at = eval_logits_at
    reused, first, read = gen._prefill_reading(tokens, 3, [True, False, True])
    # Rows before span tokens 0 and 2 (positions 2 and 4) and after the last token (position 8).
    assert reused == 2 and asked == [(tokens[2:], [True, False, True, False, False, False, True])]
    assert set(read) == {0, 2} and all(abs(v) < 1e-9 for v in read.values())
    assert first[0] == 0.0 and gen.last_reused_tokens == 2
    asked.clear()
    gen._llm.input_ids, gen._llm.n_tokens = np.array(tokens), 9  # all cached, nothing wanted: the last token runs
    reused, first, read = gen._prefill_reading(tokens, 3, [False, False, False])
    assert reused == 8 and asked == [([9], [True])] and read == {}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the unheld, dropped interrupt
def test_ctrl_c_while_llama_cpp_calls_back_is_raised_once_the_call_returns() -> None:
    """llama.cpp logs through a ctypes callback while it loads; a KeyboardInterrupt raised inside
    one is dropped by ctypes. Held during the load, it is raised when the load returns, and the
    Ctrl-C handler in place before is restored."""
    import ctypes
    import signal

    from self_improving_rag.generation.llamacpp import _interrupt_held

    callback = ctypes.CFUNCTYPE(None)(lambda: signal.raise_signal(signal.SIGINT))
    before = signal.getsignal(signal.SIGINT)
    callback()  # unheld, the interrupt is lost inside the callback: the reason for the hold
    with pytest.raises(KeyboardInterrupt):
        with _interrupt_held():
            callback()
            reached = True  # the load itself is not cut off half-way
    assert reached
    assert signal.getsignal(signal.SIGINT) is before
    with _interrupt_held():  # no Ctrl-C: nothing raised
        pass
