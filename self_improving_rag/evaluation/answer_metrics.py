"""Grading answers and refusals against gold: SQuAD-style normalisation, exact match, token F1,
containment, and refusal precision/recall.

Every function is deterministic and side-effect free. A value that is undefined for
the given input (no denominator, a single class, an empty list) is ``None`` -- never a
silent 0.0 -- and the dict-returning functions say why under ``"notes"``. Bad arguments
(mismatched lengths, an empty gold list) raise ``ValueError``.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..text import number_word_to_digits

__all__ = ["normalize_answer", "exact_match", "token_f1", "contains_gold", "refusal_metrics"]

# --------------------------------------------------------------------------- answers

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCT = frozenset(string.punctuation)


#: Hyphens (ASCII, U+2010, and what NFKC leaves of U+2011): deleted like other punctuation, so
#: "night‐jar" and "night-jar" both read "nightjar"; the long dashes become a space.
_HYPHENS = frozenset("-\u2010\u2011")


def _strip_punct_char(ch: str) -> str:
    # Long dashes join words in 19th-century prose ("Holmes—the"); deleting them would glue
    # the words together, so they become a space. Other punctuation is deleted as in SQuAD.
    if ch == "\u00ad":  # a soft hyphen (HTML's &shy;) marks where a word may break: not a character
        return ""
    cat = unicodedata.category(ch)
    if cat == "Pd" and ch not in _HYPHENS:
        return " "
    if ch in _ASCII_PUNCT or cat.startswith("P"):
        return ""
    return ch


def normalize_answer(s: str) -> str:
    """SQuAD-style answer normalisation.

    Steps: Unicode NFKC; lowercase; delete punctuation (ASCII ``string.punctuation`` and
    every Unicode ``P*`` character, so curly quotes and ellipses go too; long dashes
    become a space); drop the articles *a*, *an*, *the*; collapse whitespace; number words
    from two to twenty, the tens, "hundred", "thousand" and the ordinals from third to twentieth
    in digits ("seven" → "7", "third" → "3rd"; "one", "first" and "second" stay words, as in "no
    one" or "at first"). The last step is not in the official SQuAD script: "7"
    answers "how many wives" as well as "seven" does.

    >>> normalize_answer("“The Book of Life,”")
    'book of life'
    >>> normalize_answer("about seven")
    'about 7'
    """
    s = unicodedata.normalize("NFKC", s).lower()
    s = "".join(_strip_punct_char(ch) for ch in s)
    s = _ARTICLES.sub(" ", s)
    return " ".join(number_word_to_digits(w) for w in s.split())


def _gold_list(golds: Sequence[str] | str) -> list[str]:
    # A bare string is one gold answer, not a sequence of one-character answers.
    gold_list = [golds] if isinstance(golds, str) else list(golds)
    if not gold_list:
        raise ValueError(
            "golds is empty: answer metrics are undefined for unanswerable questions; "
            "score those with refusal_metrics"
        )
    return gold_list


def exact_match(pred: str, golds: Sequence[str] | str) -> float:
    """EM = max over golds g of [normalize(pred) == normalize(g)], in {0.0, 1.0}."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _gold_list(golds)))


def _f1_tokens(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        # SQuAD convention: two empty answers agree; one empty answer shares nothing.
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str, golds: Sequence[str] | str) -> float:
    """Token F1 = max over golds of 2PR / (P + R) on normalised whitespace tokens.

    With c = |tokens(pred) ∩ tokens(gold)| counted as a multiset, P = c / |pred| and
    R = c / |gold|. If either side normalises to nothing, F1 is 1 when both do, else 0.
    """
    p = normalize_answer(pred).split()
    return max(_f1_tokens(p, normalize_answer(g).split()) for g in _gold_list(golds))


def contains_gold(pred: str, golds: Sequence[str] | str) -> float:
    """1.0 if some normalised gold occurs in the normalised prediction on token boundaries.

    Containment is checked as ``" " + gold + " " in " " + pred + " "`` so the gold
    "eloi" does not match inside "eloise". A gold that normalises to nothing (e.g. "The")
    counts only for a prediction that normalises to nothing too, so EM <= contains.
    """
    p = normalize_answer(pred)
    padded = f" {p} "
    for g in _gold_list(golds):
        n = normalize_answer(g)
        if (n and f" {n} " in padded) or (not n and not p):
            return 1.0
    return 0.0


# --------------------------------------------------------------------------- refusals


def _as_bools(name: str, values: Sequence[Any]) -> list[bool]:
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or v in (0, 1):
            out.append(bool(v))
        else:
            raise ValueError(f"{name} must hold booleans or 0/1, got {v!r}")
    return out


def _ratio(num: int, den: int, what: str, notes: dict[str, str], key: str) -> float | None:
    if den == 0:
        notes[key] = f"undefined: {what} is zero"
        return None
    return num / den


def refusal_metrics(refused: Sequence[bool], answerable: Sequence[bool]) -> dict[str, Any]:
    """Quality of refusing unanswerable questions (the positive class is "unanswerable").

    With TP = refused ∧ unanswerable:
      precision = TP / #refused, recall = TP / #unanswerable, F1 = 2PR / (P + R),
      false_refusal_rate = #(refused ∧ answerable) / #answerable.
    A rate with a zero denominator is ``None`` and ``notes`` says why; F1 is ``None``
    when P or R is, and 0.0 when P + R = 0.
    """
    if len(refused) != len(answerable):
        raise ValueError(f"refused has {len(refused)} items but answerable has {len(answerable)}")
    r = _as_bools("refused", refused)
    a = _as_bools("answerable", answerable)
    tp = sum(ri and not ai for ri, ai in zip(r, a))
    wrong_refusals = sum(ri and ai for ri, ai in zip(r, a))
    n_refused = sum(r)
    n_answerable = sum(a)
    n_unanswerable = len(a) - n_answerable
    notes: dict[str, str] = {}
    precision = _ratio(tp, n_refused, "the number of refusals", notes, "precision")
    recall = _ratio(tp, n_unanswerable, "the number of unanswerable questions", notes, "recall")
    if precision is None or recall is None:
        f1 = None
        notes["f1"] = "undefined: precision or recall is undefined"
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    frr = _ratio(wrong_refusals, n_answerable, "the number of answerable questions", notes, "false_refusal_rate")
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "false_refusal_rate": frr,
        "n": len(r),
        "n_refused": n_refused,
        "n_unanswerable": n_unanswerable,
        "n_answerable": n_answerable,
        "notes": notes,
    }
