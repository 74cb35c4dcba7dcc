"""Embedding a corpus: the job behind `bertkit embed` (`run(EmbedConfig)`), streaming and resumable.

Rows are read lazily (bertkit.data.texts) and embedded a shard at a time (`shard_size` rows: one Encoder call
each, so memory holds one shard, whatever the input's size). Two outputs:
- a folder (`-o DIR`): fixed-size shards and a manifest (bertkit.inference.vector_store); `--resume` after a kill
  skips the finished shards and ends bitwise equal to an uninterrupted run. Under torchrun each rank embeds its
  contiguous range of shards and rank 0 writes the one manifest at the end: the same files as a single process.
- a `.npy` file (`-o OUT.npy`): the (rows, dim) matrix, streamed into a temporary file renamed into place at the end.
A file input is read once before the model is loaded: every row is checked, and the count gives the ETA and
torchrun's split.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from bertkit.data.texts import TextRow, count_rows, read_texts, resolve_format
from bertkit.errors import BertkitError, CheckpointError, ConfigError, data_error
from bertkit.inference.encoder import Encoder
from bertkit.inference.vector_store import (
    MANIFEST,
    RUN_FILE,
    check_same_settings,
    embedding_settings,
    finished_rows,
    kept_shard,
    shard_name,
    write_manifest,
    write_shard,
)
from bertkit.io import (
    atomic_open,
    atomic_write_json,
    check_output_dir,
    check_output_file,
    file_sha256,
    folder_lock,
    read_json_object,
    remove_stale_temp_files,
    unseal,
)
from bertkit.jobs.embed_config import EmbedConfig
from bertkit.progress import progress_bar
from bertkit.training.distributed import DistInfo, any_rank, cleanup_distributed, setup_distributed

PROGRESS_INTERVAL_S = 5.0  # one progress line this often when stderr is not a terminal
NPY_HEADER_BYTES = 128  # a .npy header as numpy writes it for any 2-D shape under 10**40 rows


@dataclass
class EmbedResult:
    rows: int
    dim: int
    output: str
    shards_computed: int
    shards_skipped: int
    blank_lines: list[int]
    """The first blank rows' line numbers (this rank's)."""
    blank_count: int
    rank: int = 0
    """The torchrun rank that did this part (0 in a single process; rank 0 wrote the manifest)."""

    def add(self, chunk: list[TextRow]) -> None:
        """Count a chunk's rows and note its blank ones."""
        self.rows += len(chunk)
        blanks = [r.line for r in chunk if not r.text.strip()]
        self.blank_count += len(blanks)
        self.blank_lines += blanks[: max(0, 10 - len(self.blank_lines))]


def encode_texts(encoder: Encoder, texts: list[str], config: EmbedConfig, bar: Any = None) -> np.ndarray:
    """One chunk's (rows, dim) float32 embeddings: exactly what `bertkit.load(model).encode(texts, ...)` returns;
    the progress `bar` advances after every forward pass."""
    return encoder.encode(texts, pooling=config.pooling, normalize=config.normalize, batch_size=config.batch_size,
                          on_batch=bar.update if bar is not None else None).numpy()


def chunks(rows: Iterator[TextRow], size: int) -> Iterator[list[TextRow]]:
    """Consecutive lists of `size` rows (the last shorter), read lazily."""
    while chunk := list(itertools.islice(rows, size)):
        yield chunk


