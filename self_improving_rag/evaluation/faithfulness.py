"""Faithfulness: the share of an answer's claims that the passages support. The pure parts:
splitting an answer into claims with their citations, what a claim is checked as, its support by
words and by its closest sentence (blended with the judge's P(yes) when there is one), and the
signal over the checks; instruction-like passage sentences never count as support.
:class:`~.scorer.SignalScorer` makes the model calls. Formulas are in docs/signals.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..generation.prompts import parse_citations
from ..ingestion.sentences import split_sentences
from ..query import query_features
from ..text import CITATION, capitalised_terms, claim_terms, stemmer, strip_citations
from ..types import Signal

__all__ = ["CLAIM_SUPPORT_THRESHOLD", "ClaimCheck", "checked_claim", "claim_support", "evidence_text",
           "faithfulness_score", "is_instruction", "lexical_support", "miscitations", "names_and_numbers",
           "split_claims", "yes_key_terms"]

#: A claim is supported from this support score on (faithfulness).
CLAIM_SUPPORT_THRESHOLD = 0.5

# Sentences that address the reader with orders are instructions planted in a document, not
# evidence: they never count as support for a claim.
_INSTRUCTION = re.compile(
    r"\b(ignore|disregard|forget)\b.{0,40}\b(question|instruction|instructions|above|previous|prompt|rules)\b"
    r"|\byou (must|should|will) (answer|reply|say|respond)\b"
    # An imperative at the start of a sentence ("Answer only with ...", "Say that ...",
    # "Answer (with [n] citations): yes"), not prose ("Holmes would answer with a shrug") or an
    # FAQ line ("Answer: The warranty ...").
    r"|^\W*(answer|reply|respond|say)\s*(\(|(only\s+)?(with|that)\b)"
    r"|\bsystem prompt\b",
    re.IGNORECASE,
)


def is_instruction(sentence: str) -> bool:
    """Whether a passage sentence reads as an instruction to the model."""
    return bool(_INSTRUCTION.search(sentence))


def evidence_text(text: str) -> str:
    """A passage without its instruction-like sentences."""
    spans = split_sentences(text) or [(0, len(text))]
    return " ".join(text[s:e] for s, e in spans if not is_instruction(text[s:e]))


_LEADING_CITATION = re.compile(rf"^\s*(?:{CITATION.pattern}\s*)+")
#: A ';' between clauses, not one inside a citation such as "[1; 2]".
_CLAIM_SEPARATOR = re.compile(r";(?![^\[\]]*\])")


def split_claims(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    """The answer's claims (sentences, split at ';') without citations, each with the passage
    numbers it cites; a claim without its own citation inherits those of its sentence."""
    text = answer.strip()
    if not text:
        return []
    claims: list[tuple[str, tuple[int, ...]]] = []
    for s, e in split_sentences(text):
        sentence = text[s:e]
        # A citation written after the full stop ("Paris. [1] London. [2]") opens the next
        # sentence but belongs to the claim before it.
        lead = _LEADING_CITATION.match(sentence)
        if lead and claims and not claims[-1][1]:
            claims[-1] = (claims[-1][0], parse_citations(lead.group()))
            sentence = sentence[lead.end():]
        sentence_cites = parse_citations(sentence)
        for part in _CLAIM_SEPARATOR.split(sentence):
            c = strip_citations(part).strip(" .")
            if re.search(r"\w", c):
                claims.append((c, parse_citations(part) or sentence_cites))
    return claims


#: "Yes", also in quotes or markdown emphasis ('"Yes," [1].', "**Yes**, it was [1].").
_YES = re.compile(r"^[\s\"'“‘*_(]*yes\b[\s,.;:!*_\"'”’)-]*", re.I)


def checked_claim(question: str, claim: str) -> str:
    """The text a claim is checked as: for a yes-no question, a claim that opens with "yes"
    affirms the question's statement, so it is checked as the question followed by the rest of
    the claim ("Yes [1]." to "Was the bridge finished in 1874?"): no passage says "yes", and that
    word alone failed every such answer. A "no" ("no" is a stop word) denies the question's
    words, which the passages need not hold, so it is checked by its own words, as any claim.
    A question that offers a choice ("Was it built by Venn or by Lune?") is not answered by a
    "yes": that claim is checked as it is (as Engine's restates_question reads such a question)."""
    m = _YES.match(claim)
    if m is None or query_features(question).query_class != "yes-no" or re.search(r"\bor\b", question, re.I):
        return claim
    return f"{question.strip().rstrip('?').strip()} {claim[m.end():]}".strip()


def names_and_numbers(text: str, terms: set[str]) -> set[str]:
    """Of ``terms`` (claim terms of ``text``), those that name someone or something, or are numbers.

    Only a capitalised word that is also a claim term can be found in a passage's claim terms: an
    initial ("J. Smith", "the U.S.", "O'Brien") is one letter, and a number word ("the Seven
    Dwarfs", "the Third Reich") is its digits, which the numbers already take. A title ("Mr.",
    "Dr.") names no one: "Did Mr. Holmes ..." of a passage that says "Holmes"."""
    return ((capitalised_terms(text) & terms) - _TITLES) | {t for t in terms if any(ch.isdigit() for ch in t)}


def yes_key_terms(statement: str) -> set[str]:
    """The names and numbers of the statement a "yes" affirms (:func:`checked_claim`), as claim
    terms: a false premise hides in them ("Did Lune save twelve sailors?" of a passage that says
    eleven), and a "yes" whose passage lacks one affirms what no passage says."""
    return names_and_numbers(statement, set(claim_terms(statement)))


#: Titles before a name, as claim terms: not names themselves, and a passage often leaves them out.
_TITLES = frozenset(stemmer().stemWords("mr mrs ms miss dr doctor sir madam prof professor rev st".split()))


def lexical_support(claim: str, passage_text: str) -> float:
    """Share of the claim's content terms found in the passage, numbers written as words and
    as digits being one term ("7" is supported by "seven").

    All of the claim's terms count, also those it repeats from the question: an answer that
    restates the question ("The ship they sailed on was the Northumberland Hotel") is supported
    only if the passages speak of its premise too. Counting only the terms a claim adds to the
    question was tried earlier: on sherlock_dev it passed two such answers to unanswerable
    questions and recovered one right answer.
    """
    terms = set(claim_terms(claim))
    if not terms:
        return 1.0
    return len(terms & set(claim_terms(passage_text))) / len(terms)


@dataclass(frozen=True)
class ClaimCheck:
    claim: str
    cited: tuple[int, ...]
    lexical: float
    similarity: float
    judge: float | None
    support: float
    supported: bool
    #: The passage whose words back the claim best, in the passages the check settled on (the
    #: cited ones, or all of them when the cited ones fall short); None without passages.
    found_in: int | None = None


def claim_support(lexical: float, similarity: float, judge: float | None) -> float:
    """Support of one claim: the judge's P(yes) when available, blended with lexical evidence;
    otherwise the mean of lexical overlap and the activated best-sentence similarity. A claim
    with fewer than half of its content words in the passages gets at most its lexical share."""
    sim_act = 1.0 / (1.0 + np.exp(-10.0 * (similarity - 0.45)))
    lexical_part = 0.5 * lexical + 0.5 * float(sim_act)
    support = lexical_part if judge is None else 0.7 * judge + 0.3 * lexical_part
    # The judge can confirm words the passages contain; it cannot vouch for words they lack
    # (a 1.5B judge says "yes" to fluent inventions): most content words absent caps support.
    if lexical < 0.5:
        support = min(support, lexical)
    return support


def miscitations(claims: list[dict]) -> list[str]:
    """Each supported claim (as the faithfulness signal's ``detail["claims"]`` lists them) that
    cites passages which do not hold it, said as "'claim' cites [2], stated in [1]" (at most
    three): the sources shown include the passage that does (Engine._finish), and the reader
    should know the citation is off."""
    return [f"{c['claim'][:60]!r} cites {''.join(f'[{n}]' for n in c['cited'])}, stated in [{c['found_in']}]"
            for c in claims
            if c.get("supported") and c.get("cited") and c.get("found_in") is not None
            and c["found_in"] not in c["cited"]][:3]


def faithfulness_score(checks: list[ClaimCheck], refused: bool, method: str) -> Signal:
    """Share of the answer's claims supported by the passages."""
    name = "faithfulness"
    if refused:
        return Signal(name, None, "the answer is a refusal; nothing to verify", {"method": method})
    if not checks:
        return Signal(name, None, "the answer has no claims", {"method": method})
    ok = [c for c in checks if c.supported]
    bad = [c.claim for c in checks if not c.supported]
    claims = [{"claim": c.claim, "cited": list(c.cited), "lexical": round(c.lexical, 3),
               "similarity": round(c.similarity, 3), "judge": None if c.judge is None else round(c.judge, 3),
               "support": round(c.support, 3), "supported": c.supported, "found_in": c.found_in} for c in checks]
    reason = f"{len(ok)}/{len(checks)} claims supported ({method})"
    if bad:
        reason += "; unsupported: " + "; ".join(repr(b[:80]) for b in bad[:3])
    if miscited := miscitations(claims):
        reason += "; cited elsewhere than stated: " + "; ".join(miscited)
    return Signal(name, len(ok) / len(checks), reason, {"method": method, "unsupported": bad, "claims": claims})
