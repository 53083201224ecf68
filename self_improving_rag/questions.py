"""A question as the engine takes it: checked and whitespace-normalised on the way in, and an
answer that only restates it (or says nothing) told apart from an answer."""

from __future__ import annotations

import re

from .errors import InputError

MAX_QUESTION_CHARS = 2000


def check_question(question: str) -> str:
    """A usable question, whitespace-normalised; InputError otherwise."""
    if not isinstance(question, str) or not question.strip():
        raise InputError("the question is empty; write the question in words, e.g. \"Who is Holmes?\"")
    q = " ".join(question.split())
    try:
        q.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("the question holds bytes that are not valid UTF-8 (a terminal or file in another "
                         "encoding); type it again, or convert the text to UTF-8") from None
    if len(q) > MAX_QUESTION_CHARS:
        raise InputError(f"the question has {len(q)} characters, more than {MAX_QUESTION_CHARS}; shorten it to one question")
    if not any(ch.isalnum() for ch in q):
        raise InputError("the question has no letters or digits; ask a question in words")
    return q


# Words that, alone, name nothing: pronouns, auxiliaries, articles. An answer made only of them
# (or of single letters) cannot be checked against the passages.
_EMPTY_WORDS = frozenset(
    "he she it they him her them his hers its their theirs this that these those i you we me us my your our "
    "did does do done was were is are be been being has have had the a an".split())


def _says_nothing(text: str) -> bool:
    words = re.findall(r"[^\W\d_]+|\d+", text.lower())
    return all(w in _EMPTY_WORDS or (len(w) == 1 and not w.isdigit()) for w in words)


def restates_question(question: str, answer: str) -> bool:
    """An answer that only echoes the question, or has no content word at all, says nothing new:
    no answer.

    It is an echo when every content word of the answer comes from the question ("Who killed
    Drebber?" -> "Drebber"); it is empty when it is made only of pronouns, auxiliaries, articles
    or single letters ("He did", "It was him", "x": nothing in it can be checked against the
    passages; "One", "Once", "No one" are answers). Both are answers when the question offers a choice
    ("... by Venn or by Lune?" -> "Venn", "the former") or asks yes or no ("Did Holmes go to
    Paris?" -> "Holmes went to Paris", "No").
    """
    from .query import query_features
    from .generation.prompts import strip_citations
    from .text import content_terms

    text = strip_citations(answer)
    terms = set(content_terms(text))
    asked = set(content_terms(question))
    if terms and not terms <= asked:
        return False
    if not terms and not _says_nothing(text):
        return False  # "One", "Once", "No one", "Up": short answers made of common words
    offers_choice = re.search(r"\bor\b", question, re.I) is not None
    return not offers_choice and query_features(question).query_class != "yes-no"
