"""One small hierarchy of known errors.

Every message says what went wrong and what to do about it; the CLI prints the
message on one line and exits with code 2.
"""

from __future__ import annotations


class SiragError(Exception):
    """Base class of the errors the CLI reports as one clear line."""

    exit_code = 2


class ConfigError(SiragError):
    """A configuration file or override is invalid."""


class IngestionError(SiragError):
    """Documents could not be read or indexed."""

    @classmethod
    def for_file(cls, path: object, problem: str, fix: str) -> IngestionError:
        """The error of one file: one line naming the file, the problem and the fix."""
        return cls(f"{path}: {problem}; {fix}")


class NoTextError(IngestionError):
    """A document file holds no text to index (empty, whitespace only, a page with nothing
    visible): what a user's edit that emptied it leaves, unlike a file that cannot be read."""


class IndexNotFoundError(SiragError):
    """No index exists where one was expected."""


class IndexMismatchError(SiragError):
    """An index was built with another embedder or chunker configuration."""


class ModelNotFoundError(SiragError):
    """A model file or the package that bundles it is missing or corrupt."""


class GenerationError(SiragError):
    """The generator failed on one prompt (too long, nothing produced, refused by the server)."""


class GeneratorUnavailableError(GenerationError):
    """The generator cannot be used at all: not installed, not loadable, or its server is
    unreachable, failing or not answering. A batch stops on it instead of failing every question."""


class MemoryStoreError(SiragError):
    """The memory database cannot be opened or written."""


class AnswerNotRecordedError(MemoryStoreError):
    """An answer was made but the memory store could not record it; ``answer`` holds it, so that
    the work is not lost (``sirag ask`` still prints it)."""

    def __init__(self, message: str, answer: object) -> None:
        super().__init__(message)
        self.answer = answer


class OlderSchemaError(MemoryStoreError):
    """A memory database opened read-only has an older schema: it must be opened writable once
    (which upgrades it) before it can be read."""


class InputError(SiragError):
    """A question or another user input is unusable."""


class BatchError(SiragError):
    """A batch file is invalid or a batch run cannot continue."""


class InterruptedAfterCommit(KeyboardInterrupt):
    """Ctrl-C that came once the work was done and in place (an ingest's new index live, its older
    one being removed): its message says what is left, for the CLI's "interrupted:" line, instead
    of the command's usual "nothing of it was kept"."""
