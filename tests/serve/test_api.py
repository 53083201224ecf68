"""The API on a real uvicorn on loopback, with the fakes: every endpoint, the events of a
streamed ask, and asks recorded as the CLI records them."""

from __future__ import annotations

import json

from tests.conftest import fake_overrides, main_in_process
from tests.serve.conftest import GOOD, QUESTION, REFUSE, parse_sse


def _names(events):
    """Event names with each run of tokens as one."""
    out = []
    for name, _ in events:
        if not (name == "token" and out and out[-1] == "token"):
            out.append(name)
    return out


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("timings_ms", "outcome_id", "ms")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_health_and_readiness(serve):
    s = serve([GOOD])
    assert s.client.get("/healthz").json()["status"] == "ok"
    ready = s.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["queue"] == {"waiting": 0, "size": 16, "busy": False}
    assert s.client.get("/openapi.json").json()["paths"].keys() >= {
        "/v1/ask", "/v1/search", "/v1/feedback", "/v1/outcomes", "/v1/memory/stats", "/healthz", "/readyz",
        "/v1/chat/completions"}
    assert s.client.get("/docs").status_code == 200


def test_readyz_is_503_until_the_models_are_loaded(serve, monkeypatch):
    import threading

    from self_improving_rag.engine import Engine

    loaded = threading.Event()
    warm = Engine.warm_up
    monkeypatch.setattr(Engine, "warm_up", lambda self: (loaded.wait(30), warm(self))[1])
    s = serve([GOOD], ready=False)
    assert s.client.get("/readyz").status_code == 503
    assert s.client.get("/healthz").status_code == 200
    loaded.set()
    s.server.wait_ready(s.client)


