"""Atomic file writes: every output goes to a temporary file in the same folder, then is renamed into place
(a FIFO or a device is written in place, a link's target is replaced); output-folder checks and locks; folders that
prove their contents (a marker file listing every file's size and sha256, written last, removed first)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterator

from bertkit.errors import BertkitError, CheckpointError, ConfigError, OutputError


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


# errno values that mean "this process may not write here": permission bits, an ACL, a read-only file system.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def output_target(path: str | os.PathLike) -> tuple[Path, bool]:
    """Where an output named `path` is really written, and whether it is written in place.

    A regular file (or a new name) is replaced atomically. Through a symbolic link, the file the link points to is
    replaced and the link stays as it is. A FIFO or a character device (/dev/null, a terminal, /dev/stdout when it
    is a pipe) would be destroyed by a rename and has no half-written state to protect, so it is written in place.
    A folder, a block device or a socket is refused with an OutputError."""
    path = Path(path)
    try:
        st = os.stat(path)  # follows links
    except FileNotFoundError:
        if path.is_symlink():  # a link to a file that does not exist yet: create that file, keep the link
            return Path(os.path.realpath(path)), False
        return path, False
    except OSError:  # a component that is a file, a link loop, no permission to look: make_dir or the write
        return path, False  # reports it with its reason
    if stat.S_ISREG(st.st_mode):
        return (Path(os.path.realpath(path)) if path.is_symlink() else path), False
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return path, True
    kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode) else \
        "a socket" if stat.S_ISSOCK(st.st_mode) else "a special file"
    raise OutputError(f"{path}: is {kind}; expected a file name (a regular file, a FIFO or a character device)")


def _not_writable(path: Path, where: Path, error: OSError) -> OutputError:
    """The OutputError for a write refused by permissions or a read-only file system."""
    return OutputError(f"{path}: cannot write into {where} ({error.strerror or error}); choose another output "
                       "location or make it writable")


def _temp_sibling(path: Path, shown: Path) -> tuple[int, str]:
    """A new temporary file beside `path`, open and flock()ed (so `remove_stale_temp_files` knows its writer is
    alive); `shown` is the name the user gave, for the error message."""
    make_dir(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if e.errno in _NOT_WRITABLE:
            raise _not_writable(shown, path.parent, e) from None
        raise
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.chmod(tmp, _default_mode())
    return fd, tmp


@contextlib.contextmanager
def _write_errors(shown: Path, folder: Path, tmp: str | None = None) -> Iterator[None]:
    """Turn a failed write into the OutputError it stands for (a full disk, no permission), after removing the
    temporary file `tmp`: the disk is checked first, while that file still fills it."""
    try:
        yield
    except BaseException as e:
        failed = None
        if isinstance(e, Exception):
            if disk_full(e, folder):
                failed = OutputError(f"{shown}: no space left on the device while writing it; the previous version "
                                     "(if any) is untouched")
            elif isinstance(e, OSError) and e.errno in _NOT_WRITABLE:
                failed = _not_writable(shown, folder, e)
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if failed is not None:
            raise failed from e
        raise


@contextlib.contextmanager
def _open_in_place(path: Path, mode: str, encoding: str | None) -> Iterator[IO]:
    """Open a FIFO or a character device for writing as it is (see `output_target`)."""
    try:
        f = open(path, mode, encoding=None if "b" in mode else encoding)
    except OSError as e:
        if e.errno in _NOT_WRITABLE:
            raise _not_writable(path, path, e) from None
        raise
    with _write_errors(path, path.parent), f:
        yield f


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` only if the block succeeds.

    A crash or a full disk in the middle leaves the old file (or none), never a half-written one. A symbolic link
    stays and its target is replaced; a FIFO or a character device is written in place (`output_target`).
    """
    path = Path(path)
    target, in_place = output_target(path)
    if in_place:
        with _open_in_place(target, mode, encoding) as f:
            yield f
        return
    fd, tmp = _temp_sibling(target, path)
    with _write_errors(path, target.parent, tmp), os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())
        os.replace(tmp, target)  # before the file (and its lock) is closed


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented JSON to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path for a writer that wants a file name (safetensors, torch.save, numpy); rename on success.

    Links, FIFOs and character devices as in `atomic_open`: for the last two the writer fills a temporary file
    elsewhere, whose bytes are then copied into the target."""
    path = Path(path)
    target, in_place = output_target(path)
    if in_place:
        with tempfile.TemporaryDirectory(prefix="bertkit-") as folder:
            with _write_errors(path, Path(folder)):
                yield Path(folder) / path.name
            with open(Path(folder) / path.name, "rb") as source, _open_in_place(target, "wb", None) as f:
                shutil.copyfileobj(source, f)
        return
    fd, tmp = _temp_sibling(target, path)
    try:
        with _write_errors(path, target.parent, tmp):
            yield Path(tmp)
            os.chmod(tmp, _default_mode())  # writers such as safetensors recreate the file with mode 0600
            os.replace(tmp, target)
    finally:
        os.close(fd)


def check_output_file(path: str | os.PathLike) -> None:
    """Raise OutputError now if an output file could not be written later: called before a long computation, so
    a read-only folder is reported before the work, not after it. Creates nothing (a test file is removed)."""
    path = Path(path)
    target, in_place = output_target(path)
    if in_place:
        if not os.access(target, os.W_OK):
            raise OutputError(f"{path}: cannot write into it (permission denied)")
        return
    folder = target.parent
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        folder = folder.parent  # make_dir will create the rest: it needs to write into the nearest existing one
    if not folder.is_dir():
        make_dir(target.parent)  # raises the OutputError for a file or a dangling link in the way
    try:
        fd, tmp = tempfile.mkstemp(prefix=".bertkit-check.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _not_writable(path, folder, e) from None
    os.close(fd)
    os.unlink(tmp)


def remove_stale_temp_files(folder: str | os.PathLike, pattern: str = ".*.tmp", min_age_s: float = 60.0) -> list[Path]:
    """Delete the temporary files of writers that died (kill -9, a power cut) in `folder`; returns them.

    A live writer holds an flock() on its temporary file (`atomic_open`, `atomic_path`), so a file that can be
    locked has no writer; the age limit covers the instant between a writer creating its file and locking it.
    Only for folders whose writers keep the temporary file they were given (numpy's memmap, torch.save): a writer
    that replaces it (safetensors) leaves a new, unlocked file behind the same name while it works."""
    removed = []
    now = time.time()
    for candidate in Path(folder).glob(pattern):
        try:
            if now - candidate.lstat().st_mtime < min_age_s or not candidate.is_file():
                continue
            fd = os.open(candidate, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile, or not ours to read
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its writer is alive
        else:
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()  # while locked, so no writer can have taken it meanwhile
            removed.append(candidate)
        finally:
            os.close(fd)
    return removed


def disk_full(error: BaseException, folder: Path) -> bool:
    """Whether a failed write ran out of space: ENOSPC, or the messages torch, numpy and safetensors give for it.

    numpy's OSError ('1152000 requested and 786400 written') carries no errno; the free space is the last resort,
    so call this before the partly written temporary file is deleted."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    if "No space left" in text or "os error 28" in text or re.search(r"\d+ requested and \d+ written", text):
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
    try:
        f = open(path, "a+", encoding="utf-8")
    except OSError as e:
        if e.errno in _NOT_WRITABLE:
            raise OutputError(f"{folder}: cannot write into this output folder ({e.strerror}); choose another "
                              "output folder or make it writable") from None
        raise
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


def record_field(record: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str | os.PathLike,
                 error: type[BertkitError] = CheckpointError) -> Any:
    """record[key] checked to be of `kind` (a bool is no int), or `error` naming the file and the field: a field of
    a record read back from disk, which another program (or a hand) may have written."""
    value = record.get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_JSON_KINDS.get(k, k.__name__) for k in kinds)
        found = "missing" if key not in record else json.dumps(value)[:60]
        raise error(f"{where}: field {key!r} is {found}; expected {names}")
    return value


