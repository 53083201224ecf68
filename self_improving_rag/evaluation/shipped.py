"""The confidence model shipped with the package, used from a new store's first question.

``shipped_confidence.json`` is written by ``benchmarks/coldstart.py --ship``: weights fitted on
every labelled answer of the project's collection (several corpora), the held-out curve of the
leave-one-corpus-out protocol (precision and coverage at each answer bar), how often held-out
answers were right at each confidence, and its provenance (datasets, counts, commit, figures).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("shipped_confidence.json")

#: The bar used when no precision is targeted or no shipped curve exists.
FALLBACK_BAR = 0.5


@lru_cache(maxsize=1)
def load() -> dict[str, Any] | None:
    """The shipped model, or None when the package carries none."""
    if not PATH.is_file():
        return None
    return json.loads(PATH.read_text(encoding="utf-8"))


def weights(target_precision: float | None) -> dict[str, float] | None:
    """The starting confidence weights: the shipped fit when a precision is targeted, else None
    (the hand-set defaults)."""
    model = load()
    if target_precision is None or model is None:
        return None
    return dict(model["weights"])


def bar_for(target_precision: float | None) -> float:
    """The lowest answer bar whose held-out precision reached ``target_precision`` on the shipped
    curve (the most answers at that precision); :data:`FALLBACK_BAR` without a target or curve."""
    model = load()
    if target_precision is None or model is None:
        return FALLBACK_BAR
    points = sorted(model["curve"], key=lambda p: p["bar"])
    for p in points:
        if p["precision"] >= target_precision:
            return float(p["bar"])
    return float(points[-1]["bar"])


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


__all__ = ["FALLBACK_BAR", "PATH", "bar_for", "load", "meaning", "weights"]