def test_ask_answers_with_the_json_of_sirag_ask_json_and_records_it(serve, tmp_path, capsys):
    s = serve([REFUSE, GOOD])
    r = s.client.post("/v1/ask", json={"question": QUESTION})
    assert r.status_code == 200, r.text
    served = r.json()
    assert served["answer"] == GOOD and served["chosen_attempt"] == 2 and len(served["attempts"]) == 2
    row = s.store.show(served["outcome_id"])
    assert row["question"] == QUESTION and row["answer"] == GOOD and len(row["attempts"]) == 2
    # The CLI, on another memory store with the same replies, prints the same JSON.
    cli = tmp_path / "cli"
    overrides = [o for o in fake_overrides(tmp_path) if not o.startswith("paths.memory_db")]
    args = ["ask", QUESTION, "--json", "--memory", str(cli / "memory.db"),
            "--set", f"generator.replies={json.dumps([REFUSE, GOOD])}"]
    for o in overrides:
        args += ["--set", o]
    capsys.readouterr()
    assert main_in_process(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert _without_times(printed) == _without_times(served)


def test_a_streamed_ask_with_one_retry_sends_its_events_in_order(serve):
    s = serve([REFUSE, GOOD])
    r = s.client.post("/v1/ask", json={"question": QUESTION, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = _names(events)
    # A repair whose prompt repeats the first attempt's is skipped (on this small corpus a larger
    # budget or the neighbours add nothing): its retrieval is followed by the next repair's.
    skipped = (len(names) - 8) // 2
    assert names == ["retrieval", "token", "attempt", *["repair", "retrieval"] * (1 + skipped), "token", "attempt",
                     "answer"], names
    by = {}
    for name, data in events:
        by.setdefault(name, []).append(data)
    first, second = by["retrieval"][0], by["retrieval"][-1]
    assert first["attempt"] == 1 and first["repair"] is None and first["passages"]
    assert second["attempt"] == 2 and second["repair"] == by["repair"][-1]["repair"] == by["attempt"][1]["repair"]
    assert [r["replaces_skipped"] for r in by["repair"]] == [False] + [True] * skipped
    assert all(r["after_failure"] == by["attempt"][0]["failure"] != "NONE" for r in by["repair"])
    assert "".join(t["text"] for t in by["token"] if t["attempt"] == 1) == REFUSE
    assert "".join(t["text"] for t in by["token"] if t["attempt"] == 2) == GOOD
    attempt = by["attempt"][1]
    assert attempt["failure"] == "NONE" and attempt["thresholds"]["confidence"]["threshold"] == 0.6
    assert attempt["thresholds"]["redundancy"]["pass"] == "at_most"
    final = by["answer"][0]
    assert final["result"]["answer"] == GOOD and final["result"]["outcome_id"]
    assert final["highlights"] and final["highlights"][0]["number"] == 1
    assert "Tobias Lune rowed out alone and saved eleven sailors" in final["highlights"][0]["sentence"]
    assert s.store.stats()["outcomes"] == 1


def test_a_streamed_refusal_ends_with_the_closest_passages(serve):
    s = serve([REFUSE])
    events = parse_sse(s.client.post("/v1/ask", json={"question": "What colour was the harbour master's umbrella?",
                                                      "stream": True}).text)
    names = _names(events)
    assert names[-1] == "refusal" and names.count("attempt") == 3 and names.count("repair") >= 2
    assert names.index("repair") > names.index("attempt")
    result = events[-1][1]["result"]
    assert result["refused"] and result["answer"] is None and result["refusal_reason"]
    assert 0 < len(result["sources"]) <= 3 and all(src["text"] for src in result["sources"])
    assert s.store.show(result["outcome_id"])["refused"] == 1


def test_ask_takes_strategy_settings_and_the_loop_switch(serve):
    s = serve([REFUSE, GOOD])
    r = s.client.post("/v1/ask", json={"question": QUESTION, "loop": False,
                                        "strategy": {"chunker": "fixed", "top_k": 3, "retriever": "bm25"}})
    data = r.json()
    assert r.status_code == 200 and len(data["attempts"]) == 1 and data["refused"]
    used = data["attempts"][0]["strategy"]
    assert (used["chunker"], used["top_k"], used["retriever"]) == ("fixed", 3, "bm25")


def test_search_answers_with_the_json_of_sirag_search_json(serve):
    s = serve([GOOD])
    r = s.client.post("/v1/search", json={"question": "Who built the lighthouse?", "strategy": {"top_k": 2}})
    data = r.json()
    assert r.status_code == 200 and data["strategy"]["top_k"] == 2 and data["query"] == "Who built the lighthouse?"
    assert data["hits"] and {"rank", "doc", "section", "start", "end", "chunk_id", "scores", "text"} <= set(data["hits"][0])
    assert any("Clara Venn" in p["text"] for p in data["passages"])
    assert s.store.stats()["outcomes"] == 0  # a search records nothing


def test_feedback_labels_an_outcome_as_sirag_feedback_does(serve):
    s = serve([GOOD])
    oid = s.client.post("/v1/ask", json={"question": QUESTION}).json()["outcome_id"]
    r = s.client.post("/v1/feedback", json={"outcome_id": oid[:8], "correct": False, "note": "wrong man"})
    assert r.status_code == 200 and r.json()["written"] and r.json()["outcome_id"] == oid
    assert "automatic_fit" in r.json()["calibration"]
    label = s.store.show(oid)["current_label"]
    assert label["label"] == 0 and label["source"] == "user" and label["note"] == "wrong man"
    again = s.client.post("/v1/feedback", json={"outcome_id": oid, "correct": True}).json()
    assert again["replaced"]["label"] == 0 and s.store.show(oid)["current_label"]["label"] == 1
    missing = s.client.post("/v1/feedback", json={"outcome_id": "abcdef123456", "correct": True})
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "outcome_id"


def test_outcomes_are_paged_newest_first_and_searched(serve):
    s = serve([GOOD])
    asked = [f"Who saved the sailors of the Greyling, question {i}?" for i in range(5)]
    ids = [s.client.post("/v1/ask", json={"question": q}).json()["outcome_id"] for q in asked]
    page = s.client.get("/v1/outcomes", params={"limit": 2}).json()
    assert page["total"] == 5 and [o["id"] for o in page["outcomes"]] == ids[::-1][:2]
    page2 = s.client.get("/v1/outcomes", params={"limit": 2, "offset": 2}).json()
    assert [o["id"] for o in page2["outcomes"]] == ids[::-1][2:4]
    found = s.client.get("/v1/outcomes", params={"q": "sailors", "limit": 3}).json()
    assert len(found["outcomes"]) == 3 and found["more"] is True
    assert s.client.get("/v1/outcomes", params={"q": "zeppelin"}).json()["outcomes"] == []
    one = s.client.get(f"/v1/outcomes/{ids[0]}").json()
    assert one["question"] == asked[0] and one["attempts"]
    assert s.client.get("/v1/outcomes/abcdef999").status_code == 404


def test_memory_stats_and_report(serve):
    s = serve([REFUSE, GOOD])
    s.client.post("/v1/ask", json={"question": QUESTION})
    stats = s.client.get("/v1/memory/stats").json()
    assert stats["outcomes"] == 1 and stats["attempts"] == 2 and "calibration" in stats
    report = s.client.get("/v1/memory/report").json()
    assert report["stats"]["outcomes"] == 1
    assert report["failures"] and report["failures"][0]["top_repair"]
    assert report["strategy_by_class"][0]["query_class"] == "who"
    assert report["reliability"]["n"] == 1 and len(report["learning_curve"]) == 1
