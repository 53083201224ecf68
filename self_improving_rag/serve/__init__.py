"""``sirag serve``: the engine as an HTTP service with a web page that shows the self-correction
as it happens. FastAPI and uvicorn come with the ``serve`` extra; :func:`create_app` builds the
app around an engine (see :mod:`.app`)."""

from __future__ import annotations

__all__ = ["ServeSettings", "create_app"]


def __getattr__(name: str):
    if name in __all__:  # FastAPI is imported only when the server is wanted
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
