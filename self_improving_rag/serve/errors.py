"""Errors as JSON: ``{"error": {"type", "message", "field"}}`` with a fitting status, for a bad
body or field (4xx, naming the field), a full queue (503 with Retry-After), a request out of
time (504) and the engine's own errors."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import GenerationError, GeneratorUnavailableError, InputError, MemoryStoreError, SiragError
from .worker import Cancelled, NotReady, QueueFull

log = logging.getLogger(__name__)

#: Said when a client went away: nobody reads it (nginx's "client closed request").
CLIENT_GONE = 499


class ApiError(Exception):
    """An error to answer as it is."""

    def __init__(self, status: int, message: str, field: str | None = None, kind: str = "invalid_request",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.kind = status, message, field, kind
        self.headers = headers or {}


class FieldError(InputError):
    """An input error that names the request field at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """JSON a browser can parse: a NaN or infinity (a score that could not be computed) is null."""
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def body(status_kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    # "param" is where OpenAI clients look for the field.
    return {"error": {"type": status_kind, "message": message, "field": field, "param": field}}


def as_api_error(exc: BaseException) -> ApiError:
    """The status and message an exception is answered with."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, QueueFull):
        return ApiError(503, str(exc), kind="overloaded", headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, NotReady):
        return ApiError(503, str(exc), kind="not_ready")
    if isinstance(exc, Cancelled):
        return ApiError(504 if exc.timed_out else CLIENT_GONE, str(exc), kind="timeout" if exc.timed_out else "cancelled")
    if isinstance(exc, InputError):
        return ApiError(422, str(exc), field=getattr(exc, "field", None))
    if isinstance(exc, MemoryStoreError) and str(exc).startswith("no outcome"):
        return ApiError(404, str(exc), field="outcome_id", kind="not_found")
    if isinstance(exc, GeneratorUnavailableError):
        return ApiError(503, str(exc), kind="generator_unavailable")
    if isinstance(exc, GenerationError):
        return ApiError(502, str(exc), kind="generation_failed")
    if isinstance(exc, SiragError):
        return ApiError(500, str(exc), kind="engine_error")
    log.error("unexpected error", exc_info=exc)
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}", kind="internal_error")


def error_response(exc: BaseException) -> SafeJSONResponse:
    e = as_api_error(exc)
    return SafeJSONResponse(body(e.kind, e.message, e.field), status_code=e.status, headers=e.headers)


def _field(loc: tuple) -> str:
    """``("body", "strategy", "top_k")`` -> ``strategy.top_k``; the body itself is ``body``."""
    where = [str(p) for p in loc[1:]] if loc and loc[0] in ("body", "query", "path") else [str(p) for p in loc]
    return ".".join(where) or "body"


async def validation_error(request: Request, exc: Exception) -> SafeJSONResponse:
    """FastAPI's RequestValidationError, as one error naming the first field at fault."""
    errors = list(getattr(exc, "errors", lambda: [])())
    if not errors:
        return SafeJSONResponse(body("invalid_request", "the request is not valid", "body"), status_code=422)
    first = errors[0]
    if first.get("type") == "json_invalid":
        ctx = (first.get("ctx") or {}).get("error", "")
        return SafeJSONResponse(body("invalid_json", f"the body is not valid JSON ({ctx})".replace(" ()", ""), "body"),
                                status_code=400)
    loc = tuple(first.get("loc") or ())
    field = _field(loc)
    if first.get("type") == "missing" and loc == ("body",):
        return SafeJSONResponse(body("invalid_request", "the request needs a JSON body", "body"), status_code=422)
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return SafeJSONResponse(body("invalid_request", f"{field}: {msg}{more}", field), status_code=422)
