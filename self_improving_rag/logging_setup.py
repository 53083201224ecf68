"""Logging: human lines on stderr (with --verbose) and JSON lines appended under logs/."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path


class OneLineFormatter(logging.Formatter):
    """Console lines without tracebacks: those go to the JSON log (and to the terminal only with --debug).

    Warnings and errors read like the CLI's own messages ("warning: ...", "error: ..."); the
    progress lines of --verbose keep their level and logger name.
    """

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            if record.levelno >= logging.ERROR:
                return f"error: {record.getMessage()}"
            if record.levelno >= logging.WARNING:
                return f"warning: {record.getMessage()}"
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = saved


class JsonLinesFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def console_handler(verbose: bool = False) -> logging.Handler:
    """The terminal's handler: warnings and errors as one line each (progress lines with --verbose)."""
    console = logging.StreamHandler()
    console.setLevel(logging.INFO if verbose else logging.WARNING)
    console.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    # Records marked file_only (e.g. the traceback of an unexpected error) stay out of the terminal.
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    return console


def setup_logging(log_dir: str | None, verbose: bool = False, command: str = "sirag") -> Path | None:
    """Configure the root logger; returns the JSON-lines file, or None when it cannot be written."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    console = console_handler(verbose)
    root.addHandler(console)
    for noisy in ("sentence_transformers", "transformers", "urllib3", "httpx", "faiss", "bm25s", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not log_dir:
        return None
    path = Path(log_dir) / f"sirag-{time.strftime('%Y%m%d', time.gmtime())}.jsonl"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        console.handle(logging.makeLogRecord({"levelno": logging.WARNING, "levelname": "WARNING", "name": "sirag",
                                              "msg": f"cannot write logs to {path}; logging to stderr only"}))
        return None
    fh.setLevel(logging.DEBUG if verbose else logging.INFO)
    fh.setFormatter(JsonLinesFormatter())
    root.addHandler(fh)
    logging.getLogger("sirag").info("start %s pid=%d", command, os.getpid())
    return path
