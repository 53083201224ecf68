"""The scorer of an attempt: the model calls (embeddings, the generator's yes/no judgement)
wired to the pure scoring functions of the signal modules, and the confidence over them.

Model calls are kept apart from the pure scoring functions (``retrieval_signals``,
``faithfulness``, ``question_signals``, ``dates``), so each score can be tested without a model.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ..config import ScoringConfig
from ..confidence import answer_words
from ..confidence import confidence as calibrated_confidence
from ..errors import GenerationError, GeneratorUnavailableError
from ..generation.prompts import build_judge_messages
from ..ingestion.sentences import split_sentences
from ..retrieval.reranker import RELEVANCE_SLOPE
from ..text import claim_terms
from ..types import Generation, Passage, RetrievalResult, Signal, Signals
from .dates import dates_unstated
from .faithfulness import (CLAIM_SUPPORT_THRESHOLD, ClaimCheck, checked_claim, claim_support, evidence_text,
                           faithfulness_score, is_instruction, lexical_support, names_and_numbers, split_claims,
                           yes_key_terms)
from .question_signals import explanation_question, question_fit
from .retrieval_signals import (REDUNDANCY_THRESHOLD, RELEVANCE_THRESHOLD, coverage_score, grounding_score,
                                redundancy_score, soft_coverage)

log = logging.getLogger(__name__)

__all__ = ["JUDGE_MAX_CLAIMS", "SignalScorer"]

#: At most this many claims of an answer go to the generator as judge (each ~0.5 s on a 2-core
#: CPU, sharing the answer prompt's cache); the others are checked by their words and vectors.
JUDGE_MAX_CLAIMS = 4


class SignalScorer:
    """Scores an attempt: embeddings from the searcher's cache, judgements from the generator."""

    def __init__(self, config: ScoringConfig, embed: Callable[[list[str]], np.ndarray], generator=None,
                 weights: dict[str, float] | None = None, relevance_slope: float = RELEVANCE_SLOPE,
                 relevance_midpoint: float = 0.35, weights_note: str | None = None) -> None:
        self.config = config
        # Which weights the confidence uses, for its reason: "fitted weights" or "default weights"
        # unless the caller says more (the engine names a corpus's own fit).
        self.weights_note = weights_note or ("fitted weights" if weights else "default weights")
        self.relevance_slope = relevance_slope
        self.relevance_midpoint = relevance_midpoint
        self.embed = embed
        self.generator = generator
        self.weights = weights

    def score(self, question: str, retrieval: RetrievalResult, generation: Generation | None, answer: str,
              refused: bool, citations: tuple[int, ...], prompt: str = "cite_then_answer") -> Signals:
        passages = list(retrieval.passages)
        context = "\n".join(p.text for p in passages)
        coverage = coverage_score(question, context)
        # Every passage split into sentences and embedded once (with the question and the whole
        # passages): soft coverage, redundancy and the claim checks all read these vectors.
        sentences = [(p.number, p.text[a:b]) for p in passages
                     for a, b in (split_sentences(p.text) or [(0, len(p.text))])]
        if passages:
            vecs = self.embed([question, *(p.text for p in passages), *(t for _, t in sentences)])
            passage_vecs, sentence_vecs = vecs[1:1 + len(passages)], vecs[1 + len(passages):]
            coverage.detail.update(soft_coverage(vecs[0], sentence_vecs, [t for _, t in sentences],
                                                 self.relevance_slope, self.relevance_midpoint))
            redundancy = redundancy_score(passage_vecs, [p.text for p in passages], REDUNDANCY_THRESHOLD)
        else:
            sentence_vecs = np.zeros((0, 0))
            redundancy = Signal("redundancy", None, "no passages")
        grounding = grounding_score([h.scores.get("relevance", 0.0) for h in retrieval.hits], RELEVANCE_THRESHOLD)
        use_judge = self.config.judge == "llm" and self.generator is not None
        checks = [] if refused else self._check_claims(question, answer, passages, sentences, sentence_vecs,
                                                         use_judge, prompt)
        # The judge counts only if it judged something: a backend without log-probs returns None.
        judged = use_judge and (not checks or any(c.judge is not None for c in checks))
        faithfulness = faithfulness_score(checks, refused, "llm-judge+lexical" if judged else "lexical")
        prior = self._read_question_prior(passages, generation, refused)
        qprior, qprior_token = question_fit(prior, answer) if prior else (None, None)
        dates = dates_unstated(question, answer, passages, citations, refused)
        features = {
            "coverage": coverage.value, "grounding": grounding.value, "faithfulness": faithfulness.value,
            "redundancy": redundancy.value, "refusal": 1.0 if refused else 0.0,
            "mean_logprob": generation.mean_logprob if generation is not None else None,
            "answer_words": answer_words(answer, refused),
            # Read after the answer, and replies sampled again (both measured, neither kept:
            # docs/results.md); stored fits and the shipped model hold weights for them, so they
            # stay features, undefined and so neutral.
            "question_fit": None,
            "question_prior": qprior,
            "dates_unstated": dates.value,
            "explanation": explanation_question(question),
            "agreement": None,
        }
        conf = calibrated_confidence(features, self.weights)
        detail = {"features": features, "mean_logprob": features["mean_logprob"]}
        if dates.value is not None:  # the question's dates, those the evidence does not state, and where it looked
            detail["dates_unstated"] = {"reason": dates.reason, **dates.detail}
        if qprior_token is not None:
            detail["question_prior_token"] = qprior_token
        if prior:  # the question's tokens as the answer prompt holds them
            detail["question_prior_tokens"] = [[piece, None if lp is None else round(lp, 3)] for piece, lp in prior]
        confidence = Signal("confidence", conf, "logistic model over the signals, the mean token log-prob, the answer's "
                            "length, how well the question fits the answer, its dates and its kind"
                            f" ({self.weights_note})", detail)
        return Signals(coverage, redundancy, grounding, faithfulness, confidence, refused)

    def _read_question_prior(self, passages: list[Passage], generation: Generation | None,
                             refused: bool) -> list[tuple[str, float | None]] | None:
        """The question's tokens where the answer prompt holds them (after the passages, before
        the answer), with the log-probability of each content word's pieces, as the backend read
        them while it evaluated that prompt (``generation.prompt_read``). None for a refusal, an
        attempt without a generation, or a backend that does not read while it generates: reading
        the prompt again afterwards would cost what the prompt cost."""
        if refused or generation is None or not passages:
            return None
        return list(generation.prompt_read) if generation.prompt_read is not None else None

    def _check_claims(self, question: str, answer: str, passages: list[Passage], sentences: list[tuple[int, str]],
                      sentence_vecs: np.ndarray, use_judge: bool, prompt: str) -> list[ClaimCheck]:
        """Each claim against the passages' sentences (``sentences``: (passage number, text) with
        their vectors), instruction-like sentences left out."""
        claims_cited = split_claims(answer)
        # What each claim is checked as: a "yes" says what the question says (checked_claim).
        claims = [checked_claim(question, c) for c, _ in claims_cited]
        if not claims or not passages:
            return [ClaimCheck(c, cites, 0.0, 0.0, None, 0.0, False) for c, cites in claims_cited]
        by_num = {p.number: p for p in passages}
        evidence = {p.number: evidence_text(p.text) for p in passages}
        passage_terms = {n: set(claim_terms(text)) for n, text in evidence.items()}
        question_terms = set(claim_terms(question))
        keep = [i for i, (_, t) in enumerate(sentences) if not is_instruction(t)]
        owner = [sentences[i][0] for i in keep]
        if not keep:
            return [ClaimCheck(c, cites, 0.0, 0.0, None, 0.0, False) for c, cites in claims_cited]
        cvecs, svecs = self.embed(claims), sentence_vecs[keep]
        sims = cvecs @ svecs.T
        checks = []
        judged = 0
        for ci, claim in enumerate(claims):
            cited = tuple(n for n in claims_cited[ci][1] if n in by_num)
            # The words the claim adds to the question: its answer (none for a "yes", checked as
            # the question's own statement).
            added = set(claim_terms(claim)) - question_terms
            # Its names and numbers first: "Isaura" names the answer, "wrote" for the question's
            # "write" does not.
            added_keys = names_and_numbers(claim, added)
            # Cited passages first; if they do not support the claim, all passages.
            pools = [cited, tuple(by_num)] if cited else [tuple(by_num)]
            best = None
            for pool in pools:
                lexes = {n: lexical_support(claim, evidence[n]) for n in pool}
                idx = [i for i, o in enumerate(owner) if o in pool]
                sim = float(sims[ci, idx].max()) if idx else 0.0
                # The passage that backs it: one holding a word of its answer, a name or number of
                # it first (a passage with only the words it repeats from the question does not
                # state it), then the best support on its own (its words and its closest sentence
                # scored together, as the pool is), then the most of the claim's words.
                near = {n: max((float(sims[ci, i]) for i, o in enumerate(owner) if o == n), default=0.0) for n in pool}
                where = max(pool, key=lambda n: (len(added_keys & passage_terms[n]), len(added & passage_terms[n]),
                                                 claim_support(lexes[n], near[n], None), lexes[n]))
                cand = (max(lexes.values()), sim, where)
                if best is None or claim_support(*cand[:2], None) > claim_support(*best[:2], None):
                    best = cand
                if claim_support(*best[:2], None) >= CLAIM_SUPPORT_THRESHOLD:
                    break
            judge = None
            if use_judge and judged < JUDGE_MAX_CLAIMS:
                judge = self._judge(question, claims_cited[ci][0], passages, prompt)
                judged += 1
            support = claim_support(best[0], best[1], judge)
            if claims[ci] != claims_cited[ci][0]:
                # A "yes" affirms the whole statement: one passage must hold all of its names and
                # numbers, or the words it shares with the passages support a premise they deny.
                key = yes_key_terms(claims[ci])
                if key and not any(key <= passage_terms[n] for n in by_num):
                    support = min(support, 0.5 * CLAIM_SUPPORT_THRESHOLD)
            elif added and not any(added & passage_terms[n] for n in by_num):
                # No passage holds a word of its answer: the words it repeats from the question
                # carry its lexical share and the judge would vouch for words the passages lack
                # ("... kept the light with Morwen" from passages that never name a Morwen).
                support = min(support, 0.5 * CLAIM_SUPPORT_THRESHOLD)
            checks.append(ClaimCheck(claims_cited[ci][0], cited, best[0], best[1], judge, support,
                                     support >= CLAIM_SUPPORT_THRESHOLD, best[2]))
        return checks

    def _judge(self, question: str, claim: str, passages: list[Passage], prompt: str) -> float | None:
        """The judge's P(yes) for ``claim``, or None when the backend cannot judge it (a prompt
        that does not fit the context, say): that claim is then checked without the judge, and
        the attempt is kept."""
        try:
            return self.generator.yes_probability(build_judge_messages(prompt, question, passages, claim))
        except GeneratorUnavailableError:
            raise
        except GenerationError as exc:
            log.warning("judge skipped for a claim: %s", exc)
            return None
