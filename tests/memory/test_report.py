"""The HTML report: self-contained, with charts, and sensible on an empty store."""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[1])):
    if _p not in sys.path:
        sys.path.append(_p)

from memory_testkit import make_answer, repaired_answer  # noqa: E402

from self_improving_rag.memory import MemoryStore  # noqa: E402
from self_improving_rag.memory.report import write_html_report  # noqa: E402

PNG = "data:image/png;base64,"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parse(page: str) -> list[tuple[str, dict[str, str | None]]]:
    collector = _Collector()
    collector.feed(page)
    return collector.tags


def assert_self_contained(page: str) -> None:
    for tag, attrs in parse(page):
        for attr in ("src", "href"):
            value = attrs.get(attr)
            assert value is None or value.startswith("data:"), (tag, value)
    assert "<script" not in page


def test_empty_store_report_says_no_data(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "sirag.db") as store:
        out = write_html_report(store, tmp_path / "reports" / "memory.html")
    assert out == tmp_path / "reports" / "memory.html"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("No data yet") >= 5
    assert PNG not in page
    assert_self_contained(page)


def test_report_with_data_embeds_every_chart(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "sirag.db") as store:
        for i in range(12):
            store.record(repaired_answer(f"who {i}", query_class="who"))
            store.record(make_answer(f"where <b>{i}</b>", query_class="where", confidence=0.1 + i / 15))
        store.record(make_answer("why?", refused=True, confidence=0.05, query_class="why"))
        store.save_calibration({"coverage": 0.7, "bias": -0.1}, 24, {"auroc_after": 0.8},
                               corpus_fits={"/idx/harbour": {"weights": {"coverage": 0.9, "bias": 0.2}, "n": 21,
                                                             "l2": 0.3,
                                                             "held_out": {"pooled": {"auroc": 0.61, "brier": 0.25},
                                                                          "after": {"auroc": 0.79, "brier": 0.18}}}})
        out = write_html_report(store, tmp_path / "memory.html")
    page = out.read_text(encoding="utf-8")
    images = [attrs for tag, attrs in parse(page) if tag == "img"]
    assert len(images) == 5
    assert all((a.get("src") or "").startswith(PNG) for a in images)
    assert {a.get("alt") for a in images} == {
        "strategy success by query class", "failure types over time", "confidence histogram",
        "reliability diagram", "learning curve",
    }
    for title in ("Strategies", "Failures and the repairs that followed", "Calibration", "Summary"):
        assert f"<h2>{title}</h2>" in page
    assert "WEAK_RETRIEVAL" in page and "switch_retriever" in page
    assert "/idx/harbour: its own fit, labelled outcomes (n)" in page and "/idx/harbour: weight coverage" in page
    # Its held-out figures and strength are shown, as `sirag calibrate` printed them.
    assert "/idx/harbour: its own fit, pull toward the fit on all labels (l2)" in page
    assert "/idx/harbour: held out, fit on all labels, auroc</td><td class=\"num\">0.61" in page
    assert "/idx/harbour: held out, its own fit, brier</td><td class=\"num\">0.18" in page
    assert "self-assessed" in page  # no feedback labels yet
    assert "<b>" not in page  # user text is escaped
    assert "No data yet" not in page
    assert_self_contained(page)


