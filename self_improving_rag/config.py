"""Configuration: pydantic models loaded from YAML.

Layers, lowest first: the packaged ``configs/default.yaml`` < a user file given with
``--config`` < ``--set key=value`` overrides. Loading has no side effects: no
directories are created, nothing is seeded.
"""

from __future__ import annotations

import json
import logging
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .types import Strategy

log = logging.getLogger("sirag.config")


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
    # The answer bar is read off the shipped model's held-out curve (docs/results.md). Null by
    # default until the package ships a model fitted on enough labelled answers to carry over.
    target_precision: float | None = Field(
        None, gt=0, lt=1,
        description="The share of returned answers that should be right, on documents the confidence model never "
                    "saw: the bar and the starting weights come from the shipped confidence model "
                    "(evaluation/shipped_confidence.json, written by benchmarks/coldstart.py --ship); null, or no "
                    "shipped model: the hand-set confidence weights, answer_threshold a raw bar.")
    answer_threshold: float | None = Field(
        None, ge=0, le=1,
        description="A raw bar on the confidence instead of the one target_precision gives; unset, it is filled in "
                    "from target_precision (0.5 when that is null).")
    # The best of several tries clears a fixed bar more often by luck than one try does.
    retry_margin: float = Field(0.1, ge=0, le=1,
                                description="Attempt n must reach answer_threshold + retry_margin * (n - 1).")
    show_passages_on_refusal: int = Field(3, ge=0, le=20, description="Passages shown with a refusal.")

    @model_validator(mode="after")
    def _bar_from_target(self) -> "LoopConfig":
        if self.answer_threshold is None:
            from .evaluation.shipped import bar_for

            object.__setattr__(self, "answer_threshold", bar_for(self.target_precision))
        return self


def pins_strategy(items) -> bool:
    """Whether explicit settings (``--set`` items "key=value", or (key, value) pairs of a batch
    file's overrides or a grid point) set a strategy.* key without saying where the first
    strategy comes from (policy.first_from_memory, flat or in a ``policy`` mapping): then it is
    pinned (policy.first_from_memory false), so memory does not replace what was asked for."""
    tree: dict[str, Any] = {}
    for item in items:
        text = f"{item[0]}={json.dumps(item[1])}" if isinstance(item, tuple) else str(item)
        try:
            tree = _merge(tree, parse_override(text))
        except ConfigError:  # load_config names the bad item; its key still counts
            key = text.partition("=")[0].strip()
            if key:
                tree = _merge(tree, {key.split(".")[0]: {}})
    policy = tree.get("policy")
    return "strategy" in tree and not (isinstance(policy, dict) and "first_from_memory" in policy)


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


def default_config_text() -> str:
    """The packaged default YAML."""
    return resources.files("self_improving_rag").joinpath("configs/default.yaml").read_text("utf-8")


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (YAML keeps only the last: the first is lost unseen)."""

    def __init__(self, key: Any, mark: Any) -> None:
        super().__init__(f"the key {key!r} appears twice in one mapping")
        self.key, self.problem_mark = key, mark


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key repeated in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor" merges; it may repeat
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base loader names that problem
                continue
            if duplicate:
                raise DuplicateKeyError(key, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml_unique(text: str) -> Any:
    """``yaml.safe_load`` that raises :class:`DuplicateKeyError` for a key given twice."""
    loader = _UniqueKeyLoader(text)  # a SafeLoader: safe_load's constructors, plus the key check
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = load_yaml_unique(text)
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        raise ConfigError(f"{source}: the key {exc.key!r} is given twice in one mapping (line {mark.line + 1}); "
                          "keep one of them") from exc
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        # safe_load raises these for a mistyped explicit tag (e.g. "!!int abc") or absurd nesting.
        raise ConfigError(f"{source}: a value cannot be read ({type(exc).__name__}); fix the YAML") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        why = f": {exc.problem}" if isinstance(getattr(exc, "problem", None), str) else ""
        raise ConfigError(f"{source}: malformed YAML{where}{why}; fix the syntax and retry") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings at the top level, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(item: str) -> dict[str, Any]:
    """Turn ``a.b.c=value`` into ``{"a": {"b": {"c": value}}}``; the value is read as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set strategy.top_k=8")
    key, _, raw = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {item!r}: empty key; use e.g. --set strategy.top_k=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML; quote it") from exc
    text = raw.strip()
    if re.fullmatch(r"[-+]?0[0-9_]+", text) and isinstance(value, int) and value != int(text.replace("_", ""), 10):
        # YAML 1.1 reads 010 as octal 8: a number with a leading zero is taken as written, and the
        # setting's own type reads it ("010" is 10 for a number, "010" for text).
        value = text
    elif "#" in raw and _drops_a_comment(raw, value):
        # YAML reads " #..." as a comment, which would cut a path like "runs/idx #2" short.
        if isinstance(value, str) and text[:1] not in ("'", '"') or not text.split("#", 1)[0].strip():
            value = text  # unquoted text (or text that starts with '#'): taken whole
        else:
            raise ConfigError(f"--set {item!r}: '#' after a space starts a YAML comment, so the value would "
                              "lose its end; quote the value (e.g. --set 'key=\"a #b\"') or leave the comment out")
    tree: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        tree = {part: tree}
    return tree


