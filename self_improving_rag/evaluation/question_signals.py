"""Signals read from the question itself: how well its words fit the passages as the generator
reads them (``question_fit``, ``question_prior``: the lowest log-probability of a telling word),
and whether it asks for an explanation (``explanation``).
"""

from __future__ import annotations

import re

from ..confidence import QUESTION_FIT_FLOOR
from ..ingestion.sentences import split_sentences
from ..text import QUESTION_WORDS, STOP_WORDS, claim_terms, strip_citations

__all__ = ["explanation_question", "question_fit", "question_fit_needs", "question_prior_needs", "question_words"]


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
