"""A self-contained HTML report of the memory store: charts (inline PNG) and tables.

Charts are drawn on ``matplotlib.figure.Figure`` with the Agg canvas directly, never
through ``pyplot``, so writing a report neither needs a display nor changes the
process-wide matplotlib backend of the program that calls it.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .analysis import _remove_quietly
from .store import MemoryStore

__all__ = ["write_html_report"]

_MAX_STRATEGIES = 12
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.85em; } .empty { color: #777; font-style: italic; } .note { color: #555; }
img { max-width: 100%; }
"""


def _figure(width: float = 8.0, height: float = 3.8) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is a declared dependency
        raise ImportError("the HTML report needs matplotlib: pip install matplotlib") from exc
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any, alt: str) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _empty(what: str) -> str:
    return f'<p class="empty">No data yet: {html.escape(what)}.</p>'


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for v in row:
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{html.escape(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _strategy_labels(store: MemoryStore) -> dict[str, str]:
    # Strategy keys are long; charts use S1, S2, ... in order of use, keyed in a table.
    return {s["strategy_key"]: f"S{i + 1}" for i, s in enumerate(store.strategies())}


def _chart_strategy_by_class(store: MemoryStore, labels: dict[str, str]) -> str:
    rows = store.strategy_by_class()
    if not rows:
        return _empty("no first attempts recorded")
    classes = sorted({r["query_class"] for r in rows})
    used = sorted({r["strategy_key"] for r in rows}, key=lambda k: int(labels.get(k, "S999")[1:]))
    used = used[:_MAX_STRATEGIES]
    cell = {(r["strategy_key"], r["query_class"]): r for r in rows}
    grid = [[cell[(k, c)]["success_rate"] if (k, c) in cell else math.nan for c in classes] for k in used]
    fig = _figure(max(5.0, 1.1 * len(classes) + 3), max(2.6, 0.45 * len(used) + 1.6))
    ax = fig.add_subplot()
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(classes)), labels=classes)
    ax.set_yticks(range(len(used)), labels=[labels.get(k, "?") for k in used])
    for i, k in enumerate(used):
        for j, c in enumerate(classes):
            r = cell.get((k, c))
            if r is not None:
                ax.text(j, i, f"{r['success_rate']:.0%}\nn={r['attempts']}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("query class")
    ax.set_title("First-attempt success rate by strategy and query class")
    fig.colorbar(image, ax=ax, fraction=0.04)
    return _png(fig, "strategy success by query class")


def _chart_failures_over_time(store: MemoryStore) -> str:
    buckets = store.failure_timeline(10)
    if not buckets:
        return _empty("no attempts recorded")
    kinds = sorted({k for b in buckets for k in b["counts"]}, key=lambda k: (k != "NONE", k))
    fig = _figure()
    ax = fig.add_subplot()
    x = list(range(1, len(buckets) + 1))
    bottom = [0.0] * len(buckets)
    for kind in kinds:
        shares = [b["counts"].get(kind, 0) / b["n"] for b in buckets]
        ax.bar(x, shares, bottom=bottom, label="NONE (no failure)" if kind == "NONE" else kind,
               color="#9ccc9c" if kind == "NONE" else None)
        bottom = [b + s for b, s in zip(bottom, shares)]
    ax.set_xticks(x, labels=[f"#{b['bucket']}\nn={b['n']}" for b in buckets], fontsize=7)
    ax.set_xlabel(f"groups of attempts in time order, {buckets[0]['start'][:16]} to {buckets[-1]['end'][:16]} UTC")
    ax.set_ylabel("share of attempts")
    ax.set_ylim(0, 1)
    ax.set_title("Failure types over time")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig, "failure types over time")


def _chart_confidence(store: MemoryStore) -> str:
    hist = store.confidence_histogram(10)
    if not sum(hist["answered"]) + sum(hist["refused"]):
        return _empty("no outcomes recorded")
    edges = hist["edges"]
    centers = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
    width = edges[1] - edges[0]
    fig = _figure()
    ax = fig.add_subplot()
    ax.bar(centers, hist["answered"], width=width * 0.95, label="answered", color="#4c8bd6")
    ax.bar(centers, hist["refused"], width=width * 0.95, bottom=hist["answered"], label="refused", color="#d6874c")
    ax.set_xlim(0, 1)
    ax.set_xlabel("final confidence")
    ax.set_ylabel("outcomes")
    ax.set_title("Confidence of outcomes")
    ax.legend(fontsize=8)
    return _png(fig, "confidence histogram")


def _chart_reliability(store: MemoryStore) -> tuple[str, str]:
    rel = store.reliability(10)
    if not rel["n"]:
        return _empty("no answered outcomes yet (refusals have no confidence to check)"), ""
    if rel["target"] == "feedback":
        note = f"Accuracy from the latest feedback label of {rel['n']} labelled answered outcomes."
    else:
        note = (
            "No labels on answered outcomes yet (labels on refusals do not count): accuracy is "
            "self-assessed, the engine's own verdict (chosen attempt attributed NONE) over "
            f"{rel['n']} answered outcomes. Label answers with feedback for a real check."
        )
    bins = [b for b in rel["bins"] if b["n"]]
    fig = _figure(5.5, 4.5)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], linestyle="--", color="#888", label="perfect calibration")
    ax.bar([(b["lo"] + b["hi"]) / 2 for b in bins], [b["accuracy"] for b in bins],
           width=0.095, alpha=0.75, color="#4c8bd6", label="observed accuracy")
    ax.plot([b["mean_confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o", color="#1f4e8c")
    for b in bins:
        ax.annotate(f"n={b['n']}", ((b["lo"] + b["hi"]) / 2, b["accuracy"]), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(f"Reliability ({rel['target']}), ECE = {rel['ece']:.3f}")
    ax.legend(fontsize=8, loc="upper left")
    return _png(fig, "reliability diagram"), note


def _chart_learning_curve(store: MemoryStore, window: int) -> str:
    points = store.learning_curve(window)
    if not points:
        return _empty("no outcomes with attempts recorded")
    fig = _figure()
    ax = fig.add_subplot()
    x = [p["index"] for p in points]
    ax.plot(x, [p["rolling_first_success"] for p in points], label=f"first-attempt success (rolling {window})")
    ax.plot(x, [p["rolling_success"] for p in points], label=f"outcome success (rolling {window})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("outcome (time order)")
    ax.set_ylabel("rate")
    ax.set_title("Learning curve")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig, "learning curve")


def _stats_table(stats: dict[str, Any]) -> str:
    rows: list[list[Any]] = []
    for key, value in stats.items():
        if isinstance(value, dict):
            rows.extend([f"{key}.{k}", v] for k, v in value.items())
        else:
            rows.append([key, value])
    return _table(["statistic", "value"], rows)


def _strategies_table(store: MemoryStore, labels: dict[str, str]) -> str:
    rows = store.strategies()
    if not rows:
        return _empty("no attempts recorded")
    return _table(
        ["label", "strategy key", "attempts", "successes", "success rate", "mean confidence", "mean ms"],
        [[labels.get(r["strategy_key"], "?"), r["strategy_key"], r["attempts"], r["successes"], r["success_rate"],
          r["mean_confidence"], r["mean_total_ms"]] for r in rows],
    )


def _failures_table(store: MemoryStore) -> str:
    rows = store.failures()
    if not rows:
        return _empty("no failed attempts recorded")
    return _table(
        ["failure", "count", "share of attempts", "most used repair after it", "uses", "its success rate"],
        [[r["failure"], r["count"], r["share"], r["top_repair"] or "–", r["top_repair_uses"],
          r["top_repair_success_rate"]] for r in rows],
    )


def _interval(iv: Any) -> Any:
    """AUROC's bootstrap interval as `sirag calibrate` prints it ("0.61–0.81"), not as a dict."""
    if isinstance(iv, dict) and isinstance(iv.get("low"), (int, float)) and isinstance(iv.get("high"), (int, float)):
        return f"{iv['low']:.2f}–{iv['high']:.2f}"
    return iv


def _calibration_table(store: MemoryStore) -> str:
    cal = store.latest_calibration()
    if cal is None:
        return _empty("no calibration fitted")
    if (cal.get("metrics") or {}).get("reset_to_defaults"):  # stored as a fit, but nothing was fitted
        rows: list[list[Any]] = [["in use", f"the default weights (fit {cal['id']}: `sirag calibrate --reset`)"],
                                 ["reset at", cal["created_at"]]]
    else:
        rows = [["in use", f"fit {cal['id']}"], ["fitted at", cal["created_at"]], ["labelled outcomes (n)", cal["n"]]]
    rows.extend([f"metric {k}", v] for k, v in sorted(cal["metrics"].items()))
    rows.extend([f"weight {k}", v] for k, v in sorted(cal["weights"].items()))
    for corpus, fit in sorted((cal.get("corpus_fits") or {}).items()):  # the weights questions on that corpus use
        rows.append([f"{corpus}: its own fit, labelled outcomes (n)", fit.get("n")])
        if fit.get("l2") is not None:
            rows.append([f"{corpus}: its own fit, pull toward the fit on all labels (l2)", fit["l2"]])
        held = fit.get("held_out") or {}
        for key, what in (("before", "default weights"), ("pooled", "fit on all labels"), ("after", "its own fit")):
            rows.extend([f"{corpus}: held out, {what}, {m}", _interval(v) if m == "auroc_interval" else v]
                        for m, v in sorted((held.get(key) or {}).items()))
        rows.extend([f"{corpus}: weight {k}", v] for k, v in sorted(fit["weights"].items()))
    return _table(["calibration", "value"], rows)


def _sections(store: MemoryStore, window: int) -> list[tuple[str, str]]:
    """The report's sections, (title, HTML), in page order."""
    labels = _strategy_labels(store)
    reliability_chart, reliability_note = _chart_reliability(store)
    note_html = f'<p class="note">{html.escape(reliability_note)}</p>' if reliability_note else ""
    return [
        ("Summary", _stats_table(store.stats())),
        ("Strategy success by query class", _chart_strategy_by_class(store, labels)),
        ("Strategies", _strategies_table(store, labels)),
        ("Failure types over time", _chart_failures_over_time(store)),
        ("Failures and the repairs that followed", _failures_table(store)),
        ("Confidence", _chart_confidence(store)),
        ("Reliability", reliability_chart + note_html),
        ("Learning curve", _chart_learning_curve(store, window)),
        ("Calibration", _calibration_table(store)),
    ]


def write_html_report(store: MemoryStore, path: Path, *, window: int = 20) -> Path:
    """Write a self-contained HTML report of ``store`` to ``path`` and return the path.

    Charts (strategy success by query class, failure types over time, confidence
    histogram, reliability diagram, learning curve) are PNGs embedded as base64; an
    empty store yields the same page with "No data yet" in place of each chart.
    """
    if not isinstance(store, MemoryStore):
        raise ValueError(f"store must be a MemoryStore, got {type(store).__name__}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    path = Path(path)
    with store.snapshot():  # every table and chart from the same moment, even while a batch records
        sections = _sections(store, window)
    body = "\n".join(f"<section><h2>{html.escape(title)}</h2>\n{content}</section>" for title, content in sections)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>sirag memory report</title>"
        f"<style>{_CSS}</style></head><body>\n"
        "<h1>sirag memory report</h1>"
        f'<p class="note">Database <code>{html.escape(str(store.path))}</code>, generated {generated} (UTC).</p>\n'
        f"{body}\n</body></html>\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a failed report never leaves half a page.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # name the file the user asked for, not the temporary one
        raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
    finally:
        _remove_quietly(tmp)  # never hides the error above (a read-only file system fails this too)
    return path
