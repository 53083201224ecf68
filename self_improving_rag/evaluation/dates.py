"""``dates_unstated``: the dates a question names (years, decades, centuries, spans) that the
answer's evidence does not state, and the reader of dates in text behind it.
"""

from __future__ import annotations

import re

from ..text import claim_terms, strip_citations
from ..types import Passage, Signal

__all__ = ["YEAR_RANGE", "dates_in", "dates_unstated"]

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
