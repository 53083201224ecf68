"""Named prompt templates (package data) and the citation/refusal parser.

Passages are quoted as data: each is fenced by its number and its text has anything that
looks like a passage marker or a chat-control token neutralised, so text inside a document
cannot pose as a new passage or as an instruction from the system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from ..text import CITATION, strip_citations
from ..types import Passage
from .guard import withhold_instructions

PROMPTS = ("base", "cite_then_answer", "strict")
REFUSAL_PHRASE = "I cannot answer this from the documents."

_REFUSAL_PATTERNS = re.compile(
    r"(cannot answer|can't answer|can not answer|unable to answer|not (?:stated|mentioned|contained|provided|given|found|answerable)"
    r"|no (?:information|mention|answer)|(?:do|does|did)(?:n't| not) (?:contain|mention|say|state|provide|specify|have enough)"
    r"|\b(?:i|we) (?:do|did)(?:n't| not) know"
    r"|(?:is|are|was|were)(?:n't| not) (?:stated|mentioned|given|provided|specified|available)"
    r"|(?:is|are|was|were)(?:n't| not) (?:in|found in) the (?:passages?|documents?|texts?|context)"
    r"|not possible to (?:answer|determine)"
    r"|\b(?:i|we) (?:cannot|can't|can not|am unable to|are unable to|could not|couldn't) (?:determine|tell|say|find)"
    r"|insufficient information|not enough information|cannot be determined|can't be determined"
    r"|none of the (?:passages|documents|texts)|^unknown\W*$)",
    re.IGNORECASE,
)
#: Declines whatever the reply cites: first-person ones ("I don't know [1].") and a sentence that
#: is nothing but a decline ("Cannot be determined [3].", "Not stated [1].", "Unknown [1].").
_FIRM_REFUSAL = re.compile(
    r"^(?:i|we)\b.{0,40}\b(?:cannot|can't|can not|unable to|do not|don't|did not|didn't|could not|couldn't)"
    r" (?:answer|know|determine|tell|say|find)"
    r"|^(?:it |this |that |the answer |the name |the date |the information )?(?:is |was )?(?:not (?:stated|mentioned|specified|given|known)"
    r"|cannot be determined|can't be determined|not possible to (?:answer|determine)|unknown|no answer"
    r"|insufficient information|not enough information)\W*$",
    re.IGNORECASE,
)
#: Otherwise a reply that cites a passage is an answer ("The will was not found [2].") unless it
#: speaks of the passages themselves ("The passages do not say [1].").
_SOURCE_WORDS = re.compile(r"\b(?:passages?|documents?|context|texts?|sources?|provided information)\b", re.IGNORECASE)
_CONTROL = re.compile(r"<\|[^|>]{1,40}\|>|\[/?INST\]|</?s>")


@dataclass(frozen=True)
class Template:
    name: str
    system: str
    user: str


@lru_cache(maxsize=None)
def load_template(name: str) -> Template:
    """A packaged template by name."""
    known = (*PROMPTS, "judge", "keywords")
    if name not in known:
        raise ValueError(f"unknown prompt {name!r}; choose one of {', '.join(PROMPTS)}")
    data = yaml.safe_load(resources.files("self_improving_rag").joinpath(f"prompts/{name}.yaml").read_text("utf-8"))
    return Template(name=name, system=data.get("system", "").strip(), user=data["user"])


def quote_passage_text(text: str) -> str:
    """Neutralise text that could pose as a passage marker or a chat-control token, and withhold
    sentences addressed to an AI (:mod:`.guard`): the model reads passages as data only."""
    text, _ = withhold_instructions(text)
    text = _CONTROL.sub(" ", text)
    # A document line starting with "[3]" would look like a new passage: mark it as quoted text.
    text = re.sub(r"(?m)^\s*\[(\d+)\]", r"(\1)", text)
    return " ".join(text.split())


def format_passages(passages: tuple[Passage, ...] | list[Passage]) -> str:
    """Numbered passages, text only: section labels cost ~15 prompt tokens each and a small model
    tends to copy them as answers (the sources shown to the user keep them)."""
    return number_texts([p.text for p in passages], [p.number for p in passages])


def number_texts(texts: list[str], numbers: list[int] | None = None) -> str:
    """Texts as the prompt shows passages: one per line, each after its number in brackets."""
    numbers = numbers if numbers is not None else list(range(1, len(texts) + 1))
    return "\n".join(f"[{n}] {quote_passage_text(t)}" for n, t in zip(numbers, texts))


def build_messages(template: str, question: str, passages, **extra: str) -> list[dict[str, str]]:
    """Chat messages: system, then the passages before the question (shared KV-cache prefix)."""
    t = load_template(template)
    user = t.user.format(passages=format_passages(passages), question=" ".join(question.split()), **extra)
    return [{"role": "system", "content": t.system}, {"role": "user", "content": user}]


def build_judge_messages(answer_prompt: str, question: str, passages, claim: str) -> list[dict[str, str]]:
    """The answer prompt's system message and passages, then the yes/no question about a claim.

    Sharing that prefix token for token lets the backend reuse its KV cache: a judgement
    costs only the tokens of its own tail (and the question, which the answer prompt also
    ends with, is often still cached from it).
    """
    t = load_template(answer_prompt)
    head, _, _ = t.user.partition("{passages}")
    tail = load_template("judge").user.format(question=" ".join(question.split()), claim=" ".join(claim.split()))
    user = head + format_passages(passages) + "\n\n" + tail
    return [{"role": "system", "content": t.system}, {"role": "user", "content": user}]


def question_span(question: str) -> str:
    """The question as the prompts place it, with the space before it (which the tokenizer
    joins to its first word): the text whose tokens the question reads score."""
    return " " + " ".join(question.split())


def parse_citations(text: str, n_passages: int | None = None) -> tuple[int, ...]:
    """Passage numbers cited as [n], [n, m] or [n-m] (each number may follow the word "Passage"),
    in order of first mention, deduplicated.

    Numbers outside 1..n_passages (when given) are dropped: a model may invent them.
    """
    out: list[int] = []
    for m in CITATION.finditer(text):
        for part in re.split(r"\s*[,;]\s*", re.sub(r"(?i)passages?", "", m.group(1))):
            if "-" in part:
                ends = [int(x) for x in re.split(r"\s*-\s*", part) if x.strip().isdigit()]
                a_i, b_i = ends[0], ends[-1]
                nums = range(a_i, b_i + 1) if 0 < b_i - a_i < 20 else ends
            else:
                nums = [int(part)]
            for n in nums:
                if (n_passages is None or 1 <= n <= n_passages) and n not in out:
                    out.append(n)
    return tuple(out)


def drop_unknown_citations(text: str, n_passages: int) -> str:
    """``text`` without the citation marks that name no passage given ("[9]" of five
    passages): a reader would look for a source that does not exist. A mark with at least one
    real passage ("[2, 9]") stays as written."""
    def keep(m: re.Match) -> str:
        return m.group(0) if parse_citations(m.group(0), n_passages) else ""

    out = CITATION.sub(keep, text)
    return out if out == text else re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", out)).strip()


def is_refusal(text: str) -> bool:
    """Whether an answer declines to answer (the fixed phrase or a paraphrase of it)."""
    t = text.strip().replace("\u2019", "'")
    if not re.search(r"\w", strip_citations(t)):
        return True  # nothing but citations or punctuation: no answer was given
    if REFUSAL_PHRASE.lower().rstrip(".") in t.lower():
        return True
    # A paraphrased refusal is short and declines in its first sentence; an answer that states
    # something and then adds a caveat ("... [1]. The passages do not mention its cost.") is an answer.
    from ..ingestion.sentences import split_sentences

    spans = split_sentences(t)  # "Mr. Holmes's address is not mentioned." is one sentence
    first = strip_citations(t[spans[0][0]:spans[0][1]] if spans else t).strip()
    if len(t) >= 240:
        return False
    if _FIRM_REFUSAL.search(first):
        return True
    if CITATION.search(t) and not _SOURCE_WORDS.search(first):
        return False
    return bool(_REFUSAL_PATTERNS.search(first))
