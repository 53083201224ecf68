"""What an ingest did (:class:`IngestReport`), and the lines the CLI prints from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .chunkers.base import CHUNKING_VERSION


@dataclass
class IngestReport:
    """What an ingest did, for the CLI and for benchmarks."""

    index_dir: str
    documents: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    chunks: dict[str, int] = field(default_factory=dict)
    reused_documents: int = 0
    # Documents the index held before and no longer holds (not among the paths given, removed,
    # or with no text now), by document id.
    removed_documents: list[str] = field(default_factory=list)
    # Chunkers the index held and ``ingestion.chunkers`` no longer lists: their chunks are not in
    # the new index (a search with one of them is refused until an ingest builds it again).
    removed_chunkers: list[str] = field(default_factory=list)
    # Documents that are new to the index or whose content changed (the others were chunked
    # again only because a chunker's settings changed, or reused).
    changed_documents: int = 0
    # Chunkers the index held with other settings (or with another embedder), re-chunked for
    # every document; empty for a new index or a rebuild.
    changed_settings: list[str] = field(default_factory=list)
    # Those of changed_settings whose settings are the same but were chunked by an older sirag
    # (another CHUNKING_VERSION): its loaders or chunkers read the same files differently.
    older_chunking: list[str] = field(default_factory=list)
    embedded_texts: int = 0
    cached_texts: int = 0
    # True when nothing changed (same files, settings and paths): the live index was left as it is.
    unchanged: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return self.__dict__.copy()

    def summary_notes(self) -> list[str]:
        """What changed in the index, one line each (empty when nothing did): the documents new
        or changed, and the chunkers re-chunked because their settings differ from the index's."""
        if self.unchanged:
            return []
        lines = []
        if self.changed_documents:
            lines.append(f"indexed {self.changed_documents} new or changed document(s) of {len(self.documents)} "
                         f"into {self.index_dir}")
        other = [n for n in self.changed_settings if n not in self.older_chunking]
        if other:
            lines.append(f"re-chunked all {len(self.documents)} document(s) of {self.index_dir} with chunker(s) "
                         f"{', '.join(other)}: the index held them with other settings (or none); "
                         "it now holds chunks made with the settings given")
        if self.older_chunking:
            lines.append(f"re-chunked all {len(self.documents)} document(s) of {self.index_dir} with chunker(s) "
                         f"{', '.join(self.older_chunking)}: the index was made by an older sirag, which reads or "
                         f"chunks some files differently (chunking version {CHUNKING_VERSION} now); same settings")
        return lines

    def notices(self) -> list[str]:
        """The console lines for files left out and documents dropped (stderr of every command that ingests)."""
        lines = [f"warning: {p}" for p in self.problems]
        if self.removed_documents:
            lines.append(f"note: {len(self.removed_documents)} document(s) the index held are no longer in it: "
                         f"{', '.join(self.removed_documents)} (a file removed or not among the paths given, or one "
                         "with no text now, is dropped)")
        if self.removed_chunkers:
            names = ", ".join(self.removed_chunkers)
            lines.append(f"note: the index no longer holds the chunks of chunker(s) {names}: ingestion.chunkers leaves "
                         f"them out (searching with them needs an ingest whose ingestion.chunkers includes {names})")
        return lines
