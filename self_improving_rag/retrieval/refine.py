"""Context refinement: keep the sentences that answer, with a little surrounding text."""

from __future__ import annotations

from ..text import content_terms
from .reranker import SentenceScores

#: What :func:`join_spans` puts where text was left out between two kept sentences.
GAP = " … "

# What the searcher refines with (docs/results.md, "Retrieval", measured on
# sherlock_dev's 37 evidence questions): each kept sentence with one neighbour before it; after
# it, the sentences that add up to at most 35 word pieces (at least one of them), and a question
# keeps its reply (32 of 32 whole evidence quotes kept instead of 29 at the same tokens); the
# sentences of higher-ranked passages favoured by 0.5 (0.3 or 0.7 kept fewer quotes), and every
# passage's best sentence taken first, so no retrieved passage vanishes.
CONTEXT_SENTENCES = 1
CONTEXT_AFTER_TOKENS = 35
KEEP_REPLIES = True
RANK_WEIGHT = 0.5
EVERY_PASSAGE = True


def refine_passage_spans(
    question: str,
    texts: list[str],
    scores: list[SentenceScores],
    budget_tokens: int,
    count_tokens,
    context_sentences: int = 1,
    rank_weight: float = 0.5,
    every_passage: bool = True,
    context_after_tokens: int = 0,
    replies: bool = False,
) -> list[list[tuple[int, int]]]:
    """For each text, the sentence spans to keep (offsets within that text), in order: the best
    sentences wherever they are, each with ``context_sentences`` neighbours. (Growing one
    contiguous window per passage instead kept more whole quotes in an earlier measurement but answered
    sherlock_dev worse end to end, 0.467 against 0.600 correct or rightly refused, and keeps fewer
    quotes than this now: docs/results.md.)

    Each sentence scores ``cosine + 0.3 · (share of the question's content terms it holds) +
    rank_weight · (1 − rank / n)``, where ``rank`` is its passage's place in the retrieval order
    (the reranker's judgement of the whole passage, which one sentence's cosine does not see).
    With ``every_passage`` each passage's best sentence is taken first, in rank order, so no
    retrieved passage vanishes; then the other sentences, best first. Each sentence brings
    ``context_sentences`` neighbours on both sides (or comes alone when they do not fit) until
    ``budget_tokens`` is spent (the budget counts the sentences' tokens and the "…" that
    :func:`join_spans` puts where text was left out between two of them). The first text
    always keeps its best sentence, so a refined context is never empty.

    What follows a sentence is measured in tokens as well as sentences: with
    ``context_after_tokens`` > 0 the sentences after it keep joining while their tokens add up to
    at most that many (still at least ``context_sentences`` of them), so the short sentences
    that close a line of dialogue ("Now off you go!") come along and a long one does not. With
    ``replies`` a window never ends on a question: when its last sentence asks one (or is a short
    attribution such as "I asked." after one) the next sentence, the reply, joins too.
    """
    value = _sentence_scores(question, texts, scores, rank_weight)
    candidates = [(v, ti, si) for ti, row in enumerate(value) for si, v in enumerate(row)]
    candidates.sort(key=lambda t: (-t[0], t[1], t[2]))
    if every_passage:
        # Each passage's best sentence goes first, in passage rank order.
        seen: set[int] = set()
        seeds = []
        for c in candidates:
            if c[1] not in seen:
                seen.add(c[1])
                seeds.append(c)
        seeds.sort(key=lambda c: c[1])
    else:
        # The top-ranked text keeps its best sentence first: it is the reranker's best hit.
        seeds = [c for c in candidates if c[1] == 0][:1]
    seed_set = set(seeds)
    order = seeds + [c for c in candidates if c not in seed_set]
    chosen: list[set[int]] = [set() for _ in texts]
    # Each sentence's tokens, counted once: windows, costs and the fallback all read them.
    sizes = [[count_tokens(text[s:e]) for s, e in sc.spans] for text, sc in zip(texts, scores)]
    gap = count_tokens(GAP)
    used = 0
    for _, ti, si in order:
        if si in chosen[ti]:
            continue
        window = _window(texts[ti], scores[ti].spans, si, context_sentences, context_after_tokens, replies, sizes[ti])
        new = [j for j in window if j not in chosen[ti]]
        cost = sum(sizes[ti][j] for j in new) + gap * _new_gaps(chosen[ti], new)
        if used + cost > budget_tokens:
            # Try the sentence alone before giving up on it.
            alone = sizes[ti][si] + gap * _new_gaps(chosen[ti], [si])
            if used + alone > budget_tokens:
                if used == 0:
                    chosen[ti].add(si)
                    used += alone
                continue
            new, cost = [si], alone
        chosen[ti].update(new)
        used += cost
    return [[scores[ti].spans[j] for j in sorted(chosen[ti])] for ti in range(len(texts))]


#: A sentence of at most this many tokens right after a question is read as its attribution
#: ("I asked."), so the reply after it still joins the window.
ATTRIBUTION_TOKENS = 4


def _window(text: str, spans, si: int, context_sentences: int, after_tokens: int, replies: bool,
            sizes: list[int]) -> list[int]:
    """Sentence ``si`` with its neighbours: ``context_sentences`` before; after, at least as many
    and more while they add up to ``after_tokens``; then, with ``replies``, while the window ends on
    a question or on a short attribution after one, the next sentence (at most two more).
    ``sizes`` holds each sentence's tokens."""
    n = len(spans)

    def asks(j: int) -> bool:
        return "?" in text[spans[j][0]:spans[j][1]]

    hi, used = si, 0
    while hi + 1 < n:
        c = sizes[hi + 1]
        if hi - si >= context_sentences and used + c > after_tokens:
            break
        hi += 1
        used += c
    extra = 0  # at most the attribution and the reply
    while replies and extra < 2 and hi + 1 < n and (
            asks(hi) or (hi > si and asks(hi - 1) and sizes[hi] <= ATTRIBUTION_TOKENS)):
        hi += 1
        extra += 1
    return list(range(max(0, si - context_sentences), hi + 1))


def _runs(indices: set[int]) -> int:
    """How many runs of consecutive sentence indices there are."""
    return sum(1 for j in indices if j - 1 not in indices)


def _new_gaps(chosen: set[int], new: list[int]) -> int:
    """How many more gaps (each shown as GAP) a passage has once ``new`` sentences join ``chosen``."""
    before = max(0, _runs(chosen) - 1)
    return max(0, _runs(chosen | set(new)) - 1) - before


def _sentence_scores(question: str, texts: list[str], scores: list[SentenceScores],
                     rank_weight: float) -> list[list[float]]:
    """cosine + 0.3 · question-term share + rank_weight · (1 − rank / n) for every sentence."""
    q_terms = set(content_terms(question))
    n = max(1, len(texts))
    out = []
    for ti, (text, sc) in enumerate(zip(texts, scores)):
        row = []
        for (s, e), sim in zip(sc.spans, sc.sims):
            overlap = len(q_terms & set(content_terms(text[s:e]))) / len(q_terms) if q_terms else 0.0
            row.append(sim + 0.3 * overlap + rank_weight * (1 - ti / n))
        out.append(row)
    return out


def join_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """The kept sentences, with an ellipsis where text was left out."""
    parts = []
    prev_end = None
    for s, e in spans:
        if prev_end is not None and text[prev_end:s].strip():
            parts.append(GAP)
        elif prev_end is not None:
            parts.append(" ")
        parts.append(text[s:e])
        prev_end = e
    return "".join(parts).strip()
