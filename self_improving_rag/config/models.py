"""The configuration's pydantic models: one per section of the settings, and ``Config`` over
them. Every model refuses a key it does not know, and a yes/no value for a number."""

from __future__ import annotations

import os
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..types import Strategy


def no_yes_no_for_numbers(model: type[BaseModel], value: Any, field_name: str) -> Any:
    """Refuse a boolean for a number field. YAML reads true/false/yes/no as booleans, and pydantic
    would take them as 1 and 0: `--set strategy.top_k=true` must be an error, not top_k 1."""
    if isinstance(value, bool):
        ann = model.model_fields[field_name].annotation
        kinds = set(get_args(ann)) or {ann}
        if bool not in kinds and kinds & {int, float}:
            raise ValueError("expected a number, not a yes/no value")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yes_no_for_numbers(cls, value: Any, info) -> Any:
        return no_yes_no_for_numbers(cls, value, info.field_name)


class PathsConfig(_Model):
    """Where sirag keeps its files. A leading "~" is the home folder."""

    index_dir: str = Field("index/default", min_length=1,
                           description="The index folder (`--index` sets it for one command).")
    memory_db: str = Field("memory/memory.db", min_length=1,
                           description="The memory store: every answer, its attempts, labels and calibration fits "
                                       "(`--memory` sets it for one command).")
    log_dir: str = Field("logs", min_length=1, description="Where each day's JSON-lines log is written.")
    model_cache: str = Field("~/.cache/self_improving_rag/models", validate_default=True,
                             description="Where downloaded and converted model files are kept.")

    @field_validator("index_dir", "memory_db", "log_dir", "model_cache", mode="before")
    @classmethod
    def _a_path(cls, value):
        if value is None:  # YAML reads a bare "~" (and an empty value) as null
            raise ValueError("give a path; a bare ~ or an empty value is YAML's null: write ~/NAME for a file in "
                             "the home folder, or quote it")
        return value

    @field_validator("index_dir", "memory_db", "log_dir", "model_cache")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        # Neither YAML nor the shell (in `--set paths.memory_db=~/m.db`) expands "~": unexpanded,
        # it would make a folder literally named "~" and the memory would seem lost.
        return os.path.expanduser(value)


class EmbedderConfig(_Model):
    """The sentence embedder used for dense retrieval, reranking and the checks. An index records
    the embedder it was built with; changing it needs a re-ingest."""

    name: str = Field("all-minilm-l6-v2",
                      description="all-minilm-l6-v2 (packaged), a local sentence-transformers folder, or hash or "
                                  "hash-N (N dimensions; deterministic, for tests).")
    # ONNX int8 is ~1.7x faster than float32 PyTorch, its vectors at cosine 0.991 to them (docs/results.md).
    backend: Literal["onnx-int8", "torch"] = Field(
        "onnx-int8", description="onnx-int8: ONNX Runtime with int8 weights, exported once into paths.model_cache; "
                                 "torch: sentence-transformers in float32.")
    max_tokens: int = Field(256, ge=16, le=8192,
                            description="The embedder's input window in word pieces; chunks are sized to fit it.")


class FixedChunkerConfig(_Model):
    """The fixed chunker: windows of embedder tokens, snapped to sentence ends."""

    size: int = Field(200, ge=16, le=8192, description="Tokens per chunk.")
    overlap: int = Field(30, ge=0, le=4096, description="Tokens a chunk repeats from the one before (below size).")

    @model_validator(mode="after")
    def _overlap_below_size(self):
        if self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size}); set overlap below size")
        return self


class _MinMaxTokens(_Model):
    @model_validator(mode="after")
    def _min_not_above_max(self):
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens}); "
                             "set min_tokens at most max_tokens")
        return self


class SectionChunkerConfig(_MinMaxTokens):
    """The section chunker: chunks stay inside a section; long ones split at paragraphs, then sentences."""

    max_tokens: int = Field(220, ge=16, le=8192, description="The most tokens in a chunk.")
    min_tokens: int = Field(40, ge=0, le=8192,
                            description="A section with fewer tokens joins the next one of the same parent.")


class SemanticChunkerConfig(_MinMaxTokens):
    """The semantic chunker: breaks where adjacent sentences drift apart in meaning."""

    percentile: float = Field(90.0, gt=0, lt=100,
                              description="A gap between sentences whose cosine distance is above this percentile of "
                                          "the document's gaps is a break.")
    min_tokens: int = Field(40, ge=0, le=8192, description="The fewest tokens in a chunk (no break before).")
    max_tokens: int = Field(220, ge=16, le=8192, description="The most tokens in a chunk.")


