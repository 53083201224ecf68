"""Settings sirag no longer has: each with the value its code now behaves as, and dropped with a
warning from the settings that still name one."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("sirag.config")


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
