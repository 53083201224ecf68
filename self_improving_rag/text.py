"""Lexical helpers shared by BM25, coverage and faithfulness: content terms, stemmed, and the
citation marks of an answer."""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

# A decimal number ("3.5") is one token: "3.5 pounds" and "5.3 pounds" must not share their terms.
_TOKEN = re.compile(r"(?u)\b\d+(?:\.\d+)+\b|\b\w\w+\b|\b\d\b")

# A compact English stop list: function words that carry no evidence of content.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should
so some such than that the their theirs them themselves then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves did does said says say tell told one upon also may might must shall us
""".split())

QUESTION_WORDS = frozenset("what which who whom whose when where why how name names named".split())


# Numbers written as words and as digits are one term when an answer is compared with text
# ("7 [3]" is supported by "seven wives"; "fourteen pounds" is the gold "14 pounds").
_CARDINALS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
              "fifteen sixteen seventeen eighteen nineteen twenty").split()
_ORDINALS = ("zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
             "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth").split()
_SUFFIX = {1: "st", 2: "nd", 3: "rd"}
# "one", "first" and "second" stay words: "no one", "at first", "a second" are rarely numbers.
NUMBER_WORDS: dict[str, str] = {
    **{w: str(i) for i, w in enumerate(_CARDINALS) if w != "one"},
    **{w: f"{i}{_SUFFIX.get(i if i < 4 or i > 20 else 0, 'th')}" for i, w in enumerate(_ORDINALS)
       if w not in ("zeroth", "first", "second")},
    **{w: str(10 * i) for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)},
    "hundred": "100", "thousand": "1000",
}


def number_word_to_digits(word: str) -> str:
    """``word`` (lower case) written in digits when it is a number word, else unchanged."""
    return NUMBER_WORDS.get(word, word)


@lru_cache(maxsize=1)
def stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (two or more characters, a single digit, or a decimal number)."""
    return _TOKEN.findall(text.lower())


def content_terms(text: str) -> list[str]:
    """Stemmed words of ``text`` without stop words, in order."""
    ws = [w for w in words(text) if w not in STOP_WORDS]
    return stemmer().stemWords(ws) if ws else []


def term_words(text: str) -> dict[str, str]:
    """Each content term of ``text`` with the first word that gave it ("xyzzi" -> "xyzzy"), for
    messages that name terms: users read their own words, not stems."""
    out: dict[str, str] = {}
    for w in words(text):
        if w not in STOP_WORDS:
            out.setdefault(stemmer().stemWord(w), w)
    return out


_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_DIGIT_WORDS = {w: i for i, w in enumerate("one two three four five six seven eight nine".split(), start=1)}
_DIGIT_ORDINALS = {w: i for i, w in enumerate("first second third fourth fifth sixth seventh eighth ninth".split(),
                                              start=1)}
_COMPOUND_NUMBER = re.compile(rf"\b({'|'.join(_TENS)})[-\s]({'|'.join(_DIGIT_WORDS)}|{'|'.join(_DIGIT_ORDINALS)})\b",
                              re.IGNORECASE)
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,]|\.\d)")  # 1,150 and 30,000, not 1,2 or 1.5
_OLD_ORDINAL = re.compile(r"\b(\d*)(?<!1)([23])d\b")  # "3d", "22d" (Doyle's "the 3d of December"); not 13d


def _suffix(n: int) -> str:
    return _SUFFIX.get(n % 10, "th") if n % 100 not in (11, 12, 13) else "th"


def _number_forms(text: str) -> str:
    """``text`` with a number written in other ways as :func:`claim_terms` reads its digits:
    "twenty-one" as 21, "twenty-first" as 21st, "1,150" as 1150, "3d" as 3rd."""
    def compound(m: re.Match) -> str:
        tens, unit = m.group(1).lower(), m.group(2).lower()
        if unit in _DIGIT_WORDS:
            return str(_TENS[tens] + _DIGIT_WORDS[unit])
        n = _TENS[tens] + _DIGIT_ORDINALS[unit]
        return f"{n}{_suffix(n)}"

    text = _COMPOUND_NUMBER.sub(compound, text)
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    return _OLD_ORDINAL.sub(lambda m: f"{m.group(1)}{m.group(2)}{_SUFFIX[int(m.group(2))]}", text)


def claim_terms(text: str) -> list[str]:
    """Content terms for comparing an answer with text: as :func:`content_terms`, with number
    words in digits ("seven" and "7" are one term; "one" stays a stop word; "twenty-one" is 21,
    "1,150" is 1150, Doyle's "3d" is 3rd). Not used for the BM25 index, whose stored terms must
    not change."""
    ws = [number_word_to_digits(w) for w in words(_number_forms(text)) if w not in STOP_WORDS]
    return stemmer().stemWords(ws) if ws else []


def capitalised_terms(text: str) -> set[str]:
    """Stems of words written with a capital inside the text (likely names)."""
    out = set()
    toks = re.findall(r"(?u)\b\w+\b", text)
    for i, t in enumerate(toks):
        if i > 0 and t[:1].isupper() and t.lower() not in STOP_WORDS and t.lower() not in QUESTION_WORDS:
            out.add(stemmer().stemWord(t.lower()))
    return out


# "[2]", "[1, 3]", "[1-3]", and the same with the prompts' own word for a passage ("[Passage 2]",
# "[passages 1, 2]"), which small models copy from the numbered list they were given.
_CITE_WORD = r"(?:(?i:passages?)\s*)?"
#: A citation mark of an answer, its passage numbers in group 1.
CITATION = re.compile(rf"\[{_CITE_WORD}(\d{{1,3}}(?:\s*[,;-]\s*{_CITE_WORD}\d{{1,3}})*)\]")


def strip_citations(text: str) -> str:
    """``text`` without its citation marks (:data:`CITATION`), whitespace runs made one space."""
    return " ".join(CITATION.sub("", text).split()).replace(" .", ".").replace(" ,", ",")