class IngestionConfig(_Model):
    """How documents are read and chunked (`sirag ingest`, `sirag fetch-gutenberg`)."""

    chunkers: list[Literal["fixed", "section", "semantic"]] = Field(
        ["fixed", "section", "semantic"], min_length=1,
        description="The chunkers an index is built with; strategy.chunker and the repairs choose among them.")
    max_file_mb: float = Field(64, gt=0, le=4096, description="A larger file is left out of the index, with a note.")
    gutenberg_mirror: str = Field("https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt",
                                  description="Where fetch-gutenberg downloads a book ({id} is the book's id).")
    gutenberg_dir: str = Field("downloads/gutenberg", min_length=1,
                               description="Where fetch-gutenberg keeps the books it downloads; every book there is "
                                           "indexed.")
    fixed: FixedChunkerConfig = FixedChunkerConfig()
    section: SectionChunkerConfig = SectionChunkerConfig()
    semantic: SemanticChunkerConfig = SemanticChunkerConfig()

    @field_validator("gutenberg_dir")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        return os.path.expanduser(value)  # as for paths.*: "~" is the home folder, not a folder named "~"


class RetrievalConfig(_Model):
    """How hits are fused, judged for relevance and cut down to the context the model reads."""

    # Weighted fusion leaning on BM25: on sherlock_dev it gave evidence recall@5 0.865 against 0.73
    # for RRF (dense MiniLM alone: 0.57), see docs/results.md.
    dense_weight: float = Field(0.25, ge=0, le=1,
                                description="The dense retriever's share of a hybrid score; BM25 has the rest.")
    relevance_midpoint: float = Field(
        0.35, ge=-1, le=1,
        description="The question-sentence cosine at which relevance is 0.5 (0.35 for all-MiniLM-L6-v2; lower for a "
                    "weaker embedder such as hash).")
    refine: bool = Field(True, description="Keep only the passages' sentences that best match the question, within "
                                           "strategy.context_budget; false: the hits' whole text.")


class GeneratorConfig(_Model):
    """The language model that answers, and judges the answer's claims."""

    backend: Literal["llama_cpp", "transformers", "openai", "scripted"] = Field(
        "llama_cpp", description="llama_cpp (a GGUF file), transformers (4-bit NF4), openai (an OpenAI-compatible "
                                 "server), or scripted (tests).")
    model: str = Field("qwen2.5-coder-1.5b-instruct-q4_k_m",
                       description="A packaged model's name, a path to a .gguf file, a transformers model folder, or "
                                   "the server's model name.")
    n_ctx: int = Field(4096, ge=256, description="The context window in tokens (llama_cpp).")
    n_threads: int = Field(2, ge=1, description="CPU threads (llama_cpp, transformers).")
    temperature: float = Field(0.0, ge=0, le=2,
                               description="0: greedy; above, replies are sampled (with a fixed seed, reproducible).")
    max_tokens: int = Field(160, ge=1, le=4096, description="The most tokens of a reply.")
    timeout_s: float = Field(300.0, gt=0, description="How long a reply from the server may take (openai).")
    base_url: str | list[str] = Field(
        "http://127.0.0.1:8000/v1",
        description="The server's URL (openai), or a list of servers of the same model, asked in turn (one that "
                    "cannot be reached is passed over; docs/scale.md); a key, if it wants one, is read from "
                    "$OPENAI_API_KEY.")
    replies: list[str] = Field([], description="The scripted backend's replies, in order (tests).")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("the list of servers is empty; give at least one URL, e.g. http://127.0.0.1:8000/v1")
        for url in [v] if isinstance(v, str) else v:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"the server's URL must start with http:// or https://, e.g. http://{url}")
        return v


class ScoringConfig(_Model):
    """How an answer is checked (docs/signals.md)."""

    judge: Literal["llm", "none"] = Field(
        "llm", description="llm: the generator judges whether the passages support each claim (~0.5 s a claim); "
                           "none: claims are checked by their words and vectors alone.")


class ThresholdsConfig(_Model):
    """The bars of the diagnosis: the first failing check names the failure and its repairs
    (docs/signals.md, "Attribution")."""

    coverage: float = Field(0.45, ge=0, le=1,
                            description="Below: WEAK_RETRIEVAL (the passages miss the question's terms).")
    grounding: float = Field(0.2, ge=0, le=1,
                             description="Below: WEAK_RETRIEVAL (too few passages are relevant).")
    faithfulness: float = Field(0.8, ge=0, le=1,
                                description="Below: HALLUCINATION_RISK (claims the passages do not support).")
    redundancy: float = Field(0.5, ge=0, le=1,
                              description="Above: REDUNDANT_CONTEXT (the passages repeat each other).")
    confidence: float = Field(0.5, ge=0, le=1,
                              description="Below: LOW_CONFIDENCE (an answer needs at least this, whatever the answer "
                                          "bar).")
    dates_unstated: float = Field(0.0, ge=0, le=1,
                                  description="A share of the question's dates above this left unstated by the "
                                              "answer's evidence: WEAK_RETRIEVAL (1 turns the rule off).")


