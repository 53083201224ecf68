"""``sirag serve``: the engine as an HTTP service (the API, its OpenAPI page at /docs, and the web
page at /). FastAPI and uvicorn are imported only when it runs (the ``serve`` extra)."""

from __future__ import annotations

import argparse
import os
import sys

from ..config import Config
from ..errors import InputError
from .common import add_command, command, make_engine

#: Where the token may come from instead of --token (which other users can read in `ps`).
TOKEN_ENV = "SIRAG_SERVE_TOKEN"


@command
def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    """Serve the engine over HTTP: the API (OpenAPI page at /docs) and a web page at / that shows
    each attempt, its checks and its repair as the answer is written.

    Example: sirag serve --index index/sherlock   then open http://127.0.0.1:8000/
    One engine, its models loaded at start (GET /readyz says when); asks wait in a queue of
    --queue-size for it, and one more is answered 503 with Retry-After. Every answer is recorded
    in the memory store, as `sirag ask` records it. It listens on 127.0.0.1 only, unless --host
    says otherwise, which then needs a token (--token, or the SIRAG_SERVE_TOKEN variable) that
    every request must carry (Authorization: Bearer TOKEN; the page: open /?token=TOKEN).
    """
    from ..serve.listen import listen
    from ..serve.security import is_loopback

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if not is_loopback(args.host) and token is None:
        raise InputError(f"--host {args.host} lets other machines reach the server: give it a token with --token, or "
                         f"in the {TOKEN_ENV} variable (e.g. export {TOKEN_ENV}=$(python3 -c 'import secrets; "
                         "print(secrets.token_urlsafe(32))')); every request must then carry it")
    try:
        import uvicorn

        from ..serve.app import ServeSettings, create_app
    except ImportError as exc:
        raise InputError(f"sirag serve needs FastAPI and uvicorn ({exc.name} is missing): "
                         "pip install 'self_improving_rag[serve]'") from exc
    try:
        settings = ServeSettings(token=token, queue_size=args.queue_size, time_budget_s=args.time_budget,
                                 max_body_bytes=args.max_body_kb * 1024, cors_origins=tuple(args.cors_origin or ()),
                                 loopback_only=is_loopback(args.host))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    sock = listen(args.host, args.port)  # a port in use is said before any model loads
    engine = make_engine(args, config)
    try:
        app = create_app(engine, settings)
        host = f"[{args.host}]" if ":" in args.host else args.host
        port = sock.getsockname()[1]
        print(f"serving {engine.corpus} on http://{host}:{port}/ (API docs: /docs; ready when GET /readyz says "
              "so); Ctrl-C stops", file=sys.stderr)
        # Ctrl-C waits a few seconds for the requests in flight, then stops their loops.
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=args.verbose, timeout_keep_alive=30,
                                               timeout_graceful_shutdown=5,
                                               log_level="info" if args.verbose else "warning"))
        server.run(sockets=[sock])
    finally:
        engine.close()
        if engine.memory is not None:
            engine.memory.close()
        sock.close()
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``serve`` to the ``sirag`` parser."""
    from ..batch import int_at_least

    sp = add_command(sub, "serve", cmd_serve, common)
    sp.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                        "only; any other needs --token)")
    sp.add_argument("--port", type=int_at_least(0, 65535), default=8000, help="port (default 8000; 0: any free one)")
    sp.add_argument("--token", help=f"the token every request must carry (default: the {TOKEN_ENV} variable)")
    sp.add_argument("--queue-size", type=int_at_least(1, 10000), default=16,
                    help="asks that may wait for the engine (default 16); one more is answered 503")
    sp.add_argument("--time-budget", type=float, default=300.0, metavar="SECONDS",
                    help="each request's time, queue included (default 300); past it the loop stops and the "
                         "request is answered 504, with nothing recorded")
    sp.add_argument("--max-body-kb", type=int_at_least(1, 1024 * 1024), default=64,
                    help="largest request body, in KiB (default 64)")
    sp.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                    help="a web origin allowed to call the API from its pages (repeatable; default: none)")
