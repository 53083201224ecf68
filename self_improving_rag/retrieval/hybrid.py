"""Fusion of ranked lists by weighted scores (reciprocal rank fusion, tried first, found less
evidence on sherlock_dev: recall@5 0.73 against 0.865, docs/results.md)."""

from __future__ import annotations


def weighted_fuse(rankings: dict[str, list[tuple[int, float]]], weights: dict[str, float]) -> list[tuple[int, float]]:
    """Weighted sum of min-max normalised scores (a missing entry counts 0)."""
    fused: dict[int, float] = {}
    for name, ranked in rankings.items():
        if not ranked:
            continue
        vals = [s for _, s in ranked]
        lo, hi = min(vals), max(vals)
        span = hi - lo
        w = weights.get(name, 1.0)
        for idx, s in ranked:
            # Equal scores (e.g. a single hit) all count as the best of their list.
            fused[idx] = fused.get(idx, 0.0) + w * ((s - lo) / span if span > 0 else 1.0)
    return sorted(fused.items(), key=lambda t: (-t[1], t[0]))


def dedupe_overlapping(order: list[tuple[int, float]], spans: list[tuple[str, int, int]], max_overlap: float = 0.5) -> list[tuple[int, float]]:
    """Drop a hit whose character span overlaps an earlier (better) hit by more than ``max_overlap``."""
    kept: list[tuple[int, float]] = []
    taken: list[tuple[str, int, int]] = []
    for idx, score in order:
        doc, s, e = spans[idx]
        dup = False
        for d2, s2, e2 in taken:
            if d2 == doc:
                inter = min(e, e2) - max(s, s2)
                if inter > 0 and inter / max(1, min(e - s, e2 - s2)) > max_overlap:
                    dup = True
                    break
        if not dup:
            kept.append((idx, score))
            taken.append((doc, s, e))
    return kept