class LoopConfig(_Model):
    """The self-correcting loop: retry with a repaired strategy, or refuse."""

    enabled: bool = Field(True, description="false: one attempt per question (`--no-retry` for one command).")
    max_attempts: int = Field(3, ge=1, le=20, description="The most attempts per question.")
    max_seconds: float = Field(180.0, gt=0,
                               description="No retry that would end past this many seconds for the question.")
    # The bar is read off the shipped model's held-out curve (docs/results.md).
    target_precision: float | None = Field(
        0.8, gt=0, lt=1,
        description="The share of returned answers that should be right, on documents the confidence model never "
                    "saw: an answer is returned only if the confidence model shipped with the package "
                    "(evaluation/shipped_confidence.json, written by benchmarks/coldstart.py --ship) rates it at least "
                    "the bar its held-out curve gives for this share; the loop's retries are unchanged. null (or no "
                    "shipped model): answer_threshold alone decides.")
    answer_threshold: float = Field(
        0.5, ge=0, le=1,
        description="The confidence (hand-set weights, or memory's fit) a first attempt must reach for the loop to "
                    "stop; and, with target_precision null, to be returned.")
    # The best of several tries clears a fixed bar more often by luck than one try does.
    retry_margin: float = Field(0.1, ge=0, le=1,
                                description="Attempt n must reach answer_threshold + retry_margin * (n - 1).")
    show_passages_on_refusal: int = Field(3, ge=0, le=20, description="Passages shown with a refusal.")


class PolicyConfig(_Model):
    """How memory chooses the first strategy and orders the repairs (docs/memory.md)."""

    method: Literal["thompson", "greedy", "ucb", "fixed"] = Field(
        "greedy", description="greedy: the best posterior mean, an `explore` share drawn as thompson does; "
                              "thompson: the best draw from each posterior; ucb: UCB1; fixed: memory is not used.")
    explore: float = Field(0.1, ge=0, le=1,
                           description="greedy: the seeded share of questions whose first strategy and repair order "
                                       "are drawn, so records can still change.")
    seed: int = Field(0, ge=0, le=2**32 - 1,
                      description="Seeds the policy's draws and the calibration's folds, so runs repeat.")
    first_from_memory: bool = Field(
        True, description="false: the first attempt uses strategy as set, memory choosing only the repairs; set for "
                          "you when --set, a batch file's overrides or a grid point set a strategy.* key.")
    stop_below: float = Field(0.1, ge=0, le=1,
                              description="Stop retrying a failure type when memory's smoothed success rate of its "
                                          "repairs is below this (0: never).")


class CalibrationConfig(_Model):
    """The automatic fit of the confidence weights to memory's labels. When the engine starts with
    enough labelled answers new to the weights in use (a fit or a reset: labelled or merged in
    since), it fits as `sirag calibrate` does and stores the fit only if it scores no worse than
    the default weights held out; a fit kept out is recorded, and the next waits for as many
    labelled answers new to it. A batch or eval fits once before its runs; the runs do not."""

    auto_fit: bool = Field(True, description="Fit the confidence weights from memory's labels at start.")
    auto_min_labels: int = Field(50, ge=2, description="Labelled answers needed before the first automatic fit.")
    auto_refit_after: int = Field(20, ge=1,
                                  description="Labelled answers new to the weights in use (or to a fit kept out) "
                                              "before the next automatic fit.")


class StrategyConfig(_Model):
    """The strategy of a question's first attempt (memory may choose another: policy.first_from_memory)."""

    chunker: Literal["fixed", "section", "semantic"] = Field("section", description="The chunks searched.")
    retriever: Literal["dense", "bm25", "hybrid"] = Field("hybrid",
                                                          description="Dense vectors, BM25, or both fused.")
    top_k: int = Field(5, ge=1, le=100, description="Passages given to the model.")
    rerank: bool = Field(True, description="Reorder the hits by question-sentence relevance blended with the "
                                           "fused score.")
    prompt: Literal["base", "cite_then_answer", "strict"] = Field("cite_then_answer",
                                                                  description="The answer prompt.")
    neighbors: int = Field(0, ge=0, le=5, description="Adjacent chunks of the same section joined to each hit.")
    query_rewrite: Literal["none", "keywords"] = Field(
        "none", description="keywords: the generator rewrites the question into search keywords.")
    context_budget: int = Field(440, ge=32, le=32000,
                                description="Word pieces of passage text the prompt holds after refinement.")

    def to_strategy(self) -> Strategy:
        return Strategy(**self.model_dump())


class Config(_Model):
    paths: PathsConfig = PathsConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    ingestion: IngestionConfig = IngestionConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    generator: GeneratorConfig = GeneratorConfig()
    scoring: ScoringConfig = ScoringConfig()
    thresholds: ThresholdsConfig = ThresholdsConfig()
    loop: LoopConfig = LoopConfig()
    policy: PolicyConfig = PolicyConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    strategy: StrategyConfig = StrategyConfig()


def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    """Every setting's dotted key, in the models' order (a section is not a setting of its own)."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys += config_keys(kind, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys
