"""Configuration: pydantic models loaded from YAML.

Layers, lowest first: the packaged ``configs/default.yaml`` < a user file given with
``--config`` < ``--set key=value`` overrides. Loading has no side effects: no
directories are created, nothing is seeded.
"""

from __future__ import annotations

import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .types import Strategy


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
    index_dir: str = Field("index/default", min_length=1)
    memory_db: str = Field("memory/memory.db", min_length=1)
    log_dir: str = Field("logs", min_length=1)
    model_cache: str = Field("~/.cache/self_improving_rag/models", validate_default=True)

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
    name: str = "all-minilm-l6-v2"  # or "hash" (deterministic, for tests), or a local sentence-transformers dir
    # onnx-int8: ONNX Runtime with int8 weights, exported once into paths.model_cache (~1.7x faster);
    # torch: sentence-transformers in float32. Indexes record the choice; switching needs a re-ingest.
    backend: Literal["onnx-int8", "torch"] = "onnx-int8"
    batch_size: int = Field(64, ge=1, le=4096)
    max_tokens: int = Field(256, ge=16, le=8192)


class FixedChunkerConfig(_Model):
    size: int = Field(200, ge=16, le=8192)
    overlap: int = Field(30, ge=0, le=4096)

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
    max_tokens: int = Field(220, ge=16, le=8192)
    min_tokens: int = Field(40, ge=0, le=8192)


class SemanticChunkerConfig(_MinMaxTokens):
    percentile: float = Field(90.0, gt=0, lt=100)
    window: int = Field(1, ge=1, le=10)
    min_tokens: int = Field(40, ge=0, le=8192)
    max_tokens: int = Field(220, ge=16, le=8192)


class IngestionConfig(_Model):
    chunkers: list[Literal["fixed", "section", "semantic"]] = Field(["fixed", "section", "semantic"], min_length=1)
    # Chunkers whose chunk vectors are pooled from their sentences' embeddings (one shared
    # sentence pass) instead of embedding each chunk's text: ingest is ~2x faster. The others
    # embed breadcrumb + chunk text. Measured trade-off in docs/results.md.
    pooled_vectors: list[Literal["fixed", "section", "semantic"]] = ["fixed", "semantic"]
    max_file_mb: float = Field(64, gt=0, le=4096)
    gutenberg_mirror: str = "https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt"
    gutenberg_dir: str = Field("downloads/gutenberg", min_length=1)
    fixed: FixedChunkerConfig = FixedChunkerConfig()
    section: SectionChunkerConfig = SectionChunkerConfig()
    semantic: SemanticChunkerConfig = SemanticChunkerConfig()

    @field_validator("gutenberg_dir")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        return os.path.expanduser(value)  # as for paths.*: "~" is the home folder, not a folder named "~"


