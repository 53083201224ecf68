"""Chunkers, registered by name."""

from __future__ import annotations

from typing import Any

from .base import Chunker
from .fixed import FixedChunker
from .section import SectionChunker
from .semantic import SemanticChunker

CHUNKERS: dict[str, type] = {
    "fixed": FixedChunker,
    "section": SectionChunker,
    "semantic": SemanticChunker,
}


def make_chunker(name: str, params: dict[str, Any], embed_limit: int) -> Chunker:
    """Build a registered chunker from its config parameters."""
    if name not in CHUNKERS:
        raise ValueError(f"unknown chunker {name!r}; choose one of {', '.join(CHUNKERS)}")
    return CHUNKERS[name](**params, embed_limit=embed_limit)


__all__ = ["CHUNKERS", "Chunker", "FixedChunker", "SectionChunker", "SemanticChunker", "make_chunker"]
