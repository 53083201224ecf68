"""An OpenAI-compatible ``POST /v1/chat/completions`` (and ``GET /v1/models``), so that chat
clients and the ``openai`` SDK can use the engine as a model: the last user message is the
question; the reply's content is the answer (or the refusal) followed by its sources, and
``sirag`` holds the whole ask JSON. A stream sends the content once the loop has settled on it
(a retry's text would otherwise have to be taken back), with keep-alive comments meanwhile."""

from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from ..questions import check_question
from ..errors import InputError
from ..generation.prompts import REFUSAL_PHRASE
from .errors import ApiError, SafeJSONResponse, as_api_error, dumps, error_response
from .events import ask_job
from .schemas import ChatRequest

MODEL = "sirag"


def content(result: dict[str, Any]) -> str:
    """The answer, or the refusal and its reason, then the sources (the closest passages)."""
    lines = [f"[{s['number']}] {s['doc']}, {s['section']} (characters {s['start']}-{s['end']})"
             for s in result["sources"]]
    if result["refused"]:
        head = f"{REFUSAL_PHRASE} ({result['refusal_reason']})"
        return head + ("\n\nClosest passages:\n" + "\n".join(lines) if lines else "")
    return (result["answer"] or "") + ("\n\nSources:\n" + "\n".join(lines) if lines else "")


def usage(result: dict[str, Any]) -> dict[str, int]:
    p = sum(a["prompt_tokens"] for a in result["attempts"])
    c = sum(a["completion_tokens"] for a in result["attempts"])
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def add_openai_routes(app: FastAPI, engine) -> None:
    from .app import KEEPALIVE, TIMED_OUT, job_events, result_of  # the app's waiting, shared
    from .worker import ERROR, RESULT

    @app.get("/v1/models", tags=["openai"], summary="The one model this server is (OpenAI format)")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "sirag"}]}

    @app.post("/v1/chat/completions", tags=["openai"],
              summary="The engine as an OpenAI chat model: the last user message is the question")
    async def chat(req: ChatRequest, request: Request):
        try:
            question = check_question(req.question())
        except InputError as exc:
            raise ApiError(422, str(exc), field="messages") from exc
        job = app.state.submit(ask_job(engine, question, None, None))
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), req.model or MODEL
        if not req.stream:
            try:
                result = await result_of(job, request)
            except Exception as exc:  # noqa: BLE001 - answered as error_response says
                return error_response(exc)
            return SafeJSONResponse({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content(result)},
                             "finish_reason": "stop"}],
                "usage": usage(result), "sirag": result})

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return f"data: {dumps(data)}\n\n"

        async def chunks() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            try:
                async for name, data in job_events(job, request):
                    if name == KEEPALIVE:
                        yield ": waiting\n\n"
                    elif name == TIMED_OUT:
                        yield f"data: {dumps({'error': {'type': data.kind, 'message': data.message}})}\n\n"
                    elif name == ERROR:
                        e = as_api_error(data)
                        yield f"data: {dumps({'error': {'type': e.kind, 'message': e.message, 'param': e.field}})}\n\n"
                    elif name == RESULT:
                        yield chunk({"content": content(data)})
                        yield chunk({}, "stop", usage=usage(data), sirag=data)
                        yield "data: [DONE]\n\n"
            finally:
                if not job.finished.is_set():
                    job.cancel()

        return StreamingResponse(chunks(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

