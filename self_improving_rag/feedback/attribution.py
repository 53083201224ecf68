"""Map an attempt's signals to a failure type, a human-readable reason and candidate repairs."""

from __future__ import annotations

import textwrap

from ..config import ThresholdsConfig
from ..evaluation.retrieval_signals import RELEVANCE_THRESHOLD
from ..types import Attribution, Failure, Signals
from .repairs import CATALOGUE

#: The reason of an attempt whose retrieval found nothing (rule 0): the engine did not ask the
#: model, and an attempt's stored ``failure_reason`` says so in these words.
NO_PASSAGE_REASON = "retrieval found no passage for the question, so the model was not asked"

#: The diagnoses as plain strings, in the order of :class:`~self_improving_rag.types.Failure`.
FAILURES = tuple(f.value for f in Failure)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def attribute(signals: Signals, thr: ThresholdsConfig, retrieved: bool = True, echo: str | None = None) -> Attribution:
    """The first failure whose condition holds, in this order:

    0. no passage retrieved (``retrieved`` False: the model was not asked) -> WEAK_RETRIEVAL
    1. refusal with coverage and grounding at or above their thresholds -> MISSED_ANSWER
    2. coverage or grounding below threshold                          -> WEAK_RETRIEVAL
    3. no claim supported and every claim's words mostly absent from
       the passages (the answer came from elsewhere: the evidence was
       not retrieved, whatever the question's words suggest)          -> WEAK_RETRIEVAL
    3b. more of the question's dates than ``thresholds.dates_unstated``
       unstated in the answer's evidence (it tells of another period) -> WEAK_RETRIEVAL
    4. faithfulness below threshold (some claims supported, others
       not: the model added to its evidence)                          -> HALLUCINATION_RISK
    5. redundancy above threshold                                     -> REDUNDANT_CONTEXT
    6. confidence below threshold                                     -> LOW_CONFIDENCE
    otherwise NONE. A refusal with weak evidence is WEAK_RETRIEVAL: another strategy may find it.

    ``echo`` is the model's reply when it was taken for a refusal only because it names nothing
    the question does not ("Who killed Drebber?" -> "Drebber"): the model did not decline, so the
    reason quotes what it said instead.
    """
    cov, grd = signals.coverage.value, signals.grounding.value
    weak_cov = cov is not None and cov < thr.coverage
    weak_grd = grd is not None and grd < thr.grounding

    def make(failure: Failure, reason: str) -> Attribution:
        return Attribution(failure.value, reason, CATALOGUE.get(failure.value, ()))

    if not retrieved:
        # Nothing to read: the engine refused for the model, so "the model declined" and "the
        # passages do not mention ..." would both describe something that did not happen.
        return make(Failure.WEAK_RETRIEVAL, NO_PASSAGE_REASON)
    if signals.refusal:
        # shorten() drops whole words: a reply whose next word is long (a URL) would keep almost nothing.
        quoted = textwrap.shorten(echo, 80, placeholder=" …") if echo else ""
        if echo and len(quoted) < 40 < 80 < len(" ".join(echo.split())):
            quoted = " ".join(echo.split())[:78] + " …"
        said = f"the model's reply {quoted!r} names nothing the question does not," if echo else "the model declined"
        if not weak_cov and not weak_grd:
            return make(Failure.MISSED_ANSWER, f"{said} although coverage {_fmt(cov)} >= {thr.coverage:.2f} "
                                         f"and grounding {_fmt(grd)} >= {thr.grounding:.2f}")
        return make(Failure.WEAK_RETRIEVAL, f"{said} and the evidence is weak: " + _weak_reason(signals, thr))
    if weak_cov or weak_grd:
        return make(Failure.WEAK_RETRIEVAL, _weak_reason(signals, thr))
    fth = signals.faithfulness.value
    if fth is not None and fth < thr.faithfulness and _evidence_absent(signals):
        bad = signals.faithfulness.detail.get("unsupported", [])
        return make(Failure.WEAK_RETRIEVAL, f"no claim of the answer is supported and most of its words are not in the "
                                      f"passages (e.g. {bad[0][:60]!r}): the evidence was probably not retrieved"
                    if bad else "no claim of the answer is supported: the evidence was probably not retrieved")
    detail = signals.confidence.detail or {}
    dates = (detail.get("features") or {}).get("dates_unstated")
    if dates is not None and dates > thr.dates_unstated:
        return make(Failure.WEAK_RETRIEVAL, _dates_reason(detail.get("dates_unstated") or {}))
    if fth is not None and fth < thr.faithfulness:
        bad = signals.faithfulness.detail.get("unsupported", [])
        named = f": unsupported claim {bad[0]!r}" if bad else ""
        return make(Failure.HALLUCINATION_RISK, f"faithfulness {fth:.2f} < {thr.faithfulness:.2f} with good evidence{named}")
    red = signals.redundancy.value
    if red is not None and red > thr.redundancy:
        return make(Failure.REDUNDANT_CONTEXT, f"redundancy {red:.2f} > {thr.redundancy:.2f}: passages repeat each other")
    conf = signals.confidence.value
    if conf is not None and conf < thr.confidence:
        return make(Failure.LOW_CONFIDENCE, f"confidence {conf:.2f} < {thr.confidence:.2f}")
    return make(Failure.NONE, f"all signals clear their thresholds (confidence {_fmt(conf)})")


def _evidence_absent(signals: Signals) -> bool:
    """Whether no claim is supported and each has under half of its content words in the passages."""
    if signals.faithfulness.value != 0.0:
        return False
    claims = signals.faithfulness.detail.get("claims") or []
    return bool(claims) and all(c.get("lexical", 1.0) < 0.5 for c in claims)


def _dates_reason(info: dict) -> str:
    """Why rule 3b fired, from the scorer's ``detail.dates_unstated``: the unstated dates, where it
    looked, and the dates those passages name instead (or that they name none)."""
    unstated = info.get("unstated") or []
    what = (f"the question's date{'s' if len(unstated) > 1 else ''} " + ", ".join(repr(d) for d in unstated[:3])
            if unstated else "the question's dates")
    cited = "".join(f"[{n}]" for n in info.get("evidence") or [])
    where = f"the {info.get('source') or 'passages behind the answer'}" + (f" ({cited})" if cited else "")
    other = info.get("evidence_dates")
    instead = ("; they name " + ", ".join(repr(d) for d in other[:3]) if other
               else "; they name no date" if other is not None else "")
    return f"{where} do not state {what}{instead}: the answer's evidence was probably not retrieved"


def _weak_reason(signals: Signals, thr: ThresholdsConfig) -> str:
    parts = []
    cov = signals.coverage
    if cov.value is not None and cov.value < thr.coverage:
        missing = cov.detail.get("missing_words") or cov.detail.get("missing", [])
        m = f": the passages do not mention {', '.join(repr(x) for x in missing[:3])}" if missing else ""
        parts.append(f"coverage {cov.value:.2f} < {thr.coverage:.2f}{m}")
    grd = signals.grounding
    if grd.value is not None and grd.value < thr.grounding:
        rel = grd.detail.get("relevance") or []
        best = (f" (best relevance {max(rel):.2f}, where {RELEVANCE_THRESHOLD:.2f} counts as relevant; "
                "`retrieval.relevance_midpoint` sets the cosine relevance turns there)" if rel else "")
        parts.append(f"grounding {grd.value:.2f} < {thr.grounding:.2f}: few passages are relevant{best}")
    return "; ".join(parts) or "evidence looks weak"
