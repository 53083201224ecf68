"""Download Project Gutenberg books by id from a configurable mirror (``sirag fetch-gutenberg``)."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

from ..errors import IngestionError

log = logging.getLogger(__name__)


def book_url(template: str, book_id: int) -> str:
    """The mirror URL of a book: ``{id}`` in the template is replaced by the id."""
    if "{id}" not in template:
        raise IngestionError(f"ingestion.gutenberg_mirror {template!r} has no {{id}} placeholder; "
                             "use e.g. https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt")
    url = template.replace("{id}", str(book_id))
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:  # a bad port or host: one line naming the setting
        raise IngestionError(f"ingestion.gutenberg_mirror {template!r} is not a valid URL ({exc}); "
                             "use e.g. https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise IngestionError(f"ingestion.gutenberg_mirror {template!r} is not an http(s) URL with a host; "
                             "use e.g. https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt")
    return url


def parse_ids(raw: list[str]) -> list[int]:
    ids = []
    for r in raw:
        # ASCII digits only: str.isdigit() also holds for "²", which int() refuses.
        if not (r.isascii() and r.isdigit()) or int(r) <= 0:
            raise IngestionError(f"Gutenberg id {r!r} is not a positive number; use e.g. sirag fetch-gutenberg 1661")
        if int(r) not in ids:  # a repeated id is fetched once
            ids.append(int(r))
    return ids


def fetch_gutenberg(ids: list[int], dest: Path, template: str, timeout_s: float = 60.0, retries: int = 2,
                    max_bytes: int = 64 * 2**20) -> tuple[list[Path], list[Path]]:
    """Download each book once into ``dest`` (``pg<id>.txt``); an existing file is reused.
    Returns the files downloaded now and the files reused, each in the order of ``ids``."""
    import httpx

    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    reused: list[Path] = []
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        for book_id in ids:
            target = dest / f"pg{book_id}.txt"
            if target.is_file() and target.stat().st_size > 0:
                reused.append(target)
                continue
            url = book_url(template, book_id)
            data = _download(client, url, retries, max_bytes)
            if b"*** START OF" not in data.upper() and b"***START OF" not in data.upper():
                log.warning("%s has no Project Gutenberg START marker; keeping the whole text", url)
            fd, tmp = tempfile.mkstemp(prefix=".download-", dir=dest)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
            out.append(target)
    return out, reused


def _download(client, url: str, retries: int, max_bytes: int) -> bytes:
    import httpx

    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            with client.stream("GET", url) as r:
                if r.status_code == 404:
                    raise IngestionError(f"{url}: not found (HTTP 404); check the book id and ingestion.gutenberg_mirror")
                if r.status_code >= 400:
                    raise IngestionError(f"{url}: HTTP {r.status_code}; try again later or use another mirror")
                chunks, size = [], 0
                for block in r.iter_bytes():
                    size += len(block)
                    if size > max_bytes:
                        raise IngestionError(f"{url}: larger than {max_bytes // 2**20} MB; raise ingestion.max_file_mb")
                    chunks.append(block)
                return b"".join(chunks)
        except (httpx.TransportError,) as exc:
            last = exc
            time.sleep(min(4.0, 0.5 * 2 ** attempt))
    raise IngestionError(f"{url}: cannot download ({last}); check the network or ingestion.gutenberg_mirror")
