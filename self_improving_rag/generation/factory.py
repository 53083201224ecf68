"""Build the configured generator backend."""

from __future__ import annotations

import os

from ..config import Config
from .registry import PACKAGED_MODELS, SPLIT_MODELS, resolve_model


def transformers_source(model: str, gguf_file: str | None, cache_dir: str) -> tuple[str, str | None]:
    """The (folder, gguf_file) transformers loads for ``generator.model``: a registry name or a path
    to a .gguf file is resolved as llama.cpp resolves it (the file's folder and name); a model
    folder, or a model with ``generator.gguf_file`` set, is passed on as given."""
    if gguf_file is None and (model in SPLIT_MODELS or model in PACKAGED_MODELS or model.endswith(".gguf")):
        path = resolve_model(model, cache_dir)
        return str(path.parent), path.name
    return (os.path.expanduser(model) if model.startswith("~") else model), gguf_file


def make_generator(config: Config):
    """The generator named by ``generator.backend`` (model files resolved through the registry)."""
    g = config.generator
    if g.backend == "llama_cpp":
        from .llamacpp import LlamaCppGenerator

        path = resolve_model(g.model, config.paths.model_cache)
        return LlamaCppGenerator(str(path), n_ctx=g.n_ctx, n_threads=g.n_threads, n_batch=g.n_batch, seed=g.seed,
                                 temperature=g.temperature, max_tokens=g.max_tokens, name=g.model)
    if g.backend == "scripted":
        from .scripted import ScriptedGenerator

        return ScriptedGenerator(replies=g.replies or ["I cannot answer this from the documents."])
    if g.backend == "openai":
        from .openai_http import OpenAIHTTPGenerator

        return OpenAIHTTPGenerator(base_url=g.base_url, model=g.model, api_key_env=g.api_key_env,
                                   timeout_s=g.timeout_s, retries=g.retries, temperature=g.temperature,
                                   max_tokens=g.max_tokens, seed=g.seed)
    if g.backend == "transformers":
        from .transformers_nf4 import TransformersGenerator

        model, gguf_file = transformers_source(g.model, g.gguf_file, config.paths.model_cache)
        return TransformersGenerator(model=model, gguf_file=gguf_file, load_in_4bit=g.load_in_4bit,
                                     compute_dtype=g.compute_dtype, device_map=g.device_map,
                                     max_memory=g.max_memory, temperature=g.temperature,
                                     max_tokens=g.max_tokens, seed=g.seed, n_threads=g.n_threads)
    raise ValueError(f"unknown generator backend {g.backend!r}")
