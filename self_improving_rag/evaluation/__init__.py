"""Scoring an attempt, and evaluating the engine offline.

Modules:
    scorer              -- ``SignalScorer``: the model calls wired to the signal functions below,
                           and the confidence over them (``self_improving_rag.confidence``).
    retrieval_signals   -- coverage, redundancy and grounding of the retrieved passages.
    faithfulness        -- claims of an answer and their support by the passages.
    question_signals    -- how well the question fits the generator's reading; explanation questions.
    dates               -- the question's dates that the answer's evidence does not state.
    fitting             -- fitting the confidence weights: the penalised full refit, the scaled model.
    crossfit            -- cross-fitting, the choice of penalty and model, per-corpus fits.
    fit_scores          -- AUROC, ECE and Brier score of a set of weights on labelled rows.
    calibrate           -- fitting the weights on the labelled outcomes of a memory store.
    coldstart, shipped  -- the cold-start protocol and the confidence model the package ships.
    datasets            -- ``load_qa`` reads the JSONL QA sets and SQuAD 2.0 JSON into ``QAItem``.
    answer_metrics      -- grading answers and refusals: EM, token F1, containment, refusal P/R/F1.
    confidence_metrics  -- risk-coverage, reliability bins, ECE, AUROC and its interval, percentiles.
    retrieval_metrics   -- evidence hits, recall@k and MRR; retrieval_eval runs them per chunker.
Undefined metric values are ``None``, never a silent 0.0.
"""
