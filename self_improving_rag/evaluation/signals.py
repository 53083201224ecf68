"""Self-evaluation signals of one attempt. Formulas are in docs/signals.md.

Model calls (embeddings, the generator's yes/no judgement) are kept apart from the pure
scoring functions below them, so each score can be tested without a model.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..config import ScoringConfig
from ..errors import GenerationError, GeneratorUnavailableError
from ..generation.prompts import _CITATION, build_judge_messages, parse_citations, strip_citations
from ..ingestion.sentences import split_sentences
from ..retrieval.reranker import RELEVANCE_SLOPE, sigmoid
from ..text import QUESTION_WORDS, STOP_WORDS, capitalised_terms, claim_terms, content_terms, stemmer, term_words
from ..types import Generation, Passage, RetrievalResult, Signal, Signals
from .calibration import QUESTION_FIT_FLOOR, answer_words
from .calibration import confidence as calibrated_confidence

log = logging.getLogger(__name__)

#: A hit counts as relevant (for grounding) from this relevance on: where the reranker's sigmoid
#: crosses 0.5, at ``retrieval.relevance_midpoint``.
RELEVANCE_THRESHOLD = 0.5
#: Two passages whose vectors' cosine reaches this are near duplicates (redundancy).
REDUNDANCY_THRESHOLD = 0.92
#: A claim is supported from this support score on (faithfulness).
CLAIM_SUPPORT_THRESHOLD = 0.5
#: At most this many claims of an answer go to the generator as judge (each ~0.5 s on a 2-core
#: CPU, sharing the answer prompt's cache); the others are checked by their words and vectors.
JUDGE_MAX_CLAIMS = 4


# -- pure scoring functions ---------------------------------------------------------------

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

def coverage_score(question: str, context: str) -> Signal:
    """Weighted share of the question's content terms present in the context (names count 2x)."""
    q_terms = list(dict.fromkeys(content_terms(question)))
    if not q_terms:
        return Signal("coverage", None, "the question has no content words to look for")
    ctx = set(content_terms(context))
    names = capitalised_terms(question)
    weights = {t: (2.0 if t in names else 1.0) for t in q_terms}
    found = [t for t in q_terms if t in ctx]
    missing = [t for t in q_terms if t not in ctx]
    shown = term_words(question)
    missing_words = [shown.get(t, t) for t in missing]  # the question's own words, for messages
    value = sum(weights[t] for t in found) / sum(weights.values())
    reason = (f"{len(found)}/{len(q_terms)} question terms in the context"
              + (f"; missing: {', '.join(repr(m) for m in missing_words[:5])}" if missing else ""))
    return Signal("coverage", value, reason, {"found": found, "missing": missing, "missing_words": missing_words})


def soft_coverage(question_vec: np.ndarray, sentence_vecs: np.ndarray, sentences: list[str],
                  slope: float = 10.0, midpoint: float = 0.35) -> dict:
    """Embedding-based coverage: σ(slope · (max_s cos(question, s) − midpoint)) over the context's
    sentences, with the best sentence. Catches paraphrase (the context says it in other words),
    which the lexical share misses; reported beside it in ``coverage.detail``."""
    if len(sentences) == 0:
        return {"soft": None, "best_cosine": None, "best_sentence": None}
    sims = sentence_vecs @ question_vec
    i = int(np.argmax(sims))
    cos = float(sims[i])
    return {"soft": round(sigmoid(slope * (cos - midpoint)), 4),
            "best_cosine": round(cos, 4), "best_sentence": sentences[i][:200]}


def redundancy_score(vectors: np.ndarray, texts: list[str], threshold: float) -> Signal:
    """Share of passages that nearly duplicate an earlier one (cosine >= threshold or word Jaccard >= 0.6)."""
    n = len(texts)
    if n < 2:
        return Signal("redundancy", None, "fewer than two passages")
    dups = []
    word_sets = [set(re.findall(r"\w+", t.lower())) for t in texts]
    for j in range(1, n):
        for i in range(j):
            cos = float(vectors[i] @ vectors[j])
            jac = len(word_sets[i] & word_sets[j]) / max(1, len(word_sets[i] | word_sets[j]))
            if cos >= threshold or jac >= 0.6:
                dups.append({"passage": j + 1, "duplicates": i + 1, "cosine": round(cos, 3), "jaccard": round(jac, 3)})
                break
    value = len(dups) / (n - 1)
    return Signal("redundancy", value, f"{len(dups)} of {n} passages repeat an earlier one", {"pairs": dups})


