"""Offline evaluation: QA dataset readers, answer/refusal/selective-prediction metrics,
and calibration of the confidence signal.

Modules:
    datasets     -- ``load_qa`` reads the JSONL QA sets and SQuAD 2.0 JSON into ``QAItem``;
                    ``squad_contexts`` lists SQuAD paragraphs as (doc_id, text) for a corpus.
    metrics      -- pure scoring functions (EM, token F1, refusal P/R/F1, risk-coverage,
                    ECE, AUROC, retrieval recall@k and MRR); undefined values are ``None``.
    calibration  -- the hand-set logistic confidence model and its regularised refit.
"""
