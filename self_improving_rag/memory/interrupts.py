"""Ctrl-C while SQLite runs the memory store's SQL.

SQLite turns whatever a Python SQL function raises into its own failure, so a Ctrl-C that lands in
one of the store's functions would reach the user as a database error. The store's functions are
wrapped (:func:`interruptible`) to mark such an interrupt, and its reads hold Ctrl-C
(:func:`sigint_deferred`) until SQLite has returned.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Set when Ctrl-C lands inside one of the store's SQL functions. SQLite turns whatever a Python
#: function raises into ``OperationalError("user-defined function raised exception")``, which
#: would reach the user as an internal error; the store raises KeyboardInterrupt in its place.
_INTERRUPTED_IN_SQL = threading.Event()


def interruptible(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a SQL function: a Ctrl-C inside it is marked for :func:`interrupted_in_sql`."""
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except KeyboardInterrupt:
            _INTERRUPTED_IN_SQL.set()
            raise
    return call


def interrupted_in_sql(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's report of a Ctrl-C that landed in one of the store's SQL
    functions (and clears the mark, so each interrupt is told once)."""
    if isinstance(exc, sqlite3.OperationalError) and _INTERRUPTED_IN_SQL.is_set():
        _INTERRUPTED_IN_SQL.clear()
        return True
    return False


@contextmanager
def sigint_deferred(conn: sqlite3.Connection) -> Iterator[None]:
    """Run SQL with Ctrl-C held: the signal interrupts the statement (``conn.interrupt()``) and is
    raised as KeyboardInterrupt once SQLite has returned. Python would otherwise raise it at the
    next Python step, often inside one of the SQL functions, which SQLite reports as its own
    failure. Only the main thread can install a handler; elsewhere SQL runs as it is. Used for
    reads (where the SQL functions run), not for writes, whose lock waits must stay interruptible."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        held.append(signum)
        conn.interrupt()

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        yield
        return
    try:
        yield
    except BaseException:
        if held:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


__all__ = ["interrupted_in_sql", "interruptible", "sigint_deferred"]
