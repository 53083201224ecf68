"""The document files that paths name: folders walked in sorted order (hidden entries, sirag's own
files, links out of the folder and special files left out), each file taken once, and one-line
problems for what is not read."""

from __future__ import annotations

import errno
import os
from pathlib import Path

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")

#: The format each supported suffix is read as.
FORMAT_OF_SUFFIX = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
SUPPORTED_LIST = ", ".join(SUPPORTED_SUFFIXES)


def iter_source_files(paths: list[Path], exclude: tuple[Path, ...] = ()) -> tuple[list[Path], list[str]]:
    """Expand files and folders into supported files, plus one-line problem messages.

    Folders are walked recursively in sorted order, skipping hidden entries and the files and
    folders in ``exclude`` (resolved paths: sirag's own, such as the index being written, when they
    lie among the documents); unsupported
    files inside a folder are counted in one message, an unsupported file given by name
    gets its own message, and so does a missing path.
    """
    files: list[Path] = []
    problems: list[str] = []
    seen: set[Path] = set()
    # One file reached by two paths (a folder given twice, once through a symlink; a link or a
    # hard link beside its target) would be indexed twice, and its passages would crowd out
    # the others in every search: it is taken once, under the first path found.
    taken: dict[tuple[int, int], Path] = {}
    walked: set[Path] = set()  # a folder given twice by the same path is walked (and its skips said) once
    for given in paths:
        path = Path(given)
        if path.is_dir():
            if (same := Path(os.path.normpath(path.absolute()))) in walked:
                continue
            walked.add(same)
            found, skipped, errors = _walk_folder(path, exclude)
            problems.extend(errors)
            if skipped:
                problems.append(_skipped_message(path, skipped))
        elif path.is_file():
            if path.suffix.lower() not in FORMAT_OF_SUFFIX:
                problems.append(unsupported_message(path))
                continue
            found = [path]
        elif path.exists():
            problems.append(f"{path}: not a regular file or folder (a pipe, device or socket); give a document file")
            continue
        else:
            problems.append(f"{path}: no such file or folder; check the path")
            continue
        for file in found:
            # ".." collapsed, so "docs/../docs/a.txt" and "docs/a.txt" are one path; symlinks are
            # kept as given (the document is named by the path the user gave).
            absolute = Path(os.path.normpath(file.absolute()))
            try:
                str(absolute).encode("utf-8")
            except UnicodeEncodeError:  # the index, the memory and JSON output all need UTF-8 names
                shown = os.fsencode(absolute).decode("utf-8", "replace")
                problems.append(f"{shown}: the file name is not valid UTF-8; rename it (e.g. with convmv) "
                                "to ingest it")
                continue
            if absolute in seen:
                continue
            seen.add(absolute)
            try:
                st = absolute.stat()
                # Some network and FUSE file systems give every file inode 0: no identity then.
                identity = (st.st_dev, st.st_ino) if st.st_ino else None
            except OSError:  # unreadable: the loader says so when it opens the file
                identity = None
            if identity is not None and identity in taken:
                problems.append(f"{absolute}: the same file as {taken[identity]} (a link, or a folder given "
                                "twice); indexed once, under the first path")
                continue
            if identity is not None:
                taken[identity] = absolute
            files.append(absolute)
    return files, problems


def unsupported_message(path: Path) -> str:
    """The problem line of a file whose type sirag does not read."""
    suffix = path.suffix or "(no suffix)"
    return (
        f"{path}: unsupported file type {suffix}; convert it to one of {SUPPORTED_LIST}"
        " or leave it out"
    )


def _skipped_message(folder: Path, skipped: list[tuple[Path, str]], show: int = 5) -> str:
    """One line naming the entries of ``folder`` that were not read, and why, the first few by name."""
    names = ", ".join(f"{p.relative_to(folder)} ({why})" for p, why in sorted(skipped)[:show])
    more = f" and {len(skipped) - show} more" if len(skipped) > show else ""
    return (f"skipped {len(skipped)} entr{'ies' if len(skipped) != 1 else 'y'} in {folder}: {names}{more} "
            f"(supported types: {SUPPORTED_LIST})")


def _walk_folder(folder: Path, exclude: tuple[Path, ...] = ()) -> tuple[list[Path], list[tuple[Path, str]], list[str]]:
    """Supported files under folder (sorted, hidden entries skipped), skipped entries with why, errors.

    A symlinked folder is followed only when it points inside ``folder`` (a link to ``..``
    must not pull in everything around the corpus); only regular files are read (a FIFO or
    device named ``*.txt`` would block or stream forever), the rest count as skipped."""
    found: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    errors: list[str] = []
    root = folder.resolve()
    excluded_names = {p.name for p in exclude}
    visited: set[Path] = set()
    pending = [folder]
    while pending:
        current = pending.pop()
        resolved = current.resolve()
        if resolved in visited:  # a symlink loop would otherwise never end
            continue
        visited.add(resolved)
        try:
            entries = sorted(current.iterdir())
        except OSError as exc:
            errors.append(f"{current}: cannot list folder ({exc.strerror}); check its permissions")
            continue
        subfolders = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            # sirag's own files and folders (resolved only when the name matches, or for a link, since
            # resolving costs a look-up per path part and a walk visits every file)
            try:
                if (entry.name in excluded_names or entry.is_symlink()) and entry.resolve() in exclude:
                    continue
                if entry.is_symlink():
                    entry.resolve(strict=True)  # a link in a loop: Python raises RuntimeError or ELOOP
            except (RuntimeError, OSError) as exc:
                loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
                skipped.append((entry, "link in a loop" if loop else "broken link"))
                continue
            if entry.is_dir():
                if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                    skipped.append((entry, "link to a folder outside"))
                    continue
                if (entry / "CURRENT").is_file() and (entry / "embeddings.sqlite").is_file():
                    # Another sirag index among the documents: one entry, not each of its files.
                    skipped.append((entry, "a sirag index, not documents"))
                    continue
                subfolders.append(entry)
            elif entry.suffix.lower() in FORMAT_OF_SUFFIX and entry.is_file():
                found.append(entry)
            elif entry.is_symlink() and not entry.exists():
                skipped.append((entry, "broken link"))
            elif entry.exists() and not entry.is_file():
                skipped.append((entry, "special file"))
            else:
                skipped.append((entry, "unsupported type"))
        pending.extend(subfolders)
    return sorted(found), skipped, errors
