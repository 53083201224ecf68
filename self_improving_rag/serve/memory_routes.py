"""The memory store over HTTP: feedback on an answer, outcomes (paged, searched), one outcome,
the stats of `sirag memory stats` and the figures of `sirag memory report`, live. The store is
shared with the engine: its lock keeps their transactions apart."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import FastAPI, Query

from ..errors import InputError, MemoryStoreError
from .errors import ApiError, as_api_error
from .schemas import FeedbackRequest

#: Outcomes a page holds at most.
MAX_PAGE = 100


def add_memory_routes(app: FastAPI, engine) -> None:
    def store():
        if engine.memory is None:
            raise ApiError(404, "this server has no memory store", kind="no_memory")
        return engine.memory

    @app.post("/v1/feedback", tags=["memory"], summary="Label an answer right or wrong (`sirag feedback`)")
    def feedback(req: FeedbackRequest) -> dict[str, Any]:
        s = store()
        try:
            outcome = s.show(req.outcome_id)
            seen: dict[str, Any] = {}
            written = s.add_feedback(outcome["id"], correct=req.correct, source="user", note=req.note,
                                     unless_current=True, current=seen)
        except MemoryStoreError as exc:
            e = as_api_error(exc)
            raise ApiError(e.status if e.status == 404 else 422, str(exc), field="outcome_id",
                           kind=e.kind if e.status == 404 else "invalid_request") from exc
        from ..evaluation.calibrate import calibration_status

        before = seen or None
        same = before is not None and before["label"] == int(req.correct)
        c = engine.config.calibration
        # Labels are fitted on by `sirag calibrate`, and by the automatic fit at the engine's next start.
        return {"outcome_id": outcome["id"], "correct": req.correct, "source": "user", "note": req.note,
                "replaced": before if written and not same else None, "written": written,
                "refusal": bool(outcome["refused"]),
                "calibration": calibration_status(s, c.auto_fit, c.auto_min_labels, c.auto_refit_after)}

    @app.get("/v1/outcomes", tags=["memory"], summary="Recorded outcomes, newest first, or those matching q")
    def outcomes(q: Optional[str] = Query(None, max_length=500, description="words every match holds"),
                 limit: int = Query(20, ge=1, le=MAX_PAGE), offset: int = Query(0, ge=0, le=10**9)) -> dict[str, Any]:
        s = store()
        if not q or not q.strip():
            return {"q": None, "limit": limit, "offset": offset, **s.recent(limit, offset)}
        from ..memory.analysis import search_words

        if not search_words(q):
            raise ApiError(422, "q holds no word to look for (quotes, punctuation and operators are not searched)",
                           field="q")
        try:
            rows = s.search(q, limit=offset + limit + 1)  # one more: whether another page follows
        except InputError as exc:
            raise ApiError(422, str(exc), field="q") from exc
        page = rows[offset:offset + limit]
        labels = s.current_labels([r["id"] for r in page])
        return {"q": q, "limit": limit, "offset": offset, "outcomes": [{**r, "label": labels.get(r["id"])} for r in page],
                "more": len(rows) > offset + limit}

    @app.get("/v1/outcomes/{outcome_id}", tags=["memory"], summary="One outcome with its attempts and labels")
    def outcome(outcome_id: str) -> dict[str, Any]:
        try:
            return store().show(outcome_id)
        except MemoryStoreError as exc:
            e = as_api_error(exc)
            raise ApiError(e.status if e.status == 404 else 422, str(exc), field="outcome_id", kind=e.kind) from exc

    @app.get("/v1/memory/stats", tags=["memory"], summary="Totals and the weights in use (`sirag memory stats`)")
    def stats() -> dict[str, Any]:
        from ..evaluation.calibrate import calibration_status

        c = engine.config.calibration
        s = store()
        with s.snapshot():
            return {**s.stats(), "calibration": calibration_status(s, c.auto_fit, c.auto_min_labels,
                                                                    c.auto_refit_after)}

    @app.get("/v1/memory/report", tags=["memory"], summary="The figures of `sirag memory report`, for the memory page")
    def report(window: int = Query(20, ge=1, le=1000)) -> dict[str, Any]:
        s = store()
        with s.snapshot():  # every figure from the same moment
            return {"stats": s.stats(), "strategy_by_class": s.strategy_by_class(), "strategies": s.strategies(),
                    "failures": s.failures(), "failure_timeline": s.failure_timeline(),
                    "confidence": s.confidence_histogram(), "reliability": s.reliability(),
                    "learning_curve": s.learning_curve(window)}
