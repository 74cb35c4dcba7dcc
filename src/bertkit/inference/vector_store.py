"""An embeddings folder: what `bertkit embed -o DIR` writes and `bertkit index` reads.

    DIR/embed.json         the run's settings (model identity, pooling, normalisation, precision, length, dtype,
                           shard size, input), written first; a resume must match it
    DIR/shard-00000.npy    rows [0, shard_rows) as a (rows, dim) matrix (float32 or float16)
    DIR/shard-00000.jsonl  the same rows' {"id": ..., "text": ...}, one per line
    ...
    DIR/manifest.json      written last, once every shard is there (`bertkit.io.seal`): the settings, the total rows,
                           every shard's files and rows, and every file's size and sha256; its presence means the
                           folder is complete, and a resume that writes removes it first

Every file is written atomically, so a shard is either whole or absent (a kill -9 leaves at most a temporary file,
removed on resume), and a shard's bytes depend only on its rows (the Encoder's embeddings do not depend on their
batch), so a resumed run ends bitwise equal to an uninterrupted one. The shards are cut at fixed row numbers,
the same in a single process and under torchrun, where each rank writes its own range of them. A resume keeps a
shard only if its rows file holds exactly the rows the input gives now (`check_kept_rows`); a reader checks every
shard against the manifest's sha256, and its vectors for shape and finiteness, as it reads them.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import CheckpointError, ConfigError, DataError
from bertkit.io import atomic_open, read_checked, read_json_object, record_field, seal, sealed_entries

logger = logging.getLogger(__name__)

FORMAT = "bertkit-embeddings"
VERSION = 2
"""2: the manifest lists every file's size and sha256 ("files"); 1 (still read) recorded the matrices' sha256 only."""
RUN_FILE = "embed.json"
MANIFEST = "manifest.json"
DTYPES = ("float32", "float16")
# The settings that decide an embedding's numbers: an index, a resume and a query encoder must agree on them.
EMBEDDING_SETTINGS = ("model_sha256", "pooling", "normalize", "precision", "max_length", "dim")


def shard_name(k: int) -> str:
    """File stem of shard k."""
    return f"shard-{k:05d}"


@dataclass(frozen=True)
class Shard:
    """One finished shard as the manifest lists it (`sha256`: the matrix's, in version 1 manifests only)."""

    vectors: str
    rows_file: str
    rows: int
    first_row: int
    sha256: str = ""


def rows_text(rows: Sequence[tuple[Any, str]]) -> str:
    """A shard's rows file: each row's {"id", "text"} as one JSON line."""
    return "".join(json.dumps({"id": ident, "text": text}, ensure_ascii=False) + "\n" for ident, text in rows)


def write_shard(folder: Path, k: int, vectors: np.ndarray, rows: Sequence[tuple[Any, str]]) -> None:
    """Write shard k: its rows' ids and texts first, then the matrix, each atomically; the matrix's presence marks
    the shard done (`finished_rows`)."""
    stem = shard_name(k)
    with atomic_open(folder / f"{stem}.jsonl", "w") as f:
        f.write(rows_text(rows))
    with atomic_open(folder / f"{stem}.npy", "wb") as f:
        np.save(f, vectors)


def check_kept_rows(folder: Path, k: int, rows: Sequence[tuple[Any, str]], where: str) -> None:
    """CheckpointError unless shard k's rows file holds exactly `rows` (the input's rows for it now, read from
    `where`): a resume keeps a shard's vectors only for the rows they were computed from, whether the input is a
    file edited in place or another stream on stdin."""
    path = folder / f"{shard_name(k)}.jsonl"
    try:
        kept = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot be read ({e}); delete shard {k}'s files to compute it again") from None
    now = rows_text(rows).splitlines(keepends=True)
    if kept == now:
        return
    i = next((i for i, (a, b) in enumerate(zip(kept, now)) if a != b), min(len(kept), len(now)))
    found = kept[i].strip()[:80] if i < len(kept) else "(no row)"
    given = now[i].strip()[:80] if i < len(now) else "(no row)"
    raise CheckpointError(f"{path}:{i + 1}: holds {found}, where the input ({where}) now gives {given} "
                          f"({len(kept)} rows kept, {len(now)} given): the input changed since this folder was "
                          "started, so its finished shards are not this input's; embed it into a new folder")


def finished_rows(folder: Path, k: int, dim: int, dtype: str) -> int | None:
    """The rows of shard k if a run wrote it whole (matrix and rows file, the matrix of this dim and dtype), else
    None."""
    stem = folder / shard_name(k)
    if not (stem.with_suffix(".jsonl").is_file() and stem.with_suffix(".npy").is_file()):
        return None
    try:
        matrix = np.load(stem.with_suffix(".npy"), mmap_mode="r")
    except (OSError, ValueError):
        return None
    if matrix.ndim != 2 or matrix.shape[1] != dim or matrix.dtype != np.dtype(dtype):
        return None
    return int(matrix.shape[0])


def kept_shard(folder: Path, k: int, rows: Sequence[tuple[Any, str]], dim: int, dtype: str, where: str) -> bool:
    """Whether a resume keeps shard k as it is: its rows file holds exactly `rows` (else a CheckpointError: the input
    changed, `check_kept_rows`) and its matrix is len(rows) x dim of `dtype`, every value finite. An absent shard is
    computed (False); so is a damaged matrix, named in a warning: its numbers are a function of its rows alone."""
    stem = folder / shard_name(k)
    if not (stem.with_suffix(".jsonl").is_file() and stem.with_suffix(".npy").is_file()):
        return False
    check_kept_rows(folder, k, rows, where)
    try:
        matrix = np.load(stem.with_suffix(".npy"), allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        problem = f"cannot be read ({e})"
    else:
        if matrix.shape != (len(rows), dim) or matrix.dtype != np.dtype(dtype):
            problem = f"{matrix.dtype} of shape {matrix.shape}, expected {dtype} of shape ({len(rows)}, {dim})"
        elif not np.isfinite(matrix).all():
            problem = "holds NaN or infinity"
        else:
            return True
    logger.warning("%s: %s; computing shard %d again", stem.with_suffix(".npy"), problem, k)
    return False


def write_manifest(folder: Path, settings: dict[str, Any], shard_rows: Sequence[int]) -> dict[str, Any]:
    """The manifest of a folder whose shards 0..len(shard_rows)-1 are all written, written atomically (last), with
    every shard file's size and sha256."""
    shards, first = [], 0
    for k, rows in enumerate(shard_rows):
        stem = shard_name(k)
        shards.append({"vectors": f"{stem}.npy", "rows_file": f"{stem}.jsonl", "rows": rows, "first_row": first})
        first += rows
    manifest = {"format": FORMAT, "version": VERSION, "rows": first, "settings": settings, "shards": shards}
    return seal(folder, MANIFEST, manifest, [name for s in shards for name in (s["vectors"], s["rows_file"])])


class Embeddings:
    """A finished embeddings folder (or a single .npy matrix) opened for reading: its settings, its rows' matrix
    shard by shard, and their ids and texts. Nothing is read whole unless asked (`matrix()`). Each shard file is
    checked against the manifest's sha256 as it is read, and each matrix for its shape and finite values, so an
    altered, truncated or non-finite shard is a CheckpointError naming it, never a vector in an index."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = {}  # the manifest's "files" by name: what each shard is checked by
        if self.path.is_file() and self.path.suffix == ".npy":
            self.manifest: dict[str, Any] = {}
            self.settings: dict[str, Any] = {}
            self.shards = [Shard(self.path.name, "", self._npy_rows(self.path), 0, "")]
            self.folder = self.path.parent
        else:
            where = self.path / MANIFEST
            if not where.is_file():
                hint = (" (an unfinished run: `bertkit embed ... --resume` completes it)"
                        if (self.path / RUN_FILE).is_file() else "")
                raise CheckpointError(f"{self.path}: no {MANIFEST}; expected a folder written by `bertkit embed -o "
                                      f"DIR` or a .npy file{hint}")
            self.manifest = read_json_object(where)
            if self.manifest.get("format") != FORMAT:
                raise CheckpointError(f"{where}: format {self.manifest.get('format')!r}; expected {FORMAT!r}")
            version = self.manifest.get("version")
            if version not in (1, VERSION):
                raise CheckpointError(f"{where}: version {version!r}; this bertkit reads versions 1 and {VERSION}")
            self.settings = record_field(self.manifest, "settings", dict, where)
            self.shards = [_listed_shard(s, where) for s in record_field(self.manifest, "shards", list, where)]
            if not self.shards:
                raise CheckpointError(f"{where}: lists no shards; an embeddings folder holds at least one row")
            first = 0
            for s in self.shards:
                if s.first_row != first:
                    raise CheckpointError(f"{where}: shard {s.vectors} starts at row {s.first_row}; the shards before "
                                          f"it hold {first} rows")
                first += s.rows
            if record_field(self.manifest, "rows", int, where) != first:
                raise CheckpointError(f"{where}: says {self.manifest['rows']} rows; its shards hold {first}")
            self.folder = self.path
            if version == 1:  # the matrices' sha256 only
                self.entries = {s.vectors: {"file": s.vectors, "sha256": s.sha256} for s in self.shards}
            else:
                self.entries = sealed_entries(self.manifest, where, tuple(n for s in self.shards
                                                                          for n in (s.vectors, s.rows_file)))
        self.rows = sum(s.rows for s in self.shards)

    @staticmethod
    def _npy_rows(path: Path) -> int:
        try:
            matrix = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a .npy matrix ({e})") from None
        if matrix.ndim != 2:
            raise DataError(f"{path}: a matrix of shape {matrix.shape}; expected (rows, dim)")
        return int(matrix.shape[0])

    @property
    def dim(self) -> int:
        """The vectors' width: the settings' dim, or (a bare .npy, a folder recording none) the first shard's."""
        if isinstance(self.settings.get("dim"), int):
            return int(self.settings["dim"])
        return int(self._load(self.shards[0]).shape[1])

    def _load(self, s: Shard) -> np.ndarray:
        """Shard s's matrix as stored, its bytes checked against the manifest when it records them."""
        where = self.folder / s.vectors
        entry = self.entries.get(s.vectors)
        try:
            if entry is None:
                return np.load(where, mmap_mode="r", allow_pickle=False)
            return np.load(io.BytesIO(read_checked(self.folder, entry, self.folder / MANIFEST)), allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise CheckpointError(f"{where}: cannot read the shard ({e})") from None

    def iter_matrices(self) -> Iterator[np.ndarray]:
        """Each shard's matrix as float32, in row order, checked: its sha256 against the manifest, its shape against
        the manifest's rows and the folder's width, every value finite."""
        dim = self.dim
        for s in self.shards:
            where = self.folder / s.vectors
            matrix = self._load(s)
            if matrix.ndim != 2 or matrix.dtype.kind != "f":
                raise CheckpointError(f"{where}: {matrix.dtype} of shape {matrix.shape}; expected a (rows, {dim}) "
                                      "float matrix")
            if matrix.shape[0] != s.rows:
                raise CheckpointError(f"{where}: {matrix.shape[0]} rows; {MANIFEST} says {s.rows}")
            if matrix.shape[1] != dim:
                raise CheckpointError(f"{where}: vectors of width {matrix.shape[1]}; the folder's are {dim} wide "
                                      "(shards of one folder come from one model)")
            matrix = np.asarray(matrix, dtype=np.float32)
            bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
            if bad.size:
                raise CheckpointError(f"{where}: {bad.size} row(s) hold NaN or infinity (first: row {bad[0]} of the "
                                      f"shard, {s.first_row + int(bad[0])} of the folder); such a vector would rank "
                                      "first or last for every query: embed the rows again")
            yield matrix

    def matrix(self) -> np.ndarray:
        """Every row as one (rows, dim) float32 matrix, in memory."""
        return np.concatenate(list(self.iter_matrices())) if len(self.shards) > 1 else next(self.iter_matrices())

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """Each row's {"id", "text"} in order ({"id": row number} for a bare .npy, which has no texts), each shard's
        rows file checked against the manifest's sha256 before its rows are given."""
        for s in self.shards:
            if not s.rows_file:
                yield from ({"id": s.first_row + i + 1, "text": None} for i in range(s.rows))
                continue
            where = self.folder / s.rows_file
            entry = self.entries.get(s.rows_file)
            try:
                data = read_checked(self.folder, entry, self.folder / MANIFEST) if entry else where.read_bytes()
                lines = data.decode("utf-8").split("\n")
            except (OSError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{where}: cannot be read ({e})") from None
            if lines[-1] == "":
                lines.pop()  # the newline that ends the last row
            if len(lines) != s.rows:
                raise CheckpointError(f"{where}: {len(lines)} rows; {MANIFEST} says {s.rows}")
            for n, line in enumerate(lines, start=1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CheckpointError(f"{where}:{n}: not a JSON row ({e})") from None
                if not isinstance(row, dict) or "id" not in row or "text" not in row:
                    raise CheckpointError(f"{where}:{n}: {line[:60]}; expected an object with id and text")
                yield row


def _listed_shard(entry: Any, where: Path) -> Shard:
    """A manifest's shard entry, each field checked."""
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: a shard entry is {json.dumps(entry)[:60]}; expected an object")
    fields = {name: record_field(entry, name, kind, where)
              for name, kind in (("vectors", str), ("rows_file", str), ("rows", int), ("first_row", int))}
    if fields["rows"] < 0:
        raise CheckpointError(f"{where}: shard {fields['vectors']} has {fields['rows']} rows; expected >= 0")
    return Shard(**fields, sha256=str(entry.get("sha256", "")))


def check_same_settings(found: dict[str, Any], expected: dict[str, Any], where: str, what: str) -> None:
    """ConfigError naming each embedding setting (EMBEDDING_SETTINGS) on which `found` (read from `where`) and
    `expected` (what is in use now) differ; `what` says what to do about it."""
    differ = [f"{k}: {found.get(k)!r} there, {expected.get(k)!r} here" for k in EMBEDDING_SETTINGS
              if k in expected and found.get(k) != expected.get(k)]
    if differ:
        raise ConfigError(f"{where}: built with other embedding settings ({'; '.join(differ)}); {what}")


def embedding_settings(model: str | os.PathLike, encoder: Any, pooling: str | None, normalize: bool | None,
                       ) -> dict[str, Any]:
    """The settings that decide the numbers of `encoder`'s embeddings of a model folder (or shipped name), with
    the folder's identity (the sha256 of the files that define the model): what an embeddings folder and an index
    record, and what a resume or a query encoder is checked against."""
    from bertkit.pretrained import resolve_model_dir
    from bertkit.io import folder_identity

    identity = folder_identity(resolve_model_dir(model))
    return {"model": str(model), "model_sha256": identity["sha256"],
            "pooling": pooling or encoder.default_pooling,
            "normalize": encoder.default_normalize if normalize is None else bool(normalize),
            "precision": encoder.precision, "max_length": encoder.max_length, "dim": encoder.config.hidden_size}


__all__ = ["DTYPES", "EMBEDDING_SETTINGS", "Embeddings", "MANIFEST", "RUN_FILE", "check_kept_rows",
           "check_same_settings", "embedding_settings", "finished_rows", "kept_shard", "shard_name", "write_manifest",
           "write_shard"]