def grounding_score(relevances: list[float], threshold: float) -> Signal:
    """Share of retrieved passages whose reranker relevance (after sigmoid) is >= threshold."""
    if not relevances:
        return Signal("grounding", 0.0, "retrieval returned nothing", {"relevance": []})
    rel = [r for r in relevances if r >= threshold]
    value = len(rel) / len(relevances)
    return Signal("grounding", value, f"{len(rel)}/{len(relevances)} passages relevant (max relevance {max(relevances):.2f})",
                  {"relevance": [round(r, 3) for r in relevances]})


_LEADING_CITATION = re.compile(rf"^\s*(?:{_CITATION.pattern}\s*)+")
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
    from ..feedback.policy import query_features

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


def _word_spans(pieces: list[str]) -> list[tuple[str, list[int]]]:
    """The question's tokens joined into words, each with the indices of its pieces: a piece that
    starts with a space or a newline starts a word, and punctuation stands alone ("1", "9", "5",
    "0" make "1950"; " V", "arden" make "Varden"; "What", "'s" make "What's"). A piece that
    holds part of a character ("", or "\ufffd" from a backend that decodes tokens one by one)
    stays with its word."""
    out: list[tuple[str, list[int]]] = []
    prev_word = False
    for i, piece in enumerate(pieces):
        partial = piece == "" or "\ufffd" in piece
        is_word = partial or bool(re.search(r"\w", piece)) or (prev_word and piece[:1] in "'\u2019")
        if out and is_word and prev_word and not piece[:1].isspace():
            out[-1] = (out[-1][0] + piece, out[-1][1] + [i])
        else:
            out.append((piece.strip(), [i]))
        prev_word = is_word
    return out


def question_words(scored: list[tuple[str, float | None]]) -> list[tuple[str, float | None]]:
    """The question's tokens (``scored``: (piece, log p) per token, in order; log p None where it
    was not read) joined into words (see :func:`_word_spans`), each with the lowest log p among
    its pieces."""
    out = []
    for word, idx in _word_spans([p for p, _ in scored]):
        lps = [scored[i][1] for i in idx if scored[i][1] is not None]
        out.append((word, min(lps) if lps else None))
    return out


_CONTRACTION = re.compile(r"(?:n['\u2019]t|['\u2019](?:s|re|ve|m|ll|d))$")


def _content_word(word: str) -> bool:
    """A word of the question that can tell: it has terms (see :func:`claim_terms`: a single
    letter has none) and, without a contraction's ending ("what's", "didn't"), is not a stop
    word or a question word."""
    base = _CONTRACTION.sub("", word.lower().replace("\ufffd", ""))
    return bool(claim_terms(base)) and base not in STOP_WORDS and base not in QUESTION_WORDS


def _telling_words(pieces: list[str], answer: str) -> tuple[bool, list[tuple[int, list[int]]]]:
    """Whether the question has a content word, and its content words that ``answer`` does not
    repeat (a word the answer repeats is a copy of it, not evidence), each as its position among
    the question's words (:func:`_word_spans`) with its pieces' indices."""
    said = set(claim_terms(strip_citations(answer)))
    content = [(k, w, idx) for k, (w, idx) in enumerate(_word_spans(pieces)) if _content_word(w)]
    return bool(content), [(k, idx) for k, w, idx in content
                           if not set(claim_terms(_CONTRACTION.sub("", w.lower()))) <= said]


def question_fit_needs(pieces: list[str], answer: str = "") -> list[bool]:
    """Which of the question's tokens :func:`question_fit` needs a log-probability for: the
    pieces of its telling words (all tokens for a question without a content word, none when the
    answer repeats every content word). A backend computes a row of logits only for those."""
    has_content, fresh = _telling_words(pieces, answer)
    if not has_content:
        return [True] * len(pieces)
    needed = {i for _, idx in fresh for i in idx}
    return [i in needed for i in range(len(pieces))]


