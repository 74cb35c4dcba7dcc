"""The feature-based approach's cache (BERT paper, section 5.3): a frozen encoder runs once per sequence and every
layer's hidden states are kept on disk in fp16, memory-mapped, for every epoch and every feature choice.

A cache file is CACHE_DIR/<sha256>.npy, shape (tokens of all sequences, L + 1, hidden), the sequences one after
another in their order, the embeddings' output first. Its name hashes the cache format, the encoder's config (the
fields that change its hidden states), its weights and the sequences' input ids, so another encoder or other
inputs are another file and a stale cache cannot be read. Beside it, <sha256>.json records the file's shape and
sha256, checked on every use: a damaged file (truncated, zeroed, garbage) is computed again, with a warning.

A writer holds a lock on its temporary file; the temporary files of writers that died (kill -9) are removed by
the next run, and SIGTERM removes the writer's own. Two runs may share one cache folder at the same time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.errors import CheckpointError, Interrupted
from bertkit.io import atomic_path, atomic_write_json, file_sha256, remove_stale_temp_files
from bertkit.model.heads import BertForFrozenTokenClassification
from bertkit.progress import progress_bar
from bertkit.tasks.base import Collator, Feature, iter_model_outputs

logger = logging.getLogger(__name__)

CACHED_KEY = "hidden_layers"  # the feature key (and the frozen head's forward argument) of the cached states
ENCODE_BATCH_SIZE = 64
CACHE_FORMAT = 2
"""Raised whenever what a cache file holds or how it is computed changes: files of an older format are never read
(it is part of the key). 2: the key hashes the encoder's config; a .json record with the file's sha256."""
CACHE_DTYPE = np.float16
# Config fields that leave the encoder's hidden states (eval mode, given weights) unchanged: the head's labels and
# settings, dropout, initialisation. Left out of the key so other taggers and feature choices share one file.
_NOT_IN_KEY = frozenset({"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout",
                         "initializer_range", "num_labels", "label_names", "id2label", "label2id", "problem_type",
                         "tabular_inputs", "frozen_tagger", "task", "task_settings"})
_STALE_TEMP_FILES = ".[0-9a-f]*.tmp"  # `.<key>.npy.<random>.tmp`, `.<key>.json.<random>.tmp`


class _LayerFeatures(nn.Module):
    """The frozen head's encoder alone, answering with its stacked hidden states (what iter_model_outputs reads)."""

    def __init__(self, head: BertForFrozenTokenClassification) -> None:
        super().__init__()
        self.head = head

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                token_type_ids: Tensor | None = None) -> SimpleNamespace:
        return SimpleNamespace(**{CACHED_KEY: self.head.layer_features(input_ids, attention_mask, token_type_ids)})


def cache_key(head: BertForFrozenTokenClassification, features: Sequence[Feature]) -> str:
    """sha256 of the cache format, the encoder's config and weights (names, shapes, bytes), and of every
    sequence's input and token type ids."""
    h = hashlib.sha256(f"bertkit feature cache {CACHE_FORMAT}\n".encode())
    encoder_config = {k: v for k, v in head.config.to_dict().items() if k not in _NOT_IN_KEY}
    h.update(json.dumps(encoder_config, sort_keys=True).encode() + b"\n")
    for name, tensor in sorted(head.bert.state_dict().items()):
        h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    for f in features:
        h.update(np.asarray(f["input_ids"], dtype=np.int64).tobytes() + b"|")
        h.update(np.asarray(f.get("token_type_ids", []), dtype=np.int64).tobytes() + b";")
    return h.hexdigest()


