"""transformers backend with bitsandbytes NF4: a tiny randomly initialised Llama and a word-level
tokenizer, both built here and saved to tmp_path, loaded in 4 bits on the CPU (nothing is downloaded).

bitsandbytes 4-bit loading in transformers needs ``accelerate`` (``.[transformers]`` installs it);
without it the loading tests are skipped and one test checks that the error names it.
"""

from __future__ import annotations

import importlib.util
import math
import os

import pytest

from self_improving_rag.errors import GenerationError
from self_improving_rag.generation.transformers_nf4 import TransformersGenerator

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing may be downloaded

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
bnb = pytest.importorskip("bitsandbytes")

HAVE_ACCELERATE = importlib.util.find_spec("accelerate") is not None
needs_accelerate = pytest.mark.skipif(
    not HAVE_ACCELERATE, reason="bitsandbytes 4-bit loading needs accelerate: pip install -e '.[transformers]'")

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
SENTENCES = [
    "yes no Yes No",
    "the lighthouse of Marrow Point was built in 1852 by Clara Venn",
    "who kept the light ? Tobias Lune kept the light for forty years .",
    "answer briefly from the passages",
]
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
MESSAGES = [{"role": "system", "content": "answer briefly"}, {"role": "user", "content": "who kept the light ?"}]
N_LAYERS = 2
LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down