def question_prior_needs(pieces: list[str]) -> list[bool]:
    """Which of the question's tokens ``question_prior`` may need, before the answer is known:
    the pieces of every content word (of every token for a question without one)."""
    return question_fit_needs(pieces, "")


def question_fit(scored: list[tuple[str, float | None]] | None, answer: str = "") -> tuple[float | None, str | None]:
    """How well the question fits, from its tokens as the model read them after the passages
    (``scored``: (piece, log p) per token, log p None where it was not read; the
    ``question_prior`` feature reads them in the answer prompt, before the answer): the lowest
    log p among the question's content words (see :func:`_content_word`) that ``answer`` does not
    repeat (a word the answer repeats is read as a copy of it), clipped below at
    :data:`QUESTION_FIT_FLOOR`, with that word. None when nothing was scored, or when the answer
    repeats every content word of the question (then the read tells nothing).

    High (near 0): given the passages and the answer, the model expects every word of the
    question. Low: some word of the question is one the model would not have asked, as when the
    question names a date, a person or a relation the passages do not pair with that answer.
    """
    if not scored:
        return None, None
    has_content, fresh = _telling_words([p for p, _ in scored], answer)
    if not has_content:  # a question of stop words and question words only: every token counts
        read = [(p, lp) for p, lp in scored if lp is not None]
        if not read:
            return None, None
        piece, lowest = min(read, key=lambda t: t[1])
        return max(float(lowest), QUESTION_FIT_FLOOR), piece.strip()
    lowest_by_word = question_words(scored)
    words = [lowest_by_word[k] for k, _ in fresh if lowest_by_word[k][1] is not None]
    if not words:
        return None, None
    word, lowest = min(words, key=lambda t: t[1])
    return max(float(lowest), QUESTION_FIT_FLOOR), word


# -- the question's own constraints: dates, and whether it asks for an explanation ------------

_UNITS = "first second third fourth fifth sixth seventh eighth ninth".split()
_TEENS = ("tenth eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth "
          "twentieth").split()
_ORDINAL_WORDS = {**{w: i + 1 for i, w in enumerate(_UNITS)}, **{w: i + 10 for i, w in enumerate(_TEENS)}}
# An ordinal: "11th", "eleventh", "twenty-first", "twenty first".
_ORD = (r"(?:\d{1,2}(?:st|nd|rd|th)|(?:twenty[\s-])?(?:" + "|".join(_UNITS) + r")|(?:" + "|".join(_TEENS) + r"))")
_CENTURY_PAIR = re.compile(rf"\b(?:(between|from)\s+)?(?:the\s+)?({_ORD})\s*(and|or|to|through|until|-|\u2013)\s*"
                           rf"(?:the\s+)?({_ORD})[\s-]+centur(?:y|ies)\b", re.IGNORECASE)
_CENTURY = re.compile(rf"\b({_ORD})[\s-]+centur(?:y|ies)\b", re.IGNORECASE)
_YEAR_SPAN = re.compile(r"(?<![\d,.])\b(?:(?:between|from)\s+(\d{3,4})\s+(?:and|to|until|till)\s+(\d{3,4})|"
                        r"(\d{3,4})\s*[-\u2013]\s*(\d{3,4}))\b(?![,.]\d)", re.IGNORECASE)
_PLURAL_YEAR = re.compile(r"(?<![\d,.])\b(\d{3,4})['\u2019]?s\b")  # 1850s, 1100s, 1000's
_YEAR = re.compile(r"(?<![\d,.])\b(\d{3,4})\b(?![,.]\d)(?!\s*B\.?C)")  # not in 30,000 or 1.5; not BC
_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
# A bare number in a question is a date only after one of these ("in 1169", "on 12 May 1850",
# "May 12, 1850", "AD 1066"), and not before a unit: "380 years", "a population of 1500" and
# "after 1000 days" are not dates.
_BEFORE_YEAR = re.compile(rf"(?:\b(?:in|on|by|since|until|till|from|after|before|and|or|during|around|circa|year|"
                          rf"ad|a\.d\.|ca\.|c\.)|\b(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?,?)?|"
                          rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\.?,?)\s+$", re.IGNORECASE)
