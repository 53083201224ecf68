"""transformers backend with 4-bit NF4 quantisation (bitsandbytes), for GPU configs such as
``configs/gpu-7b.yaml``; the same loading code runs on the CPU for small models."""

from __future__ import annotations

import logging
import re
import time

from ..errors import GenerationError, GeneratorUnavailableError
from ..types import Generation
from .base import Generator, TokenCallback

log = logging.getLogger(__name__)


class TransformersGenerator(Generator):
    """``AutoModelForCausalLM`` with ``BitsAndBytesConfig(load_in_4bit, nf4, double quant)``."""

    def __init__(self, model: str, gguf_file: str | None = None, load_in_4bit: bool = True,
                 compute_dtype: str = "bfloat16", device_map: str = "auto", max_memory: dict | None = None,
                 temperature: float = 0.0, max_tokens: int = 160, seed: int = 0, n_threads: int | None = None) -> None:
        self.model_id = model
        self.gguf_file = gguf_file
        self.load_in_4bit = load_in_4bit
        self.compute_dtype = compute_dtype
        self.device_map = device_map
        self.max_memory = max_memory
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.n_threads = n_threads
        self.name = f"transformers:{model}"
        self._model = None
        self._tok = None

    def warm_up(self) -> None:
        if self._model is not None:
            return
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
        except ImportError as exc:
            raise GeneratorUnavailableError("the transformers backend needs: pip install 'self_improving_rag[transformers]'") from exc
        if self.gguf_file:
            # transformers reads a GGUF through the gguf package (not in its own requirements); without
            # it the load fails with a message that points nowhere useful.
            try:
                import gguf  # noqa: F401
            except ImportError as exc:
                raise GeneratorUnavailableError(
                    f"the transformers backend reads the GGUF file {self.gguf_file} with the gguf package, which is "
                    "not installed; install it with: pip install 'gguf>=0.10.0' (or use generator.backend=llama_cpp, "
                    "which runs GGUF files natively)") from exc
            if self.load_in_4bit:
                log.info("a GGUF file is dequantised to %s by transformers: loading in 4 bits does not apply",
                         self.compute_dtype)
        if self.n_threads:
            torch.set_num_threads(self.n_threads)  # generator.n_threads, as for llama.cpp (CPU runs)
        dtype = getattr(torch, self.compute_dtype)
        kwargs: dict = {"torch_dtype": dtype}
        if self.load_in_4bit and not self.gguf_file:
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=dtype)
        if self.device_map:
            kwargs["device_map"] = self.device_map
        if self.max_memory:
            kwargs["max_memory"] = self.max_memory
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        try:
            self._tok = AutoTokenizer.from_pretrained(self.model_id, gguf_file=self.gguf_file, trust_remote_code=False,
                                                      local_files_only=True)
            self._model = AutoModelForCausalLM.from_pretrained(self.model_id, trust_remote_code=False,
                                                               local_files_only=True, **kwargs)
        except (OSError, ValueError, ImportError, RuntimeError) as exc:
            what = f"{self.model_id}/{self.gguf_file}" if self.gguf_file else self.model_id
            why = re.sub(r"\s+", " ", str(exc)).strip()  # one line: transformers' messages span several
            raise GeneratorUnavailableError(f"cannot load {what} with transformers ({why}); check generator.model "
                                            "(a local model directory, a .gguf file or a registry name: nothing is "
                                            "downloaded)") from exc
        self._model.eval()

    def count_tokens(self, text: str) -> int:
        self.warm_up()
        return len(self._tok(text, add_special_tokens=False)["input_ids"])

    def _inputs(self, messages):
        if getattr(self._tok, "chat_template", None):
            ids = self._tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)["input_ids"]
        else:
            ids = self._tok(_plain_prompt(messages), return_tensors="pt")["input_ids"]
        return ids.to(self._model.device)

    def generate(self, messages, max_tokens=None, on_token: TokenCallback | None = None,
                 read=None) -> Generation:
        # ``read`` is not done here (prompt_read stays None, question_prior undefined): generate()
        # keeps no logits for the prompt, and a second pass over it would cost what the prompt did.
        import torch

        self.warm_up()
        torch.manual_seed(self.seed)
        ids = self._inputs(messages)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self._model.generate(ids, max_new_tokens=self.max_tokens if max_tokens is None else max_tokens,
                                       do_sample=self.temperature > 0, temperature=self.temperature or None,
                                       output_logits=True, return_dict_in_generate=True,
                                       pad_token_id=self._tok.eos_token_id)
        new = out.sequences[0, ids.shape[1]:].tolist()
        # The end token is not part of the answer (llama.cpp leaves it out too); log-probs come from
        # the raw logits, before a repetition penalty or other processing changes them.
        eos = getattr(self._model.generation_config, "eos_token_id", None)
        stops = {self._tok.eos_token_id, *(eos if isinstance(eos, (list, tuple)) else [eos])} - {None}
        finish = "length"
        if new and new[-1] in stops:
            new, finish = new[:-1], "stop"
        lps = [float(torch.log_softmax(out.logits[step][0].float(), -1)[tok]) for step, tok in enumerate(new)]
        text = self._tok.decode(new, skip_special_tokens=True).strip()
        if not text and finish == "length":
            raise GenerationError("the transformers model produced no text within max_tokens")
        if on_token is not None and text:
            on_token(text)
        return Generation(text=text, token_logprobs=tuple(lps), prompt_tokens=int(ids.shape[1]),
                          completion_tokens=len(lps), timings_ms={"generate": (time.perf_counter() - t0) * 1000},
                          finish_reason=finish)

    def _answer_tokens(self, word: str) -> list[int]:
        """The token ids that spell ``word`` whole ("yes", "Yes", " yes", ...). A spelling the
        vocabulary splits is left out (its first piece, "Y" of "Y" + "ES", is not the word);
        if every spelling is split, the first piece of the plain word stands in."""
        spellings = (word, word.capitalize(), " " + word, " " + word.capitalize(), word.upper())
        pieces = [self._tok(w, add_special_tokens=False)["input_ids"] for w in spellings]
        unk = getattr(self._tok, "unk_token_id", None)
        whole = sorted({ids[0] for ids in pieces if len(ids) == 1 and ids[0] != unk})
        return whole or pieces[0][:1]

    def yes_probability(self, messages) -> float | None:
        import torch

        self.warm_up()
        ids = self._inputs(messages)
        with torch.no_grad():
            logits = self._model(ids).logits[0, -1].float()
        yes, no = self._answer_tokens("yes"), self._answer_tokens("no")
        if not yes or not no:
            return None
        py, pn = torch.logsumexp(logits[yes], 0), torch.logsumexp(logits[no], 0)
        return float(torch.sigmoid(py - pn))


def _plain_prompt(messages) -> str:
    """The prompt for a tokenizer without a chat template: each message after its role."""
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant:"
