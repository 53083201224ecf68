"""The listening socket ``sirag serve`` hands to uvicorn."""

from __future__ import annotations

import socket

from ..errors import SiragError


def listen(host: str, port: int) -> socket.socket:
    """A listening socket for uvicorn (``port`` 0: any free one). Made from getaddrinfo's answer,
    so that it is a TCP socket by protocol too: asyncio turns Nagle's algorithm off only on those,
    and with it on, a reply written in two parts waits ~40 ms for the client's delayed ACK."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise SiragError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port, or stop "
                         "what uses it") from None
    sock.set_inheritable(True)
    return sock
