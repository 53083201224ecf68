"""CrossEncoderReranker on a tiny randomly initialised BERT (num_labels=1) with a WordPiece vocabulary,
both written to tmp_path here: loading is local-only and the scores pass one explicit sigmoid."""

from __future__ import annotations

import inspect
import os

import pytest

from self_improving_rag.retrieval.reranker import CrossEncoderReranker, sigmoid

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing may be downloaded

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")

VOCAB = ("[PAD] [UNK] [CLS] [SEP] [MASK] the lighthouse of marrow point was built in 1852 by clara venn who kept "
         "light keeper tobias lune harbour market orchard apple trees mill fish bell ? . , ##s ##ed").split()
QUESTION = "Who built the lighthouse of Marrow Point?"
TEXTS = [
    "The lighthouse of Marrow Point was built in 1852 by Clara Venn.",
    "The fish market opens at dawn.",
    "The orchard behind the mill has apple trees.",
    "Tobias Lune kept the light.",
    "The market bell hangs above the harbour.",
]
BIAS = -4.0  # shifts every logit well below 0: a correct sigmoid gives scores below 0.5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_cross_encoder")
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    # A wide initialisation so that different pairs get clearly different logits.
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, num_labels=1, initializer_range=0.5,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.bias.fill_(BIAS)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def raw_logits(model_dir) -> list[float]:
    """The model's own logits for (QUESTION, text), computed with transformers directly."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, local_files_only=True).eval()
    enc = tok([QUESTION] * len(TEXTS), TEXTS, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits[:, 0].tolist()


@pytest.fixture(scope="module")
def reranker(model_dir) -> CrossEncoderReranker:
    r = CrossEncoderReranker(model_dir, batch_size=2)
    r.warm_up()
    return r


def test_installed_cross_encoder_accepts_the_arguments_used() -> None:
    init = inspect.signature(st.CrossEncoder.__init__).parameters
    assert "local_files_only" in init and "trust_remote_code" in init and "device" in init
    predict = inspect.signature(st.CrossEncoder.predict).parameters
    for name in ("activation_fn", "batch_size", "convert_to_numpy"):
        assert name in predict, f"sentence-transformers {st.__version__}: predict() has no {name}"


def test_loads_locally_and_warm_up_is_idempotent(reranker) -> None:
    model = reranker._model
    assert model is not None and str(model.device) == "cpu"
    reranker.warm_up()
    assert reranker._model is model


def test_rerank_covers_all_texts_sorted_with_scores_in_unit_interval(reranker) -> None:
    ranked = reranker.rerank(QUESTION, TEXTS)
    assert sorted(i for i, _ in ranked) == list(range(len(TEXTS)))
    scores = [s for _, s in ranked]
    assert all(0.0 < s < 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert reranker.rerank(QUESTION, []) == []


def test_rerank_order_follows_the_model_logits(reranker, raw_logits) -> None:
    ranked = reranker.rerank(QUESTION, TEXTS)
    assert len(set(round(x, 4) for x in raw_logits)) == len(TEXTS)  # the fixture gives distinct logits
    assert [i for i, _ in ranked] == sorted(range(len(TEXTS)), key=lambda i: -raw_logits[i])


def test_batching_does_not_change_scores(model_dir, reranker) -> None:
    one_by_one = CrossEncoderReranker(model_dir, batch_size=1).rerank(QUESTION, TEXTS)
    assert dict(one_by_one) == pytest.approx(dict(reranker.rerank(QUESTION, TEXTS)), abs=1e-5)


def test_scores_are_one_sigmoid_of_the_logits(reranker, raw_logits) -> None:
    scores = dict(reranker.rerank(QUESTION, TEXTS))
    assert all(x < -1 for x in raw_logits)  # the classifier bias pushes every logit low
    for i, logit in enumerate(raw_logits):
        assert scores[i] == pytest.approx(sigmoid(logit), abs=1e-5)
    assert all(s < 0.5 for s in scores.values())



def test_searcher_uses_the_configured_cross_encoder_for_relevance(model_dir, reranker, tmp_path, corpus_dir,
                                                                   hash_embedder) -> None:
    from self_improving_rag.config import load_config
    from self_improving_rag.ingestion.pipeline import ingest
    from self_improving_rag.retrieval.searcher import Searcher
    from self_improving_rag.types import Strategy

    from tests.conftest import fake_overrides

    config = load_config(None, [*fake_overrides(tmp_path), f"retrieval.cross_encoder_dir={model_dir}"])
    ingest([corpus_dir], config, hash_embedder, progress=False)
    searcher = Searcher(config, hash_embedder)
    res = searcher.search(QUESTION, Strategy(rerank=True, top_k=4))
    assert searcher.cross_encoder is not None and res.hits
    for h in res.hits:
        # The relevance the searcher reports is the cross-encoder's, not the embedding judge's.
        assert h.scores["relevance"] == pytest.approx(reranker.relevance(QUESTION, None, [h.chunk.text])[0], abs=1e-5)
        assert h.scores["relevance"] < 0.5  # this model's biased logits; the embedding judge differs
    plain = Searcher(load_config(None, fake_overrides(tmp_path)), hash_embedder).search(QUESTION, Strategy(rerank=True, top_k=4))
    assert [h.scores["relevance"] for h in plain.hits] != [h.scores["relevance"] for h in res.hits]
    # A rewritten query is what the cross-encoder reads, as the embedding judge does.
    rewritten = searcher.search(QUESTION, Strategy(rerank=True, top_k=4), query="lighthouse builder Clara Venn")
    for h in rewritten.hits:
        expected = reranker.relevance("lighthouse builder Clara Venn", None, [h.chunk.text])[0]
        assert h.scores["relevance"] == pytest.approx(expected, abs=1e-5)
    # Without reranking the relevance is still the cross-encoder's: one scale for grounding.
    unranked = searcher.search(QUESTION, Strategy(rerank=False, top_k=4))
    for h in unranked.hits:
        assert h.scores["relevance"] == pytest.approx(reranker.relevance(QUESTION, None, [h.chunk.text])[0], abs=1e-5)


def test_a_cross_encoder_dir_without_a_model_is_a_clear_error(tmp_path, hash_embedder, built_index) -> None:
    from self_improving_rag.config import load_config
    from self_improving_rag.errors import InputError
    from self_improving_rag.retrieval.searcher import Searcher

    from tests.conftest import fake_overrides

    config = load_config(None, [*fake_overrides(tmp_path), f"retrieval.cross_encoder_dir={tmp_path / 'nothing'}"])
    searcher = Searcher(config, hash_embedder)
    for _ in range(2):  # every search fails the same way, not only the first
        with pytest.raises(InputError, match="cross_encoder_dir"):
            searcher.warm_up()
