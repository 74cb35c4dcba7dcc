"""An embeddings folder: what `bertkit embed -o DIR` writes and `bertkit index` reads.

    DIR/embed.json         the run's settings (model identity, pooling, normalisation, precision, length, dtype,
                           shard size, input), written first; a resume must match it
    DIR/shard-00000.npy    rows [0, shard_rows) as a (rows, dim) matrix (float32 or float16)
    DIR/shard-00000.jsonl  the same rows' {"id": ..., "text": ...}, one per line
    ...
    DIR/manifest.json      written last, once every shard is there: the settings, the total rows and every
                           shard's file, rows and sha256; its presence means the folder is complete

Every file is written atomically, so a shard is either whole or absent (a kill -9 leaves at most a temporary file,
removed on resume), and a shard's bytes depend only on its rows (the Encoder's embeddings do not depend on their
batch), so a resumed run ends bitwise equal to an uninterrupted one. The shards are cut at fixed row numbers,
the same in a single process and under torchrun, where each rank writes its own range of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.shards import file_sha256
from bertkit.errors import CheckpointError, ConfigError, DataError
from bertkit.io import atomic_open, atomic_write_json, read_json_object

FORMAT = "bertkit-embeddings"
VERSION = 1
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
    """One finished shard as the manifest lists it."""

    vectors: str
    rows_file: str
    rows: int
    first_row: int
    sha256: str


def write_shard(folder: Path, k: int, vectors: np.ndarray, rows: Sequence[tuple[Any, str]]) -> None:
    """Write shard k: its rows' ids and texts first, then the matrix, each atomically; the matrix's presence marks
    the shard done (`finished_rows`)."""
    stem = shard_name(k)
    with atomic_open(folder / f"{stem}.jsonl", "w") as f:
        for ident, text in rows:
            f.write(json.dumps({"id": ident, "text": text}, ensure_ascii=False) + "\n")
    with atomic_open(folder / f"{stem}.npy", "wb") as f:
        np.save(f, vectors)


def finished_rows(folder: Path, k: int, dim: int, dtype: str) -> int | None:
    """The rows of shard k if a run wrote it whole (matrix and rows file, the matrix of this dim and dtype), else None."""
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


def write_manifest(folder: Path, settings: dict[str, Any], shard_rows: Sequence[int]) -> dict[str, Any]:
    """The manifest of a folder whose shards 0..len(shard_rows)-1 are all written, written atomically (last)."""
    shards, first = [], 0
    for k, rows in enumerate(shard_rows):
        stem = shard_name(k)
        shards.append({"vectors": f"{stem}.npy", "rows_file": f"{stem}.jsonl", "rows": rows, "first_row": first,
                       "sha256": file_sha256(folder / f"{stem}.npy")})
        first += rows
    manifest = {"format": FORMAT, "version": VERSION, "rows": first, "settings": settings, "shards": shards}
    atomic_write_json(folder / MANIFEST, manifest)
    return manifest


class Embeddings:
    """A finished embeddings folder (or a single .npy matrix) opened for reading: its settings, its rows' matrix
    shard by shard, and their ids and texts. Nothing is read whole unless asked (`matrix()`)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
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
            self.settings = self.manifest["settings"]
            self.shards = [Shard(**s) for s in self.manifest["shards"]]
            self.folder = self.path
        self.rows = sum(s.rows for s in self.shards)

    @staticmethod
    def _npy_rows(path: Path) -> int:
        matrix = np.load(path, mmap_mode="r")
        if matrix.ndim != 2:
            raise DataError(f"{path}: a matrix of shape {matrix.shape}; expected (rows, dim)")
        return int(matrix.shape[0])

    @property
    def dim(self) -> int:
        return int(np.load(self.folder / self.shards[0].vectors, mmap_mode="r").shape[1])

    def iter_matrices(self) -> Iterator[np.ndarray]:
        """Each shard's matrix as float32, in row order, its size checked against the manifest."""
        for s in self.shards:
            where = self.folder / s.vectors
            try:
                matrix = np.load(where, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise CheckpointError(f"{where}: cannot read the shard ({e})") from None
            if matrix.shape[0] != s.rows:
                raise CheckpointError(f"{where}: {matrix.shape[0]} rows; {MANIFEST} says {s.rows}")
            yield np.asarray(matrix, dtype=np.float32)

    def matrix(self) -> np.ndarray:
        """Every row as one (rows, dim) float32 matrix, in memory."""
        return np.concatenate(list(self.iter_matrices())) if len(self.shards) > 1 else next(self.iter_matrices())

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """Each row's {"id", "text"} in order ({"id": row number} for a bare .npy, which has no texts)."""
        for s in self.shards:
            if not s.rows_file:
                yield from ({"id": s.first_row + i + 1, "text": None} for i in range(s.rows))
                continue
            with open(self.folder / s.rows_file, encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)


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
    from bertkit.training.provenance import folder_identity

    identity = folder_identity(resolve_model_dir(model))
    return {"model": str(model), "model_sha256": identity["sha256"],
            "pooling": pooling or encoder.default_pooling,
            "normalize": encoder.default_normalize if normalize is None else bool(normalize),
            "precision": encoder.precision, "max_length": encoder.max_length, "dim": encoder.config.hidden_size}


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


__all__ = ["DTYPES", "EMBEDDING_SETTINGS", "Embeddings", "MANIFEST", "RUN_FILE", "check_dtype", "check_same_settings",
           "embedding_settings", "finished_rows", "shard_name", "write_manifest", "write_shard"]
