"""Bad requests (4xx naming the field), the token, the Host check, body limits and CORS."""

from __future__ import annotations

import httpx
import pytest

from self_improving_rag.serve.app import ServeSettings
from tests.serve.conftest import GOOD, QUESTION

TOKEN = "s3cret-token-for-the-tests-0123"


def _error(r, status: int, field: str | None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field, err
    return err["message"]


@pytest.mark.parametrize("body, status, field, said", [
    ({}, 422, "question", "Field required"),
    ({"question": ""}, 422, "question", "at least 1 character"),
    ({"question": "   ?!  "}, 422, "question", "no letters or digits"),
    ({"question": "why " * 600}, 422, "question", "more than 2000"),
    ({"question": 42}, 422, "question", "string"),
    ({"question": QUESTION, "loop": "yes"}, 422, "loop", "boolean"),
    ({"question": QUESTION, "stream": 1}, 422, "stream", "boolean"),
    ({"question": QUESTION, "colour": "red"}, 422, "colour", "Extra inputs"),
    ({"question": QUESTION, "strategy": {"top_k": 0}}, 422, "strategy.top_k", "greater than or equal to 1"),
    ({"question": QUESTION, "strategy": {"chunker": "pages"}}, 422, "strategy.chunker", "'fixed'"),
    ({"question": QUESTION, "strategy": {"speed": 3}}, 422, "strategy.speed", "Extra inputs"),
    ([QUESTION], 422, "body", "dictionary"),
])
def test_a_bad_field_is_a_4xx_json_error_naming_it(serve, body, status, field, said):
    s = serve([GOOD])
    assert said in _error(s.client.post("/v1/ask", json=body), status, field)
    assert s.store.stats()["outcomes"] == 0


def test_bad_json_and_no_body_are_4xx_json_errors(serve):
    s = serve([GOOD])
    r = s.client.post("/v1/ask", content=b'{"question": "Who', headers={"Content-Type": "application/json"})
    assert "not valid JSON" in _error(r, 400, "body")
    assert "JSON body" in _error(s.client.post("/v1/ask"), 422, "body")
    _error(s.client.post("/v1/feedback", json={"outcome_id": "xyz", "correct": True}), 422, "outcome_id")
    _error(s.client.post("/v1/feedback", json={"outcome_id": "abcdef12", "correct": "no"}), 422, "correct")
    _error(s.client.get("/v1/outcomes", params={"limit": 0}), 422, "limit")
    _error(s.client.get("/v1/outcomes", params={"q": "***"}), 422, "q")
    _error(s.client.post("/v1/search", json={"question": QUESTION, "strategy": {"retriever": "grep"}}), 422,
           "strategy.retriever")


def test_a_chunker_the_index_does_not_hold_is_named(serve, monkeypatch):
    s = serve([GOOD])
    monkeypatch.setattr(s.engine.searcher, "available_chunkers", lambda: ["section"])
    r = s.client.post("/v1/ask", json={"question": QUESTION, "strategy": {"chunker": "fixed"}})
    assert "no 'fixed' chunks" in _error(r, 422, "strategy.chunker")
    r = s.client.post("/v1/ask", json={"question": QUESTION, "stream": True, "strategy": {"chunker": "fixed"}})
    assert r.status_code == 200 and '"status": 422' in r.text and "event: error" in r.text


def test_a_body_over_the_limit_is_413(serve):
    s = serve([GOOD], ServeSettings(max_body_bytes=2048))
    big = {"question": QUESTION, "pad": "x" * 4000}
    _error(s.client.post("/v1/ask", json=big), 413, "body")

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"question": "' + b"x" * 3000
        yield b'"}'

    r = s.client.post("/v1/ask", content=chunks(), headers={"Content-Type": "application/json"})
    _error(r, 413, "body")


def test_with_a_token_every_request_needs_it(serve):
    s = serve([GOOD], ServeSettings(token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"})
    assert s.client.post("/v1/ask", json={"question": QUESTION}).status_code == 200
    with httpx.Client(base_url=s.url) as anonymous:
        for method, path in (("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/"), ("GET", "/static/app.js"),
                             ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/v1/outcomes"),
                             ("POST", "/v1/ask"), ("POST", "/v1/chat/completions")):
            r = anonymous.request(method, path, json={"question": QUESTION})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
            assert r.json()["error"]["field"] == "Authorization"
        wrong = anonymous.get("/v1/outcomes", headers={"Authorization": f"Bearer {TOKEN[:-1]}x"})
        assert wrong.status_code == 401
        assert anonymous.get("/", params={"token": "nope-nope-nope-nope"}).status_code == 401
        # The page opened once with its token keeps it in a cookie, and drops it from the address.
        r = anonymous.get("/", params={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == "/"
        assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
        assert anonymous.get("/").status_code == 200  # the cookie is sent now
        assert anonymous.get("/v1/outcomes").json()["total"] == 1
    assert s.store.stats()["outcomes"] == 1  # the refused asks recorded nothing


def test_a_request_for_another_host_is_refused_on_loopback(serve):
    s = serve([GOOD])
    r = s.client.get("/healthz", headers={"Host": "evil.example:8000"})
    assert r.status_code == 421 and r.json()["error"]["field"] == "Host"
    for host in ("localhost:1234", "127.0.0.1", "[::1]:8000"):
        assert s.client.get("/healthz", headers={"Host": host}).status_code == 200, host


def test_no_cors_unless_configured(serve):
    s = serve([GOOD])
    pre = s.client.options("/v1/ask", headers={"Origin": "https://elsewhere.example",
                                               "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in pre.headers
    r = s.client.get("/healthz", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in r.headers
    c = serve([GOOD], ServeSettings(cors_origins=("https://app.example",)))
    pre = c.client.options("/v1/ask", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"


def test_the_page_is_served_with_a_policy_that_runs_its_own_scripts_only(serve):
    s = serve([GOOD])
    for path in ("/", "/memory", "/static/app.js", "/static/memory.js", "/static/style.css"):
        r = s.client.get(path)
        assert r.status_code == 200, path
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    assert "<form id=\"ask-form\"" in s.client.get("/").text


def test_settings_refuse_a_weak_token():
    with pytest.raises(ValueError, match="16 to 256"):
        ServeSettings(token="short")
    with pytest.raises(ValueError, match="16 to 256"):
        ServeSettings(token="has spaces in it; and more")