class RetrievalConfig(_Model):
    # Weighted fusion leaning on BM25: on sherlock_dev it gave evidence recall@5 0.865 against 0.73
    # for RRF (dense MiniLM alone: 0.57), see docs/results.md.
    fusion: Literal["rrf", "weighted"] = "weighted"
    rrf_k: int = Field(60, ge=1)
    dense_weight: float = Field(0.25, ge=0, le=1)
    candidates: int = Field(30, ge=1, le=1000)
    ann_threshold: int = Field(200_000, ge=1)  # above this many vectors use HNSW
    rerank_sentences: int = Field(2, ge=1, le=10)
    # With rerank on, final score = (1 - w) * fused score (min-max over the pool) + w * relevance:
    # the embedding judge refines the lexical/dense order instead of replacing it.
    rerank_weight: float = Field(0.3, ge=0, le=1)
    # The generator as a relevance judge (yes/no log-probs) of the top N hits after reranking:
    # score = (1 - w) * reranked score (min-max over those N) + w * P(yes). Off by default: each
    # judgement reads one passage (~200 prompt tokens, ~3 s on a 2-core CPU).
    llm_judge_top: int = Field(0, ge=0, le=20)
    # A local sentence-transformers CrossEncoder directory: when set, it scores the relevance of
    # every reranked candidate (logit -> sigmoid) in place of the embedding judge; sentence
    # scores for context refinement still come from the embedder. Nothing is downloaded.
    cross_encoder_dir: str | None = None
    llm_judge_weight: float = Field(0.5, ge=0, le=1)

    @field_validator("cross_encoder_dir")
    @classmethod
    def _expand_home(cls, value: str | None) -> str | None:
        return None if value is None else os.path.expanduser(value)
    # Relevance = sigmoid(slope * (cosine - midpoint)); the midpoint is where a question and a
    # sentence turn from unrelated to related for this embedder (0.35 for all-MiniLM-L6-v2).
    relevance_midpoint: float = Field(0.35, ge=-1, le=1)
    relevance_slope: float = Field(10.0, gt=0, le=100)
    refine: bool = True
    refine_context_sentences: int = Field(1, ge=0, le=5)
    # sentences mode: after a kept sentence, the following ones keep joining while they add up to
    # at most this many word pieces (at least refine_context_sentences of them; 0 = exactly that
    # many), and with refine_replies a window that ends on a question takes the reply too. On
    # sherlock_dev this kept 32 of 32 evidence quotes instead of 29 at the same tokens
    # (docs/results.md, session 16).
    refine_context_after_tokens: int = Field(35, ge=0, le=400)
    refine_replies: bool = True
    # Refinement favours sentences of higher-ranked passages by this much (0 = sentence cosine
    # only) and first keeps every passage's best sentence; see retrieval/refine.py.
    refine_rank_weight: float = Field(0.5, ge=0, le=5)
    refine_every_passage: bool = True
    # sentences (default): the best sentences anywhere, each with refine_context_sentences
    # neighbours; windows: one contiguous window per passage grown around its best sentence.
    # Windows answered sherlock_dev worse end to end (0.467 vs 0.600 correct or rightly refused,
    # docs/results.md) and, since the token-measured context after a sentence, keep fewer whole
    # evidence quotes too (29 of 32 against 32).
    refine_mode: Literal["windows", "sentences"] = "sentences"


class GeneratorConfig(_Model):
    backend: Literal["llama_cpp", "transformers", "openai", "scripted"] = "llama_cpp"
    model: str = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    n_ctx: int = Field(4096, ge=256)
    n_threads: int = Field(2, ge=1)
    n_batch: int = Field(512, ge=8)
    seed: int = Field(0, ge=0, le=2**32 - 1)  # llama.cpp's -1 ("random") is not offered: runs are reproducible
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(160, ge=1, le=4096)
    timeout_s: float = Field(300.0, gt=0)
    # OpenAI-compatible HTTP backend: one server's URL, or a list of servers of the same model, asked
    # in turn (round-robin; one that cannot be reached is passed over), e.g. one per GPU machine
    base_url: str | list[str] = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    retries: int = Field(2, ge=0, le=10)
    # transformers backend
    compute_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    load_in_4bit: bool = True
    device_map: str = "auto"
    max_memory: dict[str, str] | None = None
    gguf_file: str | None = None
    # scripted backend (tests): replies returned in order
    replies: list[str] = []

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
    judge: Literal["llm", "none"] = "llm"
    judge_max_claims: int = Field(4, ge=0, le=20)
    relevance_threshold: float = Field(0.5, ge=0, le=1)
    redundancy_threshold: float = Field(0.92, ge=0, le=1)
    claim_support_threshold: float = Field(0.5, ge=0, le=1)
    # After the claims are judged, read the question after the passages and the answer: the
    # question_fit confidence feature (docs/signals.md). Off by default: it raised calibrated
    # AUROC on SQuAD from 0.738 to 0.776 (not on sherlock_dev) but adds ~0.5 s per attempt, which
    # takes scoring past 15% of the generator's time on the worst attempts.
    question_check: bool = False
    # question_prior confidence feature: the same reading of the question where the answer prompt
    # holds it (before the answer), taken while the generator evaluates that prompt, so it costs
    # a row of logits per content-word token (llama.cpp; the other backends cannot read it).
    question_prior: bool = True
    # agreement confidence feature: after the answer, draw this many more replies to the same
    # prompt at temperature 0.7, decoded together from the prompt's KV cache and cut at the
    # answer's length, and take the share that agree with the answer (llama.cpp only; 0: off).
    # Off by default: its weight is 0 until a fit, the fitted confidence was no better with it on
    # SQuAD or sherlock_dev, and the draws took a median 15% of the generator's time
    # (docs/results.md, session 29).
    agreement_samples: int = Field(0, ge=0, le=8)


