"""The llama.cpp judge's yes/no token sets, without loading a model."""

from __future__ import annotations


def test_yes_no_tokens_leave_out_spellings_the_vocabulary_splits() -> None:
    from self_improving_rag.generation.llamacpp import LlamaCppGenerator

    vocab = {"yes": [11], "Yes": [12], " yes": [13], " Yes": [14], "YES": [7, 8],  # "Y" + "ES"
             "no": [21], "No": [22], " no": [23], " No": [24], "NO": [25]}

    class Tokenizer:
        tokenize = staticmethod(lambda text: vocab[text])

    assert LlamaCppGenerator._answer_tokens(Tokenizer(), "yes") == [11, 12, 13, 14]
    assert LlamaCppGenerator._answer_tokens(Tokenizer(), "no") == [21, 22, 23, 24, 25]
