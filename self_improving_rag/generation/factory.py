"""Build the configured generator backend."""

from __future__ import annotations

import os

from ..config import Config
from .registry import PACKAGED_MODELS, SPLIT_MODELS, resolve_model


def transformers_source(model: str, gguf_file: str | None, cache_dir: str) -> tuple[str, str | None]:
    """The (folder, gguf_file) transformers loads for ``generator.model``: a registry name or a path
    to a .gguf file is resolved as llama.cpp resolves it (the file's folder and name); a model
    folder, or a model with ``gguf_file`` given, is passed on as given."""
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
        return LlamaCppGenerator(str(path), n_ctx=g.n_ctx, n_threads=g.n_threads, temperature=g.temperature,
                                 max_tokens=g.max_tokens, name=g.model)
    if g.backend == "scripted":
        from .scripted import ScriptedGenerator

        return ScriptedGenerator(replies=g.replies or ["I cannot answer this from the documents."])
    if g.backend == "openai":
        from .openai_http import OpenAIHTTPGenerator

        return OpenAIHTTPGenerator(base_url=g.base_url, model=g.model, timeout_s=g.timeout_s,
                                   temperature=g.temperature, max_tokens=g.max_tokens)
    if g.backend == "transformers":
        from .transformers_nf4 import TransformersGenerator

        model, gguf_file = transformers_source(g.model, None, config.paths.model_cache)
        return TransformersGenerator(model=model, gguf_file=gguf_file, temperature=g.temperature,
                                     max_tokens=g.max_tokens, n_threads=g.n_threads)
    raise ValueError(f"unknown generator backend {g.backend!r}")