class ThresholdsConfig(_Model):
    coverage: float = Field(0.45, ge=0, le=1)
    grounding: float = Field(0.2, ge=0, le=1)
    faithfulness: float = Field(0.8, ge=0, le=1)
    redundancy: float = Field(0.5, ge=0, le=1)
    confidence: float = Field(0.5, ge=0, le=1)
    # An answer whose evidence leaves more than this share of the question's dates unstated is
    # WEAK_RETRIEVAL (0: any date unstated; 1 turns the rule off).
    dates_unstated: float = Field(0.0, ge=0, le=1)


class LoopConfig(_Model):
    enabled: bool = True
    max_attempts: int = Field(3, ge=1, le=20)
    max_seconds: float = Field(180.0, gt=0)
    answer_threshold: float = Field(0.5, ge=0, le=1)
    # Attempt n must reach answer_threshold + retry_margin * (n - 1): the best of several tries
    # clears a fixed bar more often by luck than one try does.
    retry_margin: float = Field(0.1, ge=0, le=1)
    show_passages_on_refusal: int = Field(3, ge=0, le=20)


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
    # thompson: each candidate's success rate is drawn from its posterior and the best draw wins;
    # greedy: the best posterior mean wins, and a seeded share `explore` of questions draws as
    # thompson does (so records can still change); ucb: UCB1; fixed: memory is not used.
    method: Literal["thompson", "greedy", "ucb", "fixed"] = "greedy"
    explore: float = Field(0.1, ge=0, le=1)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    min_history: int = Field(3, ge=0)  # counted attempts of a query class before memory overrides the default
    # What the first-strategy choice learns from: every attempt (a strategy that succeeded as a
    # repair becomes a candidate first choice for its query class) or first attempts only (then
    # only strategies that were once chosen first can ever be chosen first again).
    learn_from: Literal["all_attempts", "first_attempts"] = "all_attempts"
    # False: every question's first attempt uses `strategy` as configured, memory choosing only
    # the repairs. Set for you when a command line (--set), a batch file's overrides or a grid
    # point sets a strategy.* key: an explicit strategy is honoured, not replaced by memory.
    first_from_memory: bool = True
    # true: the attempt a labelled outcome answered with (gold from `sirag eval`, `sirag
    # feedback`) counts by its label, every other attempt by its checks. Off by default: one count
    # then mixes two measures, and where labels are strict (LiteraryQA) every strategy's record
    # looks equally bad; labels reach the checks through the calibrated confidence anyway.
    use_labels: bool = False
    # Judge recorded attempts by the confidence weights and answer bars in use now, not by the
    # diagnosis stored when they ran: after a calibration fit the stored verdicts were made by
    # another confidence model (docs/memory.md). The verdicts stored stay as they were.
    rejudge: bool = True
    # Prior of the first-strategy choice (greedy's posterior mean and Thompson's draw): every
    # strategy of a query class starts at Beta(κ·m, κ·(1 − m)), m = the pooled success rate of
    # the class's other non-default strategies, at most the default's own, κ = prior_strength
    # pseudo-attempts, so one lucky success of a rarely tried strategy does not outweigh a long record.
    prior_strength: float = Field(4.0, ge=0, le=1000)
    # Stop retrying a failure type once memory shows its repairs rarely work: after at least
    # stop_min_evidence repairs in memory (after any failure), if the smoothed success rate
    # (s + 1) / (n + 2) is below stop_below, the loop ends there (0 turns this off). The rate is
    # the question's class's own when it has stop_min_evidence repairs after that failure, else
    # its counts shrunk toward the failure type's rate, itself shrunk toward the rate of all
    # repairs when the failure type has fewer than stop_min_evidence (docs/memory.md). A seeded
    # share stop_explore of such questions retries anyway, so the record that stopped the loop
    # can still change.
    stop_below: float = Field(0.1, ge=0, le=1)
    stop_min_evidence: int = Field(20, ge=1)
    stop_explore: float = Field(0.1, ge=0, le=1)


