"""What is known of a question before it is answered: its class (who, what, ..., yes-no) and shape.

The policy keys its memory by the class; the faithfulness check reads a "yes" to a yes-no
question as the question's statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["QUERY_CLASSES", "QueryFeatures", "query_features"]

QUERY_CLASSES = ("who", "what", "where", "when", "why", "how", "yes-no", "other")
_WH = {"who": "who", "whom": "who", "whose": "who", "what": "what", "which": "what", "where": "where",
       "when": "when", "why": "why", "how": "how"}
# An opening auxiliary, with or without a contracted "not" ("Didn't", "Isn't", "Won't", "Cannot").
_YES_NO = re.compile(r"^(?:(?:is|are|was|were|do|does|did|could|would|has|have|had|should|might|must|need)"
                     r"(?:n['’]t)?|am|can(?:not|['’]t)?|will|won['’]t|shall|shan['’]t|may)\b", re.I)


@dataclass(frozen=True)
class QueryFeatures:
    """What the policy knows of a question before answering it."""

    query_class: str
    n_words: int
    n_names: int
    multi_part: bool


def query_features(question: str) -> QueryFeatures:
    """The question's class and shape.

    A question that opens with an auxiliary verb, negated or not ("Did Holmes know who ...?",
    "Didn't he ...?", "Cannot it ...?"), is ``yes-no`` whatever wh-word follows; otherwise
    the first wh-word among the first words names the class ("In what year ...?" is
    ``what``), matched as a whole word ("However ..." is not ``how``); ``which`` counts as
    ``what``, ``whom`` and ``whose`` as ``who``.
    """
    q = question.strip()
    words = re.findall(r"[\w'’-]+", q)
    low = q.lower()
    # "What's", "who’d": the wh-word without its contracted verb.
    lead = [re.sub(r"['’](s|d|re|ll|ve)$", "", w.lower()) for w in words[:8]]
    cls = "other"
    if _YES_NO.match(low):
        cls = "yes-no"
    else:
        for w in lead:
            if w in _WH:
                cls = _WH[w]
                break
    names = sum(1 for i, w in enumerate(words) if i > 0 and w[:1].isupper())
    return QueryFeatures(cls, len(words), names, " and " in low and "?" in q[:-1] or q.count("?") > 1)