_JSON_KINDS = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a JSON object",
               bool: "true or false", type(None): "null"}


# ----------------------------------------------------------------------------------------------------------------
# Folders that prove their contents. A folder that one command writes and another reads or resumes (an index, an
# embeddings folder, prepared pre-training data, a training checkpoint) has a marker file (index.json,
# manifest.json, meta.json) that lists each of its files with its size and sha256 (`file_entry`). The marker is
# written last (`seal`) and removed first when the folder's files are about to change (`unseal`), so an interrupted
# update leaves a folder that says it is incomplete, never one whose files come from two runs; readers check every
# file against the marker when they open it (`check_file`, or `read_checked`, which checks the bytes it returns).
# ----------------------------------------------------------------------------------------------------------------


def file_sha256(source: str | os.PathLike | IO[bytes]) -> str:
    """sha256 of a file's bytes: a path, or an open binary file (read from its start), in 1 MiB blocks."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return file_sha256(f)
    h = hashlib.sha256()
    source.seek(0)
    for block in iter(lambda: source.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


MODEL_FILE_SUFFIXES = (".json", ".txt", ".safetensors", ".bin")
"""Files of a model folder that define the model (config, weights, shard index, vocabulary and tokenizer settings);
notes, plots and logs beside them (PRETRAINING.md, curves.png, metrics.jsonl) are not part of its identity."""


def file_identity(spec: str | os.PathLike) -> dict[str, Any]:
    """Identity of a data file: its sha256 (the path is kept but ignored by identity: a moved or copied file is the
    same data); `FILE#START:END` (a QA article selection) adds the selection. A folder of data files (a retrieval
    set in BEIR's layout): one sha256 over its files' relative names and bytes."""
    text = str(spec)
    path, selection = Path(text), None
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            h.update(f"{p.relative_to(path).as_posix()}\0{file_sha256(p)}\n".encode())
        return {"path": text, "sha256": h.hexdigest()}
    if not path.is_file() and "#" in text:
        name, _, selection = text.rpartition("#")
        path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{text}: no such file")
    out = {"path": text, "sha256": file_sha256(path)}
    if selection is not None:
        out["selection"] = selection
    return out


def folder_identity(folder: str | os.PathLike) -> dict[str, Any]:
    """Identity of a model folder: one sha256 over the names and bytes of the files that define the model."""
    folder = Path(folder)
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith(".") and p.suffix in MODEL_FILE_SUFFIXES:
            h.update(f"{p.name}\0{file_sha256(p)}\n".encode())
    return {"path": str(folder), "sha256": h.hexdigest()}


def file_entry(folder: str | os.PathLike, name: str) -> dict[str, Any]:
    """A marker's entry for the file `name` (a path relative to `folder`): {"file", "bytes", "sha256"}."""
    path = Path(folder) / name
    return {"file": name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _entry_path(folder: str | os.PathLike, entry: Any, marker: Path, error: type[BertkitError]) -> Path:
    """The file an entry names, after checking the entry's form: a relative name inside the folder, a sha256, and a
    size when there is one (markers of earlier versions recorded none)."""
    if not isinstance(entry, dict):
        raise error(f"{marker}: a file entry is {json.dumps(entry)[:60]}; expected an object with file and sha256")
    name = record_field(entry, "file", str, marker, error)
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise error(f"{marker}: file entry {name!r} is not a name inside {Path(folder)}")
    if not _SHA256.match(str(entry.get("sha256"))):
        raise error(f"{marker}: the sha256 of {name} is {json.dumps(entry.get('sha256'))[:80]}; expected 64 hex digits")
    if "bytes" in entry and (record_field(entry, "bytes", int, marker, error) < 0):
        raise error(f"{marker}: the size of {name} is {entry['bytes']}; expected bytes >= 0")
    return Path(folder) / name


def _mismatch(path: Path, entry: dict[str, Any], marker: Path, size: int, digest: str | None) -> str | None:
    """What differs between a file (its size, and sha256 when computed) and its entry in the marker, or None."""
    if entry.get("bytes", size) != size:
        return f"{path}: corrupted or truncated: {size} bytes, {marker.name} records {entry['bytes']}"
    if digest is not None and digest != entry["sha256"]:
        return (f"{path}: corrupted: its sha256 checksum {digest[:12]}... is not the {entry['sha256'][:12]}... "
                f"{marker.name} records (the file changed or was damaged after {marker.name} was written)")
    return None


def _missing(path: Path, marker: Path) -> str:
    return f"{path}: missing; {marker.name} lists it, so the folder lost a file after it was written"


def check_file(folder: str | os.PathLike, entry: dict[str, Any], marker: str | os.PathLike,
               error: type[BertkitError] = CheckpointError, checksum: bool = True) -> Path:
    """The path of the file an entry of `marker` names, after checking it against the entry: present, of its size,
    and of its sha256 when `checksum`; else `error` naming the file and what differs."""
    marker = Path(marker)
    path = _entry_path(folder, entry, marker, error)
    if not path.is_file():
        raise error(_missing(path, marker))
    problem = _mismatch(path, entry, marker, path.stat().st_size, file_sha256(path) if checksum else None)
    if problem:
        raise error(problem)
    return path


def read_checked(folder: str | os.PathLike, entry: dict[str, Any], marker: str | os.PathLike,
                 error: type[BertkitError] = CheckpointError) -> bytes:
    """The bytes of the file an entry of `marker` names, read once and checked against the entry (size, sha256):
    the bytes checked are the bytes the caller uses."""
    marker = Path(marker)
    path = _entry_path(folder, entry, marker, error)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(_missing(path, marker)) from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    problem = _mismatch(path, entry, marker, len(data), hashlib.sha256(data).hexdigest())
    if problem:
        raise error(problem)
    return data


def sealed_entries(record: dict[str, Any], marker: str | os.PathLike, required: tuple[str, ...] = (),
                   error: type[BertkitError] = CheckpointError) -> dict[str, dict[str, Any]]:
    """A marker's "files" entries by file name, each entry's form checked, the `required` names among them."""
    entries = {}
    for entry in record_field(record, "files", list, marker, error):
        _entry_path(Path(marker).parent, entry, Path(marker), error)
        entries[entry["file"]] = entry
    missing = [name for name in required if name not in entries]
    if missing:
        raise error(f"{marker}: lists no sha256 for {', '.join(missing)}")
    return entries


def unseal(folder: str | os.PathLike, marker: str) -> None:
    """Remove a folder's marker before any of its files changes (an overwrite, a resume that writes): until `seal`
    writes the new one, readers see an incomplete folder, not old files paired with new ones."""
    with contextlib.suppress(FileNotFoundError):
        (Path(folder) / marker).unlink()


def seal(folder: str | os.PathLike, marker: str, record: dict[str, Any], files: list[str]) -> dict[str, Any]:
    """Write `record` as the folder's marker, last and atomically, with "files": the entry (size, sha256) of each of
    `files` (names relative to the folder), as they are now; returns what was written."""
    full = {**record, "files": [file_entry(folder, name) for name in files]}
    atomic_write_json(Path(folder) / marker, full)
    return full