class CalibrationConfig(_Model):
    # Fit the confidence weights from memory's labels without being asked: when the engine starts
    # with a store holding at least `auto_min_labels` labelled answers, `auto_refit_after` of them
    # new to the weights in use (a fit or a reset: labelled or merged in since), it fits as `sirag
    # calibrate` does and stores the fit only if it scores no worse than the default weights held out;
    # a fit kept out is recorded, and the next waits for `auto_refit_after` labelled answers new to it.
    # A batch or eval fits once before its runs; the runs themselves do not.
    auto_fit: bool = True
    auto_min_labels: int = Field(50, ge=2)
    auto_refit_after: int = Field(20, ge=1)
    # Held-out figures and the keep-or-drop rule of every fit cross-fit the labels in this many
    # folds: each label is scored by weights fitted on the others (one question in one fold).
    folds: int = Field(5, ge=2, le=20)
    # How hard a fit pulls the weights toward their defaults: "auto" picks, from 0.01 to 10, the
    # strength whose cross-fitted Brier score is lowest on the labels at hand (labels that agree
    # with the defaults keep the fit near them; many that disagree let it move); a number fixes
    # it (1 was the only strength before session 23).
    l2: Literal["auto"] | float = "auto"
    # What a fit changes (docs/signals.md): "full" refits every weight; "scaled" keeps the default
    # weights' ranking of answers and fits only how their score maps to a probability (a slope and
    # a shift); "auto" takes the one whose cross-fitted (held-out) Brier score is lower, "scaled" on
    # a tie (docs/results.md, session 32). l2 concerns full refits alone: this one's, and a corpus's
    # own fit (per_corpus), always a full refit pulled toward the fit on all labels, whatever its model.
    model: Literal["auto", "full", "scaled"] = "auto"
    # Answers from different corpora (index folders) sharing one memory store need not share one
    # confidence model: with this on, a corpus holding as many labelled answers as a fit needs
    # (auto_min_labels for the automatic fit, --min-labels for `sirag calibrate`), right and wrong
    # ones among them, gets a fit of its own, pulled toward the fit on all labels, unless that fit
    # scores a worse held-out Brier than the shared one; questions on it use that fit. Off: one fit
    # serves every corpus (as before session 24).
    per_corpus: bool = True

    @field_validator("l2")
    @classmethod
    def check_l2(cls, v: Any) -> Any:
        if v != "auto" and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError("must be 'auto' or a positive number (the penalty strength of the fit)")
        return v


class StrategyConfig(_Model):
    chunker: Literal["fixed", "section", "semantic"] = "section"
    retriever: Literal["dense", "bm25", "hybrid"] = "hybrid"
    top_k: int = Field(5, ge=1, le=100)
    rerank: bool = True
    prompt: Literal["base", "cite_then_answer", "strict"] = "cite_then_answer"
    neighbors: int = Field(0, ge=0, le=5)
    query_rewrite: Literal["none", "keywords"] = "none"
    context_budget: int = Field(440, ge=32, le=32000)

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


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    """Validate a settings mapping, naming the bad key and its source on failure."""
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
        user = _read_yaml(text, str(p))
        data = _merge(data, user)
        _record_origin(origin, user, str(p))
        layers.append(str(p))
    for item in overrides:
        tree = parse_override(item)
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
