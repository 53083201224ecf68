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