def test_reliability_uses_feedback_when_labelled(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "sirag.db") as store:
        ids = [store.record(make_answer(f"q{i}", confidence=i / 10)) for i in range(10)]
        for i, oid in enumerate(ids):
            store.add_feedback(oid, i >= 5, source="gold")
        page = write_html_report(store, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Reliability (feedback)" not in page  # the title is drawn inside the PNG
    assert re.search(r"latest feedback label of 10 labelled answered outcomes", page)


def test_reliability_notes_for_refusals_only(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "sirag.db") as store:
        refused = [store.record(make_answer(f"r{i}", refused=True, confidence=0.1)) for i in range(3)]
        page = write_html_report(store, tmp_path / "r.html").read_text(encoding="utf-8")
        assert "no answered outcomes yet" in page and "no outcomes recorded" not in page
        store.record(make_answer("a", confidence=0.9))
        for oid in refused:
            store.add_feedback(oid, True, source="user")
        page = write_html_report(store, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "No labels on answered outcomes yet (labels on refusals do not count)" in page
    assert "over 1 answered outcomes" in page


def test_report_rejects_bad_arguments(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "sirag.db") as store:
        with pytest.raises(ValueError):
            write_html_report(store, tmp_path / "r.html", window=0)
    with pytest.raises(ValueError):
        write_html_report("not a store", tmp_path / "r.html")  # type: ignore[arg-type]


def test_report_reads_one_snapshot_while_another_process_records(tmp_path: Path) -> None:
    """A batch recording into the same store while the report is drawn: a strategy first used
    between two of the report's reads must not break it (it did, with a KeyError), and every
    table shows the store as of the same moment."""
    from memory_testkit import STRATEGY_B, make_attempt

    db = tmp_path / "sirag.db"
    with MemoryStore(db) as store:
        store.record(make_answer())
        original = store.strategy_by_class

        def strategy_by_class_then_a_writer_records():
            rows = original()
            with MemoryStore(db) as writer:  # another connection, as another process would open
                writer.record(make_answer("Who wrote it?", (make_attempt(1, strategy=STRATEGY_B),)))
            return rows

        store.strategy_by_class = strategy_by_class_then_a_writer_records
        page = write_html_report(store, tmp_path / "r.html").read_text(encoding="utf-8")
        assert STRATEGY_B.key not in page  # the snapshot predates the other process's answer
        assert STRATEGY_B.key in {r["strategy_key"] for r in store.strategies()}  # and it was recorded


def test_a_reset_is_shown_as_the_default_weights_in_use_not_as_a_fit(tmp_path: Path) -> None:
    """After `sirag calibrate --reset` the report's calibration table read "fitted at ..." and "labelled
    outcomes (n) 0", as if a fit had been made on no labels; it now says the default weights are in use
    since the reset, and, for a fit, which fit is in use (as `sirag memory stats` does)."""
    from self_improving_rag.evaluation.calibrate import reset_calibration

    with MemoryStore(tmp_path / "sirag.db") as store:
        store.record(make_answer("who?", confidence=0.7))
        fit_id = store.save_calibration({"coverage": 0.7, "bias": -0.1}, 24, {"auroc_after": 0.8})
        fitted = write_html_report(store, tmp_path / "fit.html").read_text(encoding="utf-8")
        reset_id = reset_calibration(store)
        reset = write_html_report(store, tmp_path / "reset.html").read_text(encoding="utf-8")
    assert f"<td>in use</td><td>fit {fit_id}</td>" in fitted and "<td>fitted at</td>" in fitted
    assert f"<td>in use</td><td>the default weights (fit {reset_id}: `sirag calibrate --reset`)</td>" in reset
    assert "<td>reset at</td>" in reset
    assert "fitted at" not in reset and "labelled outcomes (n)" not in reset


def test_a_corpus_fit_s_auroc_interval_is_shown_as_a_range_not_a_dict(tmp_path: Path) -> None:
    """A corpus's own fit keeps its held-out figures, AUROC's interval among them (a dict): the
    report showed "{'low': 0.744..., 'high': ..., 'level': 0.95, 'resamples': 1000}"."""
    interval = {"low": 0.7444, "high": 0.9381, "level": 0.95, "resamples": 1000}
    with MemoryStore(tmp_path / "sirag.db") as store:
        store.record(make_answer("who?", confidence=0.7))
        held = {m: {"auroc": 0.8, "auroc_interval": interval, "ece": 0.1, "brier": 0.2}
                for m in ("before", "pooled", "after")}
        store.save_calibration({"coverage": 0.7, "bias": -0.1}, 24, {"auroc_after": 0.8},
                               corpus_fits={"/i/a": {"weights": {"bias": 0.1}, "n": 24, "held_out": held}})
        page = write_html_report(store, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<td>/i/a: held out, its own fit, auroc_interval</td><td>0.74–0.94</td>" in page
    assert "resamples" not in page
