"""The confidence model shipped with the package, and the return check it gives
``loop.target_precision`` from a new store's first question.

``shipped_confidence.json`` is written by ``benchmarks/coldstart.py --ship``: weights fitted on
every labelled answer of the project's collection (several corpora), the held-out curve of the
leave-one-corpus-out protocol (precision and coverage at each answer bar), how often held-out
answers were right at each confidence, and its provenance (datasets, counts, commit, figures).

The loop retries by its own confidence (the hand-set weights, or memory's fit) and
``loop.answer_threshold``; the shipped model only decides which of the attempts made is returned,
if any (:class:`Gate`). So the protocol's replay of recorded attempts is exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..confidence import confidence

PATH = Path(__file__).with_name("shipped_confidence.json")


@lru_cache(maxsize=1)
def load() -> dict[str, Any] | None:
    """The shipped model, or None when the package carries none."""
    if not PATH.is_file():
        return None
    return json.loads(PATH.read_text(encoding="utf-8"))


def bar_for(points: list[Mapping[str, float]], target_precision: float) -> float:
    """The lowest answer bar whose held-out precision reached ``target_precision`` on the curve
    ``points`` (the most answers at that precision); its strictest bar when none did."""
    points = sorted(points, key=lambda p: p["bar"])
    for p in points:
        if p["precision"] >= target_precision:
            return float(p["bar"])
    return float(points[-1]["bar"])


@dataclass(frozen=True)
class Gate:
    """What an answer must reach to be returned under ``loop.target_precision``: the shipped
    model's confidence of the attempt, at least the bar its held-out curve gives for the target."""

    weights: Mapping[str, float]
    bar: float
    target_precision: float

    def confidence(self, features: Mapping[str, float | None]) -> float:
        return confidence(features, self.weights)


def gate(target_precision: float | None) -> Gate | None:
    """The return check for ``target_precision``; None without a target or a shipped model."""
    model = load()
    if target_precision is None or model is None:
        return None
    return Gate(dict(model["weights"]), bar_for(model["curve"], target_precision), target_precision)


def meaning(conf: float) -> str | None:
    """What a confidence meant on held-out corpora: "answers at this confidence were right 83% of
    the time on corpora the model was not fitted on (n=120)"; None without a shipped model."""
    model = load()
    if model is None:
        return None
    for b in model.get("reliability", []):
        if b["lo"] <= conf < b["hi"] or (conf >= 1.0 and b["hi"] >= 1.0):
            return (f"answers at this confidence were right {b['accuracy']:.0%} of the time on corpora the model "
                    f"was not fitted on (n={b['count']})")
    return None


__all__ = ["PATH", "Gate", "bar_for", "gate", "load", "meaning"]