def rank_shards(shards: int, info: DistInfo) -> range:
    """The contiguous range of shard numbers rank `info.rank` embeds (all of them in a single process)."""
    return range(shards * info.rank // info.world_size, shards * (info.rank + 1) // info.world_size)


def run(config: EmbedConfig, resume: bool = False) -> EmbedResult:
    """Embed every row of config.input into config.output (see the module's docstring); returns what was done."""
    c = config
    info = setup_distributed(c.device)
    try:
        if info.distributed and (not c.to_folder or c.input == "-"):
            raise ConfigError("under torchrun, bertkit embed needs a file INPUT and a folder output (-o DIR): each "
                              "rank reads its own range of the file's rows and writes its own shards")
        if c.to_folder:
            return _run_to_folder(c, resume, info)
        if resume:
            raise ConfigError(f"--resume continues a folder output; {c.output} is a .npy file (written whole, "
                              "atomically, at the end): give -o a folder name to write resumable shards")
        return _run_to_npy(c)
    finally:
        cleanup_distributed()


def _open_encoder(c: EmbedConfig, info: DistInfo) -> tuple[Encoder, dict[str, Any]]:
    encoder = Encoder(c.model, precision=c.precision, device=info.device, max_length=c.max_length)
    if info.is_main:
        print(f"precision: {encoder.precision} ({encoder.precision_reason})", file=sys.stderr)
    return encoder, embedding_settings(c.model, encoder, c.pooling, c.normalize)


def _total_rows(c: EmbedConfig) -> int | None:
    """The input's row count, every row's fields checked on the way (None for stdin, which is read once)."""
    if c.input == "-":
        return None
    total = count_rows(c.input, c.format, c.text_field, c.id_field)
    if not total:
        raise data_error(c.input, None, "no text to embed")
    return total


def _run_record(c: EmbedConfig, settings: dict[str, Any], total: int | None) -> dict[str, Any]:
    """embed.json: what a resume must match (the embedding settings, the input and its content's sha256, the shard
    cut, the stored dtype). Stdin has no content to hash before it is read: a resume compares each finished shard's
    rows with the rows as they arrive instead (`kept_shard`), which it does for a file too."""
    source = {"input": c.input, "format": resolve_format(c.input, c.format), "text_field": c.text_field,
              "id_field": c.id_field, "rows": total,
              "input_bytes": Path(c.input).stat().st_size if c.input != "-" else None,
              "input_sha256": file_sha256(c.input) if c.input != "-" else None}
    return {**settings, **source, "dtype": c.dtype, "shard_size": c.shard_size}


def _check_resume(folder: Path, record: dict[str, Any]) -> None:
    """ConfigError naming every field in which this run differs from the one that wrote `folder`."""
    found = read_json_object(folder / RUN_FILE, ConfigError)
    check_same_settings(found, record, str(folder / RUN_FILE), "resume it with the same model and options, or "
                        "choose a new output folder")
    differ = [f"{k}: {found.get(k)!r} there, {record[k]!r} here" for k in record
              if k not in ("model",) and found.get(k) != record[k]]
    if differ:
        raise ConfigError(f"{folder / RUN_FILE}: written by a run with other inputs or options ({'; '.join(differ)});"
                          " resume it with the same ones, or choose a new output folder")


def _together(info: DistInfo, step: Any, main_only: bool = False) -> Any:
    """`step()`'s value (run on rank 0 only when `main_only`); every rank raises if it failed on any (so no rank waits
    for one that stopped)."""
    error, value = None, None
    if info.is_main or not main_only:
        try:
            value = step()
        except BertkitError as e:
            error = e
    if any_rank(error is not None, info):
        raise error or ConfigError(f"{'rank 0' if main_only else 'another rank'} stopped with an error (see its "
                                   "message)")
    return value


def _run_to_folder(c: EmbedConfig, resume: bool, info: DistInfo) -> EmbedResult:
    folder = Path(c.output)
    has_run = (folder / RUN_FILE).is_file()
    if info.is_main and not (resume and has_run):
        check_output_dir(folder, option="--resume (to continue the run that wrote them)")
        check_output_file(folder / RUN_FILE)
    total = _total_rows(c)
    encoder, settings = _open_encoder(c, info)
    record = _run_record(c, settings, total)

    def start() -> None:
        if resume and has_run:
            _check_resume(folder, record)
            remove_stale_temp_files(folder, min_age_s=0)  # a killed writer's temporary files (theirs are unlocked)
        else:
            atomic_write_json(folder / RUN_FILE, record)

    lock = folder_lock(folder) if info.is_main else None
    with lock if lock is not None else contextlib.nullcontext():
        _together(info, start, main_only=True)
        shards = -(-total // c.shard_size) if total is not None else None
        mine = rank_shards(shards, info) if shards is not None else None
        result = _together(info, lambda: _embed_shards(c, encoder, folder, mine, total, info, resume and has_run))
        if info.is_main:
            count = shards if shards is not None else result.shards_computed + result.shards_skipped
            rows = [finished_rows(folder, k, settings["dim"], c.dtype) for k in range(count)]
            missing = [k for k, r in enumerate(rows) if r is None]
            if missing:
                raise CheckpointError(f"{folder}: shards {missing[:5]} are missing at the end of the run")
            past = sorted(p.name for p in folder.glob(f"{shard_name(count)}.*"))
            if past:  # a resumed stream that ended sooner than the one the folder was started with
                raise CheckpointError(f"{folder / past[0]}: a shard past the input's end ({count} shards of "
                                      f"{c.shard_size} rows): the folder was started with a longer input, so its "
                                      "shards are not this input's; embed it into a new folder")
            manifest = write_manifest(folder, {**record}, [int(r or 0) for r in rows])
            result.rows = manifest["rows"]
        return result


def _embed_shards(c: EmbedConfig, encoder: Encoder, folder: Path, mine: range | None, total: int | None,
                  info: DistInfo, resuming: bool) -> EmbedResult:
    """Embed this rank's shards of the input into `folder`, skipping the finished ones when `resuming`."""
    dim = encoder.config.hidden_size
    result = EmbedResult(0, dim, str(folder), 0, 0, [], 0, info.rank)
    todo = total if mine is None else min(total or 0, mine.stop * c.shard_size) - mine.start * c.shard_size
    rows = read_texts(c.input, c.format, c.text_field, c.id_field)
    with progress_bar(todo, "embed", "texts", enabled=c.progress and info.is_main,
                      interval=PROGRESS_INTERVAL_S) as bar:
        for k, chunk in enumerate(chunks(rows, c.shard_size)):
            if mine is not None and k < mine.start:
                continue
            if mine is not None and k >= mine.stop:
                break
            result.add(chunk)
            if resuming and kept_shard(folder, k, [(r.id, r.text) for r in chunk], dim, c.dtype, c.source):
                result.shards_skipped += 1
                bar.update(len(chunk))
            else:
                if resuming:
                    unseal(folder, MANIFEST)  # until the new manifest lands, the folder is not complete
                vectors = _checked(encode_texts(encoder, [r.text for r in chunk], c, bar), chunk, c,
                                   f"shard {k} was not written")
                write_shard(folder, k, vectors.astype(c.dtype), [(r.id, r.text) for r in chunk])
                result.shards_computed += 1
    if not result.rows and mine is None:
        raise data_error(c.source, None, "no text to embed")
    return result


def _checked(vectors: np.ndarray, chunk: list[TextRow], c: EmbedConfig, outcome: str) -> np.ndarray:
    """`vectors` if all finite; else the CheckpointError naming the first bad line: a broken model (weights or
    config) must not leave NaN behind with exit code 0."""
    if vectors.shape[0] != len(chunk):
        raise CheckpointError(f"{c.model}: {vectors.shape[0]} embeddings for {len(chunk)} texts; {outcome}")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size:
        raise CheckpointError(f"{c.model}: the model computed non-finite values (NaN or infinity) for {bad.size} of "
                              f"{len(chunk)} lines (first: {c.input}:{chunk[bad[0]].line}); its weights or "
                              f"config.json are broken; {outcome}")
    return vectors


def npy_header(shape: tuple[int, int], dtype: str) -> bytes:
    """The header `np.save` writes for a C-ordered matrix of this shape and dtype (NPY_HEADER_BYTES long)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": shape})
    header = buffer.getvalue()
    assert len(header) == NPY_HEADER_BYTES, len(header)
    return header


def _run_to_npy(c: EmbedConfig) -> EmbedResult:
    check_output_file(c.output)  # a read-only folder is reported now, not after the whole computation
    total = _total_rows(c)
    encoder, _ = _open_encoder(c, DistInfo())
    dim = encoder.config.hidden_size
    result = EmbedResult(0, dim, c.output, 0, 0, [], 0)
    with atomic_open(c.output, "wb") as f:
        f.write(npy_header((total or 0, dim), c.dtype))
        with progress_bar(total, "embed", "texts", enabled=c.progress, interval=PROGRESS_INTERVAL_S) as bar:
            for chunk in chunks(read_texts(c.input, c.format, c.text_field, c.id_field), c.shard_size):
                vectors = _checked(encode_texts(encoder, [r.text for r in chunk], c, bar), chunk, c,
                                   "nothing was written")
                f.write(vectors.astype(c.dtype).tobytes())
                result.add(chunk)
                result.shards_computed += 1
        if not result.rows:
            raise data_error(c.source, None, "no text to embed")
        if result.rows != (total or 0):
            _rewrite_header(f, c, (result.rows, dim))
    return result


def _rewrite_header(f: IO[bytes], c: EmbedConfig, shape: tuple[int, int]) -> None:
    """Put the final row count into the header (stdin's rows are known only at the end; a file that changed during
    the run is an error)."""
    if c.input != "-":
        raise data_error(c.input, None, f"changed while it was read ({shape[0]} rows now); nothing was written")
    if not f.seekable():
        raise ConfigError(f"{c.output}: a pipe or device cannot take a matrix of rows counted at the end; give a "
                          "file INPUT instead of stdin, or a file or folder output")
    f.seek(0)
    f.write(npy_header(shape, c.dtype))


__all__ = ["EmbedConfig", "EmbedResult", "encode_texts", "npy_header", "rank_shards", "run"]
