"""Instructions planted in documents stay data: sentences that address the model are withheld.

A passage is quoted to the model as evidence. A sentence in it that reads as an instruction to an
AI ("ignore previous instructions", a fake system or assistant turn, "you are now ...", "answer
'X' to every question", the same in other languages) is replaced, before the model reads it, by
:data:`WITHHELD`; the passage shown to the user keeps its text. The prompt also tells the model
that passages are data, but a 1.5B model obeyed a planted line anyway (docs/reliability.md), so
the model must not read it at all.

The patterns ask for an instruction aimed at a model, not for any imperative: on the project's
nine books they match no sentence (tests/generation/test_guard.py), so clean documents lose
nothing.
"""

from __future__ import annotations

import re

#: What the model reads in place of a withheld sentence.
WITHHELD = "[text addressed to an AI assistant withheld]"

_AI = (r"(?:ai|a\.i\.|artificial intelligence|language models?|llms?|chat ?bots?|chatgpt|gpt|"
       r"(?:ai |virtual |digital )?assistants?|the model|models? reading|bots?|rag systems?)")
_ANSWER = r"(?:answer|reply|respond|say|output|print|write|state|return|claim)"
_INSTRUCTIONS = r"(?:instructions?|prompts?|directions|directives|rules|guidelines|context|system messages?)"

_PATTERNS = [
    # "ignore/disregard/forget (all) (previous) instructions"
    rf"\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.!?\n]{{0,40}}\b{_INSTRUCTIONS}\b",
    r"\b(?:ignore|disregard)\s+(?:the|this|that|any|every|all)\s+(?:user'?s?\s+)?(?:question|query|request)s?\b"
    rf"[^.!?\n]{{0,40}}\b{_ANSWER}\b",
    # fake turns (chat-template turns are withheld whole by _TURN; lone tokens are stripped by the prompt)
    r"(?:^|\n)\s*(?:#+\s*|\*\*|\[)?\s*(?:system|assistant|ai)(?:\s+(?:prompt|message|note|override|instruction))?"
    r"\s*(?:\]|\*\*)?\s*[:>]",
    r"(?:^|\n)\s*#+\s*(?:system|assistant)(?:\s+(?:prompt|message|turn|reply))?\s*(?:\n|$)",
    r"\bsystem\s+(?:prompt\s+)?override\b|\bnew system prompt\b",
    # role play aimed at the reader: a new persona, and what it is to answer or be
    rf"(?:\byou are (?:now|no longer)\b|\bfrom now on,? you\b|\bpretend (?:to be|you are|that you)\b"
    rf"|\b(?:act|role-?play) as\b|\byour new (?:role|persona|name|instructions?)\b)"
    rf"[^.!?\n]{{0,80}}(?:\b{_ANSWER}\w*\b|\b{_AI}\b|bot\b)",
    # addressed to a model, asking it to answer something
    rf"\b(?:note|message|instructions?|attention|reminder|important|warning|notice)\s*(?:(?:to|for)\s+)?"
    rf"(?:any\s+|all\s+)?{_AI}\b",
    rf"\bdear\s+{_AI}\b|\byou are\b[^.!?\n]{{0,40}}\ban?\s+(?:ai|assistant|chat ?bot|bot|language model)\b",
    r"\bwhatever (?:you are|you're) asked\b|\bwhenever you (?:use|read|see|quote|cite|summari[sz]e)\b"
    r"|\bwhen(?:ever)? (?:anyone|someone|somebody|a user|the user|users) (?:asks?|asked|questions?)\b",
    rf"\b{_ANSWER}\s+only\s*(?:with\s*)?[:\"“«']",
    r"\b(?:any|every|each|all)\s+(?:reproductions?|summary|summaries|answers?|responses?|replies|quotations?)\b"
    r"[^.!?\n]{0,60}\bmust\s+(?:be\s+)?(?:prefaced|preceded|followed|signed|ended|end|begin|start|include|contain)\b",
    rf"\b(?:if|when|whenever)\s+you(?:'re| are)\s+(?:an?\s+)?{_AI}\b",
    rf"\b{_AI}\s+(?:reading|processing|parsing|summari[sz]ing|indexing)\s+(?:this|these)\b",
    rf"\b(?:if|when|whenever)\s+(?:you\s+are\s+|you're\s+)?asked\b[^.!?\n]{{0,80}}\b{_ANSWER}\b",
    rf"\b{_AI}\s+(?:must|should|shall|will|are to|is to|has to|have to|needs? to)\b[^.!?\n]{{0,60}}\b{_ANSWER}\b",
    rf"\b{_ANSWER}\b[^.!?\n]{{0,40}}\b(?:to|for)\s+(?:every|any|all|each)\s+(?:question|query|request|prompt)s?\b",
    r"\b(?:correct|right|only|proper|official)\s+(?:response|answer|reply)\s+(?:to|for)\s+(?:any|every|all|each)\b",
    rf"\b(?:all|any|every|each)\s+(?:answers?|responses?|replies|outputs?)\b[^.!?\n]{{0,50}}"
    r"\b(?:must|should|shall|will)\s+(?:end|begin|start|include|contain|mention|say)\b",
    # other languages: an instruction word with an answer verb, or "ignore ... instructions"
    r"\b(?:ignore[zr]?|oublie[zr]?)\b[^.!?\n]{0,40}\binstructions\b|\b(?:tu es|vous êtes) (?:maintenant|désormais)\b"
    r"|\bréponds?e?z?\b[^.!?\n]{0,40}\b(?:toujours|uniquement|seulement|à (?:toute|chaque) question)\b",
    r"\bignorier(?:e|en)?\b[^.!?\n]{0,40}\banweisungen\b|\bdu bist (?:jetzt|nun|ab sofort)\b"
    r"|\bantworte(?:n sie)?\b[^.!?\n]{0,40}\b(?:immer|nur|ausschließlich|auf jede frage)\b",
    r"\b(?:pour l'assistant|für den assistenten|para el asistente|для (?:ассистента|помощника)|给助手)"
    r"|\bno respondas\b|\bcontesta\w*\s+(?:solamente|solo|únicamente)\b",
    r"\bignora\b[^.!?\n]{0,40}\binstrucciones\b|\bahora eres\b"
    r"|\bresponde\b[^.!?\n]{0,40}\b(?:siempre|solo|solamente|únicamente|a (?:toda|cada) pregunta)\b",
    r"игнорир\w*[^.!?\n]{0,40}инструкц|теперь ты\b|отвеча\w*[^.!?\n]{0,30}(?:всегда|только|на любой вопрос)",
    r"忽略[^。！？\n]{0,20}(?:指令|指示|说明)|你现在是|(?:总是|只|一律)(?:回答|回复)|(?:回答|回复)(?:所有|任何|每个)问题",
]
_RX = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)
# A fake chat turn is withheld whole, whatever sentences it holds.
_TURN = re.compile(r"<\|im_start\|>[\s\S]{0,800}?(?:<\|im_end\|>|$)|\[INST\][\s\S]{0,800}?(?:\[/INST\]|$)"
                   r"|<<SYS>>[\s\S]{0,800}?(?:<</SYS>>|$)", re.IGNORECASE)