def _tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", additional_special_tokens=SPECIALS[4:])
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    """The same tiny causal LM saved twice: with a chat template and without one."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    tok = _tokenizer(CHAT_TEMPLATE)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=N_LAYERS,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(config)
    dirs = {}
    for name, template in (("chat", CHAT_TEMPLATE), ("plain", None)):
        path = root / name
        model.save_pretrained(path)
        _tokenizer(template).save_pretrained(path)
        dirs[name] = str(path)
    return dirs


def _load(path: str, **kw) -> TransformersGenerator:
    gen = TransformersGenerator(model=path, load_in_4bit=True, compute_dtype="float32", device_map="cpu",
                                max_tokens=kw.pop("max_tokens", 8), **kw)
    gen.warm_up()
    return gen


@pytest.fixture(scope="module")
def chat_gen(model_dirs) -> TransformersGenerator:
    if not HAVE_ACCELERATE:
        pytest.skip("bitsandbytes 4-bit loading needs accelerate: pip install -e '.[transformers]'")
    return _load(model_dirs["chat"])


@pytest.fixture(scope="module")
def plain_gen(model_dirs) -> TransformersGenerator:
    if not HAVE_ACCELERATE:
        pytest.skip("bitsandbytes 4-bit loading needs accelerate: pip install -e '.[transformers]'")
    return _load(model_dirs["plain"])


# ---------------------------------------------------------------- loading


@needs_accelerate
def test_loads_every_decoder_linear_as_nf4_double_quant(chat_gen) -> None:
    model = chat_gen._model
    quantised = {name: m for name, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    assert len(quantised) == N_LAYERS * LINEARS_PER_LAYER
    assert all(".layers." in name for name in quantised)
    for name, layer in quantised.items():
        assert isinstance(layer.weight, bnb.nn.Params4bit), name
        assert layer.weight.quant_state is not None, name
        assert layer.weight.quant_state.quant_type == "nf4", name
        assert layer.weight.quant_state.nested, name  # bnb_4bit_use_double_quant=True
        assert layer.weight.dtype == torch.uint8, name  # packed 4-bit storage
        assert layer.compute_dtype == torch.float32, name
    assert model.is_loaded_in_4bit
    assert model.device.type == "cpu"
    config = model.config.quantization_config
    assert config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant


@needs_accelerate
def test_warm_up_is_idempotent(chat_gen) -> None:
    model = chat_gen._model
    chat_gen.warm_up()
    assert chat_gen._model is model


@needs_accelerate
def test_device_map_none_loads_too(model_dirs) -> None:
    gen = TransformersGenerator(model=model_dirs["plain"], compute_dtype="float32", device_map=None)
    gen.warm_up()
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in gen._model.modules())


@pytest.mark.skipif(HAVE_ACCELERATE, reason="only meaningful where accelerate is missing")
def test_missing_accelerate_is_a_generation_error_naming_it(model_dirs) -> None:
    gen = TransformersGenerator(model=model_dirs["plain"], compute_dtype="float32", device_map="cpu")
    with pytest.raises(GenerationError, match="accelerate"):
        gen.warm_up()


def test_missing_model_dir_is_a_generation_error(tmp_path) -> None:
    gen = TransformersGenerator(model=str(tmp_path / "no-such-model"), compute_dtype="float32", device_map="cpu")
    with pytest.raises(GenerationError, match="nothing is downloaded"):
        gen.warm_up()


def test_a_gguf_without_the_gguf_package_names_the_pip_line(tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "gguf", None)  # as where it is not installed: import fails
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    gen = TransformersGenerator(model=str(tmp_path), gguf_file="m.gguf", compute_dtype="float32", device_map="cpu")
    with pytest.raises(GenerationError) as info:
        gen.warm_up()
    assert "pip install 'gguf>=0.10.0'" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_load_error_is_one_line(tmp_path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection.")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    gen = TransformersGenerator(model=str(tmp_path), compute_dtype="float32", device_map="cpu")
    with pytest.raises(GenerationError) as info:
        gen.warm_up()
    assert "\n" not in str(info.value) and "Check your connection" in str(info.value)


def test_registry_names_and_gguf_paths_load_through_the_registry(tmp_path, monkeypatch) -> None:
    """generator.backend=transformers with the model names and .gguf paths the default backend
    takes: the folder and file name of the resolved file, not the name as a Hub repo id."""
    from self_improving_rag.config import load_config
    from self_improving_rag.generation import factory

    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    resolved = []

    def resolve(name, cache):
        resolved.append((name, str(cache)))
        return gguf

    monkeypatch.setattr(factory, "resolve_model", resolve)
    cache = str(tmp_path / "cache")
    for name in ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m", str(gguf)):
        gen = factory.make_generator(load_config(None, ["generator.backend=transformers", f"generator.model={name}",
                                                        f"paths.model_cache={cache}"]))
        assert (gen.model_id, gen.gguf_file) == (str(gguf.parent), "tiny.gguf")
    assert [n for n, _ in resolved] == ["smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m", str(gguf)]
    # A model folder is passed on as it is.
    gen = factory.make_generator(load_config(None, ["generator.backend=transformers", f"generator.model={tmp_path}"]))
    assert (gen.model_id, gen.gguf_file) == (str(tmp_path), None)
    assert len(resolved) == 3


# ---------------------------------------------------------------- tokens


@needs_accelerate
def test_count_tokens(plain_gen) -> None:
    assert plain_gen.count_tokens("the lighthouse was built in 1852") == 6
    assert plain_gen.count_tokens("") == 0


@needs_accelerate
def test_generate_plain_prompt_returns_real_tokens(plain_gen) -> None:
    seen: list[str] = []
    out = plain_gen.generate(MESSAGES, on_token=seen.append)
    assert out.text and seen == [out.text]
    assert 0 < out.completion_tokens <= 8
    assert len(out.token_logprobs) == out.completion_tokens
    assert all(lp <= 0 for lp in out.token_logprobs)
    prompt = "\n\n".join(f"{m['role']}: {m['content']}" for m in MESSAGES) + "\n\nassistant:"
    assert out.prompt_tokens == len(plain_gen._tok(prompt)["input_ids"])
    assert out.timings_ms["generate"] > 0
    again = plain_gen.generate(MESSAGES)  # greedy: the same tokens again
    assert again.text == out.text and again.token_logprobs == pytest.approx(out.token_logprobs)


@needs_accelerate
def test_generate_logprobs_match_a_forward_pass(plain_gen) -> None:
    """Each step's log-prob is the model's log-softmax at that position for the token it chose."""
    out = plain_gen.generate(MESSAGES, max_tokens=4)
    prompt = "\n\n".join(f"{m['role']}: {m['content']}" for m in MESSAGES) + "\n\nassistant:"
    ids = plain_gen._tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        greedy = plain_gen._model.generate(ids, max_new_tokens=4, do_sample=False,
                                           pad_token_id=plain_gen._tok.eos_token_id)
        logits = plain_gen._model(greedy).logits[0].float()
    new = greedy[0, ids.shape[1]:].tolist()
    expected = [float(torch.log_softmax(logits[ids.shape[1] - 1 + i], -1)[t]) for i, t in enumerate(new)]
    assert len(out.token_logprobs) == len(expected)
    assert out.token_logprobs == pytest.approx(expected, abs=1e-3)


@needs_accelerate
@needs_accelerate
def test_max_tokens_override(plain_gen) -> None:
    out = plain_gen.generate(MESSAGES, max_tokens=2)
    assert 0 < out.completion_tokens <= 2


@needs_accelerate
def test_yes_probability_plain_prompt(plain_gen) -> None:
    p = plain_gen.yes_probability(MESSAGES)
    assert p is not None and 0.0 <= p <= 1.0
    prompt = "\n\n".join(f"{m['role']}: {m['content']}" for m in MESSAGES) + "\n\nassistant:"
    tok = plain_gen._tok
    with torch.no_grad():
        logits = plain_gen._model(tok(prompt, return_tensors="pt")["input_ids"]).logits[0, -1].float()
    yes = sorted({tok.convert_tokens_to_ids(w) for w in ("yes", "Yes")})
    no = sorted({tok.convert_tokens_to_ids(w) for w in ("no", "No")})
    margin = float(torch.logsumexp(logits[yes], 0) - torch.logsumexp(logits[no], 0))
    assert p == pytest.approx(1 / (1 + math.exp(-margin)), abs=1e-6)


BUG_CHAT = ("BUG: transformers_nf4.py:68 apply_chat_template(..., return_tensors='pt') returns a BatchEncoding "
            "in transformers >= 5 (return_dict defaults to True), not a tensor; generate() then fails with "
            "AttributeError. Fix: pass return_dict=True and take ['input_ids']")


@needs_accelerate
def test_generate_with_chat_template_returns_real_tokens(chat_gen) -> None:
    out = chat_gen.generate(MESSAGES)
    assert out.text and 0 < out.completion_tokens <= 8
    assert len(out.token_logprobs) == out.completion_tokens and all(lp <= 0 for lp in out.token_logprobs)
    ids = chat_gen._tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert out.prompt_tokens == len(ids)


@needs_accelerate
def test_answer_tokens_are_whole_spellings_only(plain_gen) -> None:
    tok = plain_gen._tok
    # "YES" is unknown to this vocabulary: its <unk> id must not count as a yes.
    assert plain_gen._answer_tokens("yes") == sorted({tok.convert_tokens_to_ids(w) for w in ("yes", "Yes")})
    assert tok.unk_token_id not in plain_gen._answer_tokens("no")


def test_yes_probability_with_chat_template(chat_gen) -> None:
    p = chat_gen.yes_probability(MESSAGES)
    assert p is not None and 0.0 <= p <= 1.0
