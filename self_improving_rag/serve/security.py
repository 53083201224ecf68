"""Safe defaults, as one ASGI middleware in front of everything (API, page, static files, docs):

- a request body larger than ``max_body_bytes`` is answered 413 before it is read whole;
- with a token, every request needs it: ``Authorization: Bearer TOKEN``, or the cookie the page
  gets when it is opened once as ``/?token=TOKEN``; compared in constant time;
- bound to loopback, a request whose Host header names another host is refused (a web page
  elsewhere cannot reach the server through a DNS name rebound to 127.0.0.1);
- the page and its files carry a Content-Security-Policy that runs only the page's own scripts.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from .errors import body, dumps

COOKIE = "sirag_token"
LOOPBACK_NAMES = ("localhost",)
#: The page's policy: its own scripts, styles and data only; no frames, no plugins.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
PAGE_PREFIXES = ("/static/",)
PAGES = ("/", "/memory")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine only."""
    h = host.strip().strip("[]").lower()
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header, without its port: ``[::1]:8000`` -> ``::1``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _json(send: Send, status: int, data: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = dumps(data).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


def _replay(whole: bytes, receive):
    """A receive that gives ``whole`` as the body, then what the client sends (its disconnect)."""
    given = False

    async def replay():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": whole, "more_body": False}
        return await receive()

    return replay


class Guard:
    def __init__(self, app, token: str | None = None, max_body_bytes: int = 65536, loopback_only: bool = True) -> None:
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.loopback_only = loopback_only

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback_only and not is_loopback(_host_name(headers.get("host", "localhost"))):
            return await _json(send, 421, body("forbidden_host", "this server answers requests for 127.0.0.1 and "
                                                                  "localhost only", "Host"))
        if self.token is not None:
            refused = self._auth(scope, headers)
            if refused is not None:
                return await refused(send)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return await _json(send, 400, body("invalid_request", "Content-Length is not a number", "Content-Length"))
            if int(length) > self.max_body_bytes:
                return await self._too_large(send)
        if length is None and scope["method"] in ("POST", "PUT", "PATCH"):
            # Sent in chunks, without a length: read here, up to the limit, and handed on whole.
            whole = await self._read_limited(receive)
            if whole is None:
                return await self._too_large(send)
            receive = _replay(whole, receive)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = self._with_headers(scope["path"], message)
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _read_limited(self, receive) -> bytes | None:
        """The whole body, or None once it passes ``max_body_bytes`` (or the client left)."""
        parts, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            parts.append(message.get("body", b""))
            seen += len(parts[-1])
            if seen > self.max_body_bytes:
                return None
            if not message.get("more_body"):
                return b"".join(parts)

    async def _too_large(self, send: Send) -> None:
        await _json(send, 413, body("too_large", f"the request body is larger than {self.max_body_bytes} bytes",
                                    "body"))

    def _auth(self, scope, headers: dict[str, str]):
        """None when the request carries the token; else what to answer."""
        given = None
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if given is None and "cookie" in headers:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(headers["cookie"])
            except Exception:  # noqa: BLE001 - a cookie header we cannot read holds no token
                jar = SimpleCookie()
            if COOKIE in jar:
                given = jar[COOKIE].value
        if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if scope["path"] in PAGES and scope["method"] == "GET" and "token" in query and hmac.compare_digest(
                query["token"].encode(), self.token.encode()):
            # The page opened with its token: keep it in a cookie (not readable by scripts, never sent
            # by other sites) and reload without it, out of the address bar and the history.
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            where = scope["path"] + (f"?{rest}" if rest else "")

            async def redirect(send: Send) -> None:
                await send({"type": "http.response.start", "status": 303, "headers": [
                    (b"location", where.encode("latin-1")), (b"content-length", b"0"),
                    (b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode("latin-1")),
                    (b"cache-control", b"no-store")]})
                await send({"type": "http.response.body", "body": b""})

            return redirect

        async def unauthorized(send: Send) -> None:
            await _json(send, 401, body("unauthorized", "this server needs its token: send the header "
                                                        "'Authorization: Bearer TOKEN' (the page: open /?token=TOKEN)",
                                        "Authorization"), [(b"www-authenticate", b"Bearer")])

        return unauthorized

    @staticmethod
    def _with_headers(path: str, message: dict[str, Any]) -> dict[str, Any]:
        extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
        if path in PAGES or path.startswith(PAGE_PREFIXES):
            extra += [(b"content-security-policy", CSP.encode()), (b"x-frame-options", b"DENY")]
        return {**message, "headers": [*message.get("headers", []), *extra]}
