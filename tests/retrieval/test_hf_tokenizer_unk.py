"""A word too long for WordPiece must not hide its length from the token budgets."""

from __future__ import annotations

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from self_improving_rag.ingestion.chunkers.base import Unit, split_long  # noqa: E402
from self_improving_rag.retrieval.embedder import UNK_CHARS_PER_PIECE, HFTokenizer  # noqa: E402


def _bert_like():
    """A WordPiece tokenizer built in memory the way MiniLM's is (100-character word limit)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "gene": 2, "reads": 3, ".": 4, "a": 5, "##c": 6, "##g": 7, "##t": 8}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_short_words_count_as_their_word_pieces():
    tok = HFTokenizer(_bert_like())
    assert tok.count("The gene reads acgt.") == 8  # the gene reads a ##c ##g ##t .
    assert len(tok.spans("The gene reads acgt.")) == 8


def test_a_word_over_the_wordpiece_limit_counts_by_its_length():
    tok = HFTokenizer(_bert_like())
    dna = "acgt" * 60  # 240 characters, no space: one [UNK] to WordPiece
    text = f"The gene reads {dna}."
    assert len(_bert_like()(text, add_special_tokens=False)["input_ids"]) == 5  # what was counted before
    expected = 3 + -(-len(dna) // UNK_CHARS_PER_PIECE) + 1
    assert tok.count(text) == expected
    spans = tok.spans(text)
    assert len(spans) == expected
    # The pieces cover the long word exactly, in order, with no gap.
    start = text.index(dna)
    inner = [s for s in spans if start <= s[0] < start + len(dna)]
    assert inner[0][0] == start and inner[-1][1] == start + len(dna)
    assert all(a[1] == b[0] for a, b in zip(inner, inner[1:]))


def test_a_short_unknown_word_is_still_one_piece():
    tok = HFTokenizer(_bert_like())
    assert tok.count("the xyz") == 2  # "xyz" is [UNK], 3 characters


def test_split_long_cuts_the_long_word_to_the_budget():
    tok = HFTokenizer(_bert_like())
    text = "the " + "acgt" * 100  # 400 characters of one word
    unit = Unit(0, len(text), tok.count(text))
    pieces = split_long(text, unit, 50, tok)
    assert len(pieces) > 1
    assert all(p.n_tokens <= 50 for p in pieces)
    assert all(tok.count(text[p.start:p.end]) <= 50 for p in pieces)
    assert "".join(text[p.start:p.end] for p in pieces).replace(" ", "") == text.replace(" ", "")
