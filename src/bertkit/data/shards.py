"""Sharded binary storage of pre-training instances, memory-mapped at training time.

A dataset folder holds:

* `shard-NNNNN.bin`: the arrays of one shard, back to back (each 64-byte aligned), written atomically:
  `input_ids` (flat tokens, uint16 or int32), `offsets` (int64, n+1: instance i is input_ids[offsets[i]:
  offsets[i+1]]), `a_lengths` (uint16: tokens of [CLS] A [SEP]), `is_random_next` (uint8) and, for static
  masks, `mask_offsets` (int64, n+1), `masked_positions` (uint16) and `masked_labels` (token dtype).
* `index.json`, written last and atomically: the shards that are complete, each with its byte size, sha256
  and array layout. A crash or a full disk mid-shard leaves a temporary file and an old (or no) index,
  never a shard that looks complete. Readers check sizes (and checksums) against the index.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import DataError, data_error
from bertkit.io import atomic_path, read_json_object

INDEX_FILE = "index.json"
FORMAT_NAME = "bertkit-pretraining-shards"
FORMAT_VERSION = 1
_ALIGN = 64


def shard_file_name(index: int) -> str:
    """File name of shard `index`."""
    return f"shard-{index:05d}.bin"


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype holding every token id."""
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


@dataclass
class ShardArrays:
    """The arrays of one shard, in memory (writer side) or memory-mapped (reader side)."""

    input_ids: np.ndarray
    offsets: np.ndarray
    a_lengths: np.ndarray
    is_random_next: np.ndarray
    mask_offsets: np.ndarray | None = None
    masked_positions: np.ndarray | None = None
    masked_labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def named(self) -> dict[str, np.ndarray]:
        """The arrays present, by name, in file order."""
        return {k: v for k, v in vars(self).items() if v is not None}


def write_shard(path: str | os.PathLike, arrays: ShardArrays) -> dict[str, Any]:
    """Write a shard file atomically; return its index entry (file, bytes, sha256, array layout, counts)."""
    path = Path(path)
    digest = hashlib.sha256()
    layout: dict[str, dict[str, Any]] = {}
    pos = 0
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            for name, arr in arrays.named().items():
                pad = (-pos) % _ALIGN
                if pad:
                    f.write(b"\0" * pad)
                    digest.update(b"\0" * pad)
                    pos += pad
                data = np.ascontiguousarray(arr).tobytes()
                f.write(data)
                digest.update(data)
                layout[name] = {"offset": pos, "dtype": arr.dtype.str, "count": int(arr.size)}
                pos += len(data)
            f.flush()
            os.fsync(f.fileno())
    return {
        "file": path.name,
        "bytes": pos,
        "sha256": digest.hexdigest(),
        "num_instances": len(arrays),
        "num_tokens": int(arrays.input_ids.size),
        "arrays": layout,
    }


def read_index(folder: str | os.PathLike) -> dict[str, Any]:
    """Load and check `index.json` of a dataset folder."""
    path = Path(folder) / INDEX_FILE
    if not path.is_file():
        raise data_error(path, None, "no index: not a prepared pre-training dataset, or its preparation did not finish")
    index = read_json_object(path, DataError)
    if index.get("format") != FORMAT_NAME or index.get("version") != FORMAT_VERSION:
        raise data_error(path, None, f"format {index.get('format')!r} v{index.get('version')}, expected "
                         f"{FORMAT_NAME!r} v{FORMAT_VERSION}")
    return index


def open_shard(path: Path, entry: dict[str, Any]) -> ShardArrays:
    """Memory-map the arrays of a verified shard."""
    maps: dict[str, np.ndarray] = {}
    for name, spec in entry["arrays"].items():
        dtype = np.dtype(spec["dtype"])
        if spec["count"] == 0:
            maps[name] = np.empty(0, dtype=dtype)
        else:
            maps[name] = np.memmap(path, dtype=dtype, mode="r", offset=spec["offset"], shape=(spec["count"],))
    try:
        return ShardArrays(**maps)
    except TypeError as e:
        raise DataError(f"{path}: unexpected arrays in index entry ({e})") from None