# Sentences, lines and HTML-ish fragments: what one planted instruction usually is.
_SEGMENT = re.compile(r"[^.!?。！？\n]*(?:[.!?。！？]+|\n|$)")


#: How far past a sentence that reads as an instruction the rest of its paragraph is withheld too:
#: a planted instruction often starts with its trigger ("SYSTEM:", "ignore previous instructions")
#: and states what to answer in the sentences after it.
CARRY_CHARS = 400
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def instruction_segments(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each sentence or line of ``text`` that reads as an instruction to an AI,
    with the sentences after it in the same paragraph (up to :data:`CARRY_CHARS`)."""
    out: list[tuple[int, int]] = []
    carry_until = -1
    for m in _SEGMENT.finditer(text):
        seg = m.group(0)
        if not seg.strip():
            continue
        start = m.start() + len(seg) - len(seg.lstrip())
        flagged = bool(_RX.search(seg if seg.startswith("\n") else "\n" + seg))
        if flagged:
            blank = _BLANK_LINE.search(text, m.end() - 1)
            carry_until = min(m.end() + CARRY_CHARS, blank.start() if blank else len(text))
        elif start >= carry_until:
            continue
        if out and out[-1][1] >= start - 1:
            out[-1] = (out[-1][0], m.end())
        else:
            out.append((start, m.end()))
    return out


def withhold_instructions(text: str) -> tuple[str, int]:
    """``text`` with each instruction-like sentence replaced by :data:`WITHHELD`, and how many."""
    text, turns = _TURN.subn(WITHHELD + " ", text)
    spans = instruction_segments(text)
    if not spans:
        return text, turns
    parts, last = [], 0
    for start, end in spans:
        parts.append(text[last:start])
        parts.append(WITHHELD + (" " if not text[start:end].endswith("\n") else "\n"))
        last = end
    parts.append(text[last:])
    return "".join(parts), turns + len(spans)


__all__ = ["WITHHELD", "instruction_segments", "withhold_instructions"]