_HASH_MARK = "\ue000"  # a private-use character standing in for '#' while checking for a comment


def _drops_a_comment(raw: str, value: Any) -> bool:
    """Whether YAML read a comment in ``raw``: with every '#' made an ordinary character, the
    value reads otherwise (a '#' inside quotes, or inside a word, changes nothing)."""
    def unmark(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(_HASH_MARK, "#")
        if isinstance(v, list):
            return [unmark(x) for x in v]
        if isinstance(v, dict):
            return {unmark(k): unmark(x) for k, x in v.items()}
        return v

    try:
        alt = yaml.safe_load(raw.replace("#", _HASH_MARK))
    except (yaml.YAMLError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return True  # the text after '#' does not even parse: YAML took it for a comment
    return unmark(alt) != value


def _describe(exc: ValidationError, source: str) -> str:
    msgs = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            msgs.append(f"unknown key '{loc}'")
        else:
            msgs.append(f"'{loc}': {err['msg']} (got {err.get('input')!r})")
    more = f" and {len(exc.errors()) - 3} more" if len(exc.errors()) > 3 else ""
    packaged = resources.files("self_improving_rag").joinpath("configs/default.yaml")
    return f"{source}: " + "; ".join(msgs) + more + f"; see {packaged} for valid keys and values"


class _NoEffect:
    """The value of a removed setting that changed nothing sirag answers (see REMOVED_KEYS)."""

    def __repr__(self) -> str:
        return "NO_EFFECT"


#: Stands, in REMOVED_KEYS, for a removed setting that had no effect on answers.
NO_EFFECT: Any = _NoEffect()

#: Settings sirag no longer has, each with the value its code now behaves as (NO_EFFECT: the
#: setting changed nothing sirag answers). A user file, a ``--set`` item or a run's saved
#: config.yaml that still names one loads: the key is dropped with a warning (a key never known,
#: a typo, is still an error). A resumed run whose config.yaml holds another value than this one
#: was made with other behaviour, and is refused as for a changed setting (batch.py).
REMOVED_KEYS: dict[str, Any] = {
    # Experiments that lost (docs/results.md): reciprocal rank fusion, refinement by windows, the
    # generator as a relevance judge of the top hits, a local cross-encoder (none is packaged).
    "retrieval.fusion": "weighted",
    "retrieval.rrf_k": NO_EFFECT,
    "retrieval.refine_mode": "sentences",
    "retrieval.llm_judge_top": 0,
    "retrieval.llm_judge_weight": NO_EFFECT,
    "retrieval.cross_encoder_dir": None,
    # Tuning constants, now beside the code that uses them.
    "retrieval.candidates": 30,
    "retrieval.ann_threshold": 200_000,
    "retrieval.rerank_sentences": 2,
    "retrieval.rerank_weight": 0.3,
    "retrieval.relevance_slope": 10.0,
    "retrieval.refine_context_sentences": 1,
    "retrieval.refine_context_after_tokens": 35,
    "retrieval.refine_replies": True,
    "retrieval.refine_rank_weight": 0.5,
    "retrieval.refine_every_passage": True,
    # Confidence features that lost: the question read back after the answer (question_fit: better
    # ranking on SQuAD only, for ~0.5 s more per attempt) and replies sampled again (agreement: the
    # fitted confidence was no better with it, for a median 15% of the generator's time). The
    # question read in the answer prompt (question_prior) is always on where the backend reads it.
    "scoring.question_check": False,
    "scoring.agreement_samples": 0,
    "scoring.question_prior": True,
    "scoring.judge_max_claims": 4,
    "scoring.relevance_threshold": 0.5,
    "scoring.redundancy_threshold": 0.92,
    "scoring.claim_support_threshold": 0.5,
    # The policy's alternatives that lost: learning from first attempts only (strategies that only
    # ever ran as repairs could never be chosen first), labels counted in place of the checks (one
    # count mixed two measures), memory judged by the diagnoses stored (made by another confidence
    # model after a fit). Its tuning constants are in feedback/policy.py.
    "policy.learn_from": "all_attempts",
    "policy.use_labels": False,
    "policy.rejudge": True,
    "policy.min_history": 3,
    "policy.prior_strength": 4.0,
    "policy.stop_min_evidence": 20,
    "policy.stop_explore": 0.1,
    # How a fit is made: constants in evaluation/calibrate.py. One fit for every corpus
    # (per_corpus false) is gone: a corpus with enough labels gets its own fit when it scores better.
    "calibration.folds": NO_EFFECT,
    "calibration.l2": "auto",
    "calibration.model": "auto",
    "calibration.per_corpus": True,
    # Tuning constants beside the code that uses them, and the transformers backend's loading
    # options (it loads in 4 bits, bfloat16, device_map auto; a .gguf path is given as the model).
    "embedder.batch_size": NO_EFFECT,
    "ingestion.pooled_vectors": ["fixed", "semantic"],
    "ingestion.semantic.window": 1,
    "generator.seed": 0,
    "generator.n_batch": 512,
    "generator.retries": NO_EFFECT,
    "generator.api_key_env": NO_EFFECT,
    "generator.compute_dtype": "bfloat16",
    "generator.load_in_4bit": True,
    "generator.device_map": "auto",
    "generator.max_memory": None,
    "generator.gguf_file": None,
}


def drop_removed(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` without the settings of :data:`REMOVED_KEYS` it holds, each named in a warning
    (``data`` itself is left as it is)."""
    out = data
    for key in REMOVED_KEYS:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        # Copy the mappings on the way down, so the caller's data keeps the key.
        out = dict(out)
        node = out
        for part in parents:
            node[part] = dict(node[part])
            node = node[part]
        del node[leaf]
        log.warning("%s is no longer a setting (removed); it is ignored (%s)", key, source)
    return out


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    """Validate a settings mapping, naming the bad key and its source on failure. A removed
    setting (:data:`REMOVED_KEYS`) is dropped with a warning."""
    data = drop_removed(data, source)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


#: A configuration file is a few kilobytes; past this, --config was given the wrong file.
_CONFIG_MAX_BYTES = 1_000_000


def load_config(path: str | Path | list[str | Path] | tuple[str | Path, ...] | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load the packaged defaults, then the user file(s) in order (a later file's keys win), then
    ``--set`` overrides."""
    data = _read_yaml(default_config_text(), "packaged configs/default.yaml")
    origin: dict[tuple[str, ...], str] = {}  # each key path set by a user layer -> that layer
    layers: list[str] = []  # the user layers, in order
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    for p in map(Path, paths):
        if p.is_dir():
            raise ConfigError(f"--config {p} is a folder; pass a YAML file, e.g. configs/default.yaml")
        if not p.exists():
            raise ConfigError(f"config file {p} not found; pass an existing YAML file to --config")
        # Not only regular files: `--config /dev/null` (no user settings) and `--config <(...)`
        # (a pipe) are read too, up to a size no configuration reaches.
        try:
            with open(p, "rb") as fh:
                raw = fh.read(_CONFIG_MAX_BYTES + 1)
            if len(raw) > _CONFIG_MAX_BYTES:
                raise ConfigError(f"config file {p} is over {_CONFIG_MAX_BYTES // 1_000_000} MB; pass a YAML "
                                  "configuration file to --config")
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {p} cannot be read ({exc}); check its permissions and encoding") from exc
        user = drop_removed(_read_yaml(text, str(p)), str(p))
        data = _merge(data, user)
        _record_origin(origin, user, str(p))
        layers.append(str(p))
    for item in overrides:
        tree = drop_removed(parse_override(item), f"--set {item}")
        data = _merge(data, tree)
        _record_origin(origin, tree, f"--set {item}")
        layers.append(f"--set {item}")
    # Only the result is validated (a later layer may mend what an earlier one left invalid, e.g.
    # a smaller size, then a smaller overlap); an error names the layers that set the keys at fault.
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, _sources(exc, origin, layers))) from exc


def _record_origin(origin: dict[tuple[str, ...], str], tree: dict[str, Any], source: str,
                   prefix: tuple[str, ...] = ()) -> None:
    """Note ``source`` as the layer that set each leaf key of ``tree`` (the last one wins)."""
    for key, value in tree.items():
        path = (*prefix, str(key))
        for held in [k for k in origin if len(k) < len(path) and path[:len(k)] == k]:
            del origin[held]  # a value set under a key that held a plain value replaces that value
        if isinstance(value, dict) and len(path) < 16:  # no setting is nested deeper (YAML can loop)
            _record_origin(origin, value, source, path)  # an empty mapping merged in changes nothing
        else:
            for held in [k for k in origin if k[:len(path)] == path]:
                del origin[held]  # a value that is not a mapping replaces all keys below it
            origin[path] = source


def _sources(exc: ValidationError, origin: dict[tuple[str, ...], str], layers: list[str]) -> str:
    """The layers (files, --set items) that set the keys the validation errors are about: the
    key itself, or the keys under a section a section-wide check refused; else every user layer
    (a key they hold as an empty mapping, say), and the packaged defaults when there is none."""
    found: list[str] = []
    for err in exc.errors()[:3]:
        loc = tuple(str(p) for p in err["loc"])
        for path, source in origin.items():
            if (path[:len(loc)] == loc or loc[:len(path)] == path) and source not in found:
                found.append(source)
    if not found:
        found = list(dict.fromkeys(layers))
    return ", ".join(found) if found else "packaged configs/default.yaml"


def to_yaml(config: Config) -> str:
    """Resolved configuration as YAML (written beside batch results)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
