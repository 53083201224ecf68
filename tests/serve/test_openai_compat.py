"""POST /v1/chat/completions: the engine as an OpenAI chat model, with its sources in the reply."""

from __future__ import annotations

import pytest

from self_improving_rag.serve.app import ServeSettings
from tests.serve.conftest import GOOD, QUESTION, REFUSE, parse_sse

TOKEN = "a-token-for-openai-clients-42"


def test_a_chat_completion_answers_the_last_user_message_with_sources(serve):
    s = serve([GOOD])
    r = s.client.post("/v1/chat/completions", json={
        "model": "anything", "temperature": 0.3,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"},
                     {"role": "assistant", "content": "Ask me."},
                     {"role": "user", "content": [{"type": "text", "text": QUESTION}]}]})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion" and data["model"] == "anything"
    content = data["choices"][0]["message"]["content"]
    assert content.startswith(GOOD) and "\n\nSources:\n[1] harbour, " in content
    assert data["choices"][0]["finish_reason"] == "stop" and data["usage"]["total_tokens"] > 0
    assert data["sirag"]["question"] == QUESTION and s.store.show(data["sirag"]["outcome_id"])
    assert s.client.get("/v1/models").json()["data"][0]["id"] == "sirag"


def test_a_refusal_says_so_with_the_closest_passages_and_a_stream_ends_with_done(serve):
    s = serve([REFUSE])
    r = s.client.post("/v1/chat/completions", json={"stream": True, "messages": [
        {"role": "user", "content": "What colour was the harbour master's umbrella?"}]})
    chunks = parse_sse(r.text)
    assert chunks[-1] == ("message", "[DONE]")
    text = "".join(c["choices"][0]["delta"].get("content", "") for _, c in chunks[:-1])
    assert text.startswith("I cannot answer this from the documents. (") and "Closest passages:" in text
    assert chunks[-2][1]["choices"][0]["finish_reason"] == "stop" and chunks[-2][1]["sirag"]["refused"]


def test_chat_errors_name_the_field(serve):
    s = serve([GOOD])
    r = s.client.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "hi"}]})
    assert r.status_code == 422 and r.json()["error"]["param"] == "messages"
    r = s.client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 422 and r.json()["error"]["field"] == "messages"


def test_the_openai_sdk_uses_the_engine_as_a_model(serve):
    openai = pytest.importorskip("openai")
    s = serve([GOOD], ServeSettings(token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"})
    client = openai.OpenAI(base_url=f"{s.url}/v1", api_key=TOKEN, max_retries=0)
    reply = client.chat.completions.create(model="sirag", messages=[{"role": "user", "content": QUESTION}])
    assert reply.choices[0].message.content.startswith(GOOD)
    assert reply.model_extra["sirag"]["sources"][0]["doc"] == "harbour"
    streamed = client.chat.completions.create(model="sirag", stream=True,
                                              messages=[{"role": "user", "content": QUESTION}])
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices).startswith(GOOD)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{s.url}/v1", api_key="not-the-token", max_retries=0).chat.completions.create(
            model="sirag", messages=[{"role": "user", "content": QUESTION}])