@contextlib.contextmanager
def _sigterm_raises(what: str) -> Iterator[None]:
    """Inside the block SIGTERM raises Interrupted (as SIGINT raises KeyboardInterrupt), so the partial cache file is
    removed on the way out instead of staying behind when the process is terminated."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum} while {what}; the partial cache file was removed, run the "
                          "command again to start over", signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_cache(head: BertForFrozenTokenClassification, features: Sequence[Feature], path: Path,
                batch_size: int = ENCODE_BATCH_SIZE) -> None:
    """Run the encoder once over every sequence (batched by length) and write its hidden states to `path` (fp16),
    with its record (shape, sha256) beside it."""
    lengths = [len(f["input_ids"]) for f in features]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    config = head.config
    shape = (int(offsets[-1]), config.num_hidden_layers + 1, config.hidden_size)
    started = time.perf_counter()
    collate = Collator(pad_token_id=config.pad_token_id, model_keys=("input_ids", "token_type_ids"))
    with _sigterm_raises("encoding the frozen features"), atomic_path(path) as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=CACHE_DTYPE, shape=shape)
        with progress_bar(len(features), "encoding once (frozen)", "seq") as bar:
            for i, out in iter_model_outputs(_LayerFeatures(head), features, collate, batch_size, (CACHED_KEY,),
                                             per_token=True):
                array[offsets[i]:offsets[i + 1]] = out[CACHED_KEY]
                bar.update(1)
        array.flush()
        del array
        with open(tmp, "rb") as f:
            digest = file_sha256(f)
        # The record first, then the data under its name: a data file never lacks its record.
        atomic_write_json(record_path(path), {"format": CACHE_FORMAT, "shape": list(shape), "dtype": "float16",
                                              "sha256": digest})
    logger.info("encoded %d sequences (%d tokens) once in %.0f s -> %s", len(features), shape[0],
                time.perf_counter() - started, path)


def record_path(path: Path) -> Path:
    """The .json record (format, shape, sha256) of a cache file."""
    return path.with_suffix(".json")


def read_cache(path: Path, expected_shape: tuple[int, ...], verify: bool = True) -> np.ndarray:
    """The cache file memory-mapped, after checking it against its record (sha256) when `verify`, and its shape and
    dtype. Raises ValueError saying what is wrong with a damaged file (truncated, zeroed, garbage, no record)."""
    recorded = None
    if verify:
        try:
            recorded = json.loads(record_path(path).read_text(encoding="utf-8"))["sha256"]
        except FileNotFoundError:
            raise ValueError(f"its record {record_path(path).name} is missing") from None
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise ValueError(f"its record {record_path(path).name} is unreadable ({e!r})") from None
    with open(path, "rb") as f:  # hashed and mapped through one open file: the bytes checked are the bytes read
        if recorded is not None:
            digest = file_sha256(f)
            if digest != recorded:
                raise ValueError(f"its sha256 is {digest[:12]}..., its record says {str(recorded)[:12]}... (changed "
                                 "or damaged since it was written)")
        f.seek(0)
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(f)
        if shape != expected_shape or dtype != CACHE_DTYPE or fortran_order:
            raise ValueError(f"it holds {dtype} of shape {shape}, expected float16 of shape {expected_shape}")
        return np.memmap(f, dtype=dtype, mode="r", shape=shape, offset=f.tell())


def with_cached_layers(head: BertForFrozenTokenClassification, features: Sequence[Feature],
                       cache_dir: str | os.PathLike) -> list[Feature]:
    """The features, each with its (seq, L + 1, hidden) fp16 hidden states under CACHED_KEY: read from the cache
    in `cache_dir` when it holds them intact, else computed once and written there first."""
    cache_dir = Path(cache_dir)
    if cache_dir.is_dir():
        removed = remove_stale_temp_files(cache_dir, _STALE_TEMP_FILES)
        if removed:
            logger.warning("%s: removed %d temporary file(s) left by interrupted runs (%s)", cache_dir,
                           len(removed), ", ".join(p.name for p in removed))
    path = cache_dir / f"{cache_key(head, features)}.npy"
    lengths = [len(f["input_ids"]) for f in features]
    expected = (sum(lengths), head.config.num_hidden_layers + 1, head.config.hidden_size)
    layers = None
    if path.is_file():
        try:
            layers = read_cache(path, expected)
            logger.info("reusing the cached encoder features %s", path)
        except (ValueError, OSError) as e:
            # Derived data: computing it again is what anyone would do with a damaged file, so do it, and say so.
            logger.warning("%s: damaged cache file: %s; computing the features again", path, e)
    if layers is None:
        write_cache(head, features, path)
        try:
            layers = read_cache(path, expected, verify=False)  # just hashed while writing
        except ValueError as e:
            raise CheckpointError(f"{path}: the cache file just written cannot be read back: {e}") from None
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [{**f, CACHED_KEY: layers[offsets[i]:offsets[i + 1]]} for i, f in enumerate(features)]


def frozen_inputs(model: nn.Module, features: Sequence[Feature], options: Any,
                  output_dir: str | os.PathLike) -> list[Feature]:
    """What fine-tuning trains a frozen tagger on: the features with its encoder's hidden states, computed once and
    cached in the options' `feature_cache` (default OUTPUT/feature_cache) instead of every epoch; any other
    model's features as they are."""
    if not isinstance(model, BertForFrozenTokenClassification):
        return list(features)
    return with_cached_layers(model, features, getattr(options, "feature_cache", None) or
                              Path(output_dir) / "feature_cache")
