"""Atomic file writes: every output goes to a temporary file in the same folder, then is renamed into place."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from bertkit.errors import BertkitError, CheckpointError, OutputError


def _default_mode() -> int:
    """The permission bits an ordinary open() would give a new file (0o666 less the umask); mkstemp uses 0o600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def make_dir(path: str | os.PathLike) -> Path:
    """Create the folder `path` (and its parents) if needed; a clear OutputError when that cannot be done."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.is_symlink() and not path.exists():
        raise OutputError(f"{path}: is a link to {os.readlink(path)}, which does not exist; expected a folder")
    if path.exists():
        raise OutputError(f"{path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{path}: cannot create the folder ({e.strerror or e})") from e
    return path


def check_output_dir(path: str | os.PathLike, overwrite: bool = False, option: str = "--overwrite") -> Path:
    """Refuse an output folder that already holds files (a model's vocab.txt, say) unless `overwrite` is set."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        names = sorted(p.name for p in path.iterdir())
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        raise OutputError(f"{path}: already holds files ({shown}); choose a new output folder, or pass {option} "
                          "to replace what this command writes there")
    return path


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` only if the block succeeds.

    A crash or a full disk in the middle leaves the old file (or none), never a half-written one.
    """
    path = Path(path)
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    binary = "b" in mode
    os.chmod(tmp, _default_mode())
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and disk_full(e, path.parent):
            raise OutputError(f"{path}: no space left on the device while writing it; the previous version (if "
                              "any) is untouched") from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented JSON to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path for a writer that wants a file name (safetensors, torch.save, numpy); rename on success."""
    path = Path(path)
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, _default_mode())
    try:
        yield Path(tmp)
        os.chmod(tmp, _default_mode())  # writers such as safetensors recreate the file with mode 0600
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and disk_full(e, path.parent):
            raise OutputError(f"{path}: no space left on the device while writing it; the previous version (if "
                              "any) is untouched") from e
        raise


def disk_full(error: BaseException, folder: Path) -> bool:
    """Whether a failed write ran out of space: ENOSPC, or the messages torch, numpy and safetensors give for it."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    if "No space left" in text or "os error 28" in text:
        return True
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


LOCK_FILE = ".lock"


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold an exclusive lock on an output folder while a job writes into it; a second job gets an OutputError
    naming the holder instead of interleaving its files with the first's. The lock dies with its process."""
    folder = make_dir(folder)
    path = folder / LOCK_FILE
    f = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise OutputError(f"{folder}: another job is writing into this folder ({holder}); wait for it to end or "
                          "choose another output folder") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # while still held, so no other job can have locked this file meanwhile
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


def read_json_object(path: str | os.PathLike, error: type[BertkitError] = CheckpointError) -> dict[str, Any]:
    """The JSON object in a file, or `error` naming the file: not valid JSON, or JSON that is not an object."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise error(f"{path}: expected a JSON object, found {type(d).__name__}")
    return d