#: A year after a preposition and "the" ("in the 2023 storm", "during the 1887 gale"): four digits
#: only, since "in the 600 Club" or "on the 900 pages" count or name things far more often.
_BEFORE_THE_YEAR = re.compile(r"\b(?:in|on|by|since|until|till|from|after|before|during|around)\s+the\s+$",
                              re.IGNORECASE)
_UNIT_AFTER = re.compile(r"\s*(?:years?|months?|weeks?|days?|hours?|men|people|soldiers|troops|ships|percent|%|"
                         r"miles?|km|kilomet(?:re|er)s?|met(?:re|er)s?|feet|foot|pounds?|dollars?|acres?|"
                         r"pages?|chapters?|guests?|block|range|series|mark|cc|square)\b",
                         re.IGNORECASE)
YEAR_RANGE = (500, 2100)  # a bare number is read as a year only inside this range


def _ordinal(text: str) -> int:
    """The number of an ordinal as :data:`_ORD` matches it ("11th", "eleventh", "twenty first")."""
    t = text.lower()
    if t[0].isdigit():
        return int(re.match(r"\d+", t).group(0))
    if t.startswith("twenty") and len(t) > len("twenty"):
        return 20 + _ORDINAL_WORDS[t[len("twenty") + 1:]]
    return _ORDINAL_WORDS[t]


def _century(n: int) -> tuple[int, int]:
    """The years of the n-th century as "1000s" reads them: the 11th is 1000–1099."""
    return 100 * (n - 1), 100 * n - 1


def dates_in(text: str, question: bool = False) -> list[tuple[str, int, int]]:
    """The dates ``text`` states, each as (its text, first year, last year): a century ("11th
    century", "eleventh century": 1000–1099, as the "1000s" are read), two centuries ("the 10th
    and 11th centuries": each; "between the 10th and 13th centuries", "12th-13th centuries": the
    span), a decade or a century written as a plural year ("1850s": 1850–1859; "1100s", "1000's":
    1100–1199, 1000–1099), a span of years ("between 1000 and 1300", "from 1066 to 1087",
    "1066–1087"), and a year (a number of 3–4 digits within :data:`YEAR_RANGE`, not part of a
    larger number, not BC). A span reaching outside that range is not read at all. With
    ``question`` a bare year counts only after a preposition (also "in the"), a month or "AD" ("in 1169", "on 12
    May 1850") and not before a unit, so that the numbers a question counts ("380 years", "a
    population of 1500") are not read as dates."""
    out: list[tuple[str, int, int]] = []
    taken: list[tuple[int, int]] = []

    def free(m: re.Match) -> bool:
        return not any(a < m.end() and m.start() < b for a, b in taken)

    for m in _CENTURY_PAIR.finditer(text):
        a, b = _ordinal(m.group(2)), _ordinal(m.group(4))
        taken.append(m.span())
        if m.group(3).lower() in ("and", "or") and not m.group(1):
            out += [(m.group(0), *_century(a)), (m.group(0), *_century(b))]
        else:
            out.append((m.group(0), _century(min(a, b))[0], _century(max(a, b))[1]))
    for m in _CENTURY.finditer(text):
        if free(m):
            out.append((m.group(0), *_century(_ordinal(m.group(1)))))
            taken.append(m.span())
    for m in _YEAR_SPAN.finditer(text):
        if not free(m):
            continue
        taken.append(m.span())  # read as a span or not at all: its ends are not bare years
        lo, hi = sorted(int(g) for g in m.groups() if g is not None)
        if YEAR_RANGE[0] <= lo and hi <= YEAR_RANGE[1]:
            out.append((m.group(0), lo, hi))
    for m in _PLURAL_YEAR.finditer(text):
        if free(m):
            n = int(m.group(1))
            taken.append(m.span())
            out.append((m.group(0), n, n + 99 if n % 100 == 0 else n + 9 if n % 10 == 0 else n))
    for m in _YEAR.finditer(text):
        if not free(m):
            continue
        n = int(m.group(1))
        if not YEAR_RANGE[0] <= n <= YEAR_RANGE[1]:
            continue
        if question:
            before = text[:m.start()]
            after_the = len(m.group(1)) == 4 and _BEFORE_THE_YEAR.search(before)
            if not (_BEFORE_YEAR.search(before) or after_the) or _UNIT_AFTER.match(text, m.end()):
                continue
        out.append((m.group(0), n, n))
    return out


def dates_unstated(question: str, answer: str, passages: list[Passage], citations: tuple[int, ...] = (),
                   refused: bool = False) -> Signal:
    """``dates_unstated``: the share of the question's dates (see :func:`dates_in`) that the
    answer's evidence does not state within the same period (a year inside the question's
    century, decade or span of years, a century that holds its year, the same year). The evidence
    is the passages the answer cites; without a citation, the passages that contain the answer's
    text; failing that, those sharing the most of the answer's content words (the question's
    dates left out); failing that (no word shared), all passages.

    0.0: every date the question names is in the evidence. 1.0: none is, as when the question asks
    what happened "in the 10th century" and the passage behind the answer tells of 1185. None for
    a refusal, a question without a date, or no passages (the confidence then reads it as 0.0).
    """
    asked = dates_in(question, question=True)
    if refused or not asked or not passages:
        reason = "refusal" if refused else "the question names no date" if not asked else "no passages"
        return Signal("dates_unstated", None, reason)
    by_num = {p.number: p for p in passages}
    evidence = [by_num[n] for n in citations if n in by_num]
    source = "cited passages"
    if not evidence:
        said = " ".join(strip_citations(answer).split()).strip(" .,;:").lower()
        evidence = [p for p in passages if said and said in " ".join(p.text.split()).lower()]
        source = "passages holding the answer"
    if not evidence:
        # The passages the answer's words come from: those sharing the most of its content terms,
        # the question's dates left out (an answer that repeats "in the 10th century" must not
        # find its evidence in whichever passage names that century).
        date_terms = {t for text, _, _ in asked for t in claim_terms(text)}
        terms = set(claim_terms(strip_citations(answer))) - date_terms
        shared = [len(terms & set(claim_terms(p.text))) for p in passages]
        best = max(shared)
        if best:
            evidence = [p for p, n in zip(passages, shared) if n == best]
            source = "passages sharing the most of the answer's words"
    if not evidence:
        evidence, source = passages, "passages given to the generator"
    found = [d for p in evidence for d in dates_in(p.text)]
    stated = [(lo, hi) for _, lo, hi in found]
    unstated = [t for t, lo, hi in asked if not any(a <= hi and lo <= b for a, b in stated)]
    return Signal("dates_unstated", len(unstated) / len(asked),
                  f"{len(unstated)} of {len(asked)} date(s) of the question not stated in the {source}",
                  {"dates": [t for t, _, _ in asked], "unstated": unstated, "evidence": [p.number for p in evidence],
                   "source": source, "evidence_dates": list(dict.fromkeys(t for t, _, _ in found))[:5]})


# "How" asks for an explanation or a manner when a verb follows it ("how did", "how was", "how
# come"), not when a word of quantity or degree does ("how many", "how long", "how fast").
_VERB_AFTER_HOW = frozenset("did does do is are was were has have had can could would will should might may must "
                            "come s d re ll ve".split())  # the last five: "how's", "how'd", ...
_ASKING = frozenset({"what", "which", "who", "whom", "whose", "where", "when", "why", "how"})


def explanation_question(question: str) -> float:
    """``explanation``: 1.0 if the question asks for an explanation, else 0.0: its first question
    word is "why", or "how" followed by a verb ("how did", "how was", "how come"; not "how many",
    "how long", "how fast"). When the question has a sentence before it ("X did Y. Why ...?"),
    the last sentence's question word counts (sentences split as the chunkers split them, so
    "Dr." ends none). Such answers are sentences of reasoning, which neither a short gold answer
    nor the claim checks confirm well (docs/results.md)."""
    text = question.strip()
    spans = split_sentences(text) if text else []
    last = text[spans[-1][0]:spans[-1][1]] if len(spans) > 1 else text
    for part in (last, text) if last != text else (text,):
        toks = re.findall(r"[a-z]+", part.lower())
        for i, t in enumerate(toks):
            if t == "why":
                return 1.0
            if t == "how":
                return 1.0 if i + 1 == len(toks) or toks[i + 1] in _VERB_AFTER_HOW else 0.0
            if t in _ASKING:
                return 0.0
    return 0.0


# -- the scorer: model calls wired to the pure functions -----------------------------------

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
