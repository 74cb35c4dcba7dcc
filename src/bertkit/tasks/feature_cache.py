"""The feature-based approach's cache (BERT paper, section 5.3): a frozen encoder runs once per sequence and every
layer's hidden states are kept on disk in fp16, memory-mapped, for every epoch and every feature choice.

A cache file is CACHE_DIR/<sha256>.npy, shape (tokens of all sequences, L + 1, hidden), the sequences one after
another in their order, the embeddings' output first. Its name hashes the encoder's weights and the sequences'
input ids, so other weights or other inputs are another file and a stale cache cannot be read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.errors import CheckpointError
from bertkit.io import atomic_path
from bertkit.model.heads import BertForFrozenTokenClassification
from bertkit.progress import progress_bar
from bertkit.tasks.base import Collator, Feature, iter_model_outputs

logger = logging.getLogger(__name__)

CACHED_KEY = "hidden_layers"  # the feature key (and the frozen head's forward argument) of the cached states
ENCODE_BATCH_SIZE = 64


class _LayerFeatures(nn.Module):
    """The frozen head's encoder alone, answering with its stacked hidden states (what iter_model_outputs reads)."""

    def __init__(self, head: BertForFrozenTokenClassification) -> None:
        super().__init__()
        self.head = head

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> SimpleNamespace:
        return SimpleNamespace(**{CACHED_KEY: self.head.layer_features(input_ids, attention_mask, token_type_ids)})


def cache_key(head: BertForFrozenTokenClassification, features: Sequence[Feature]) -> str:
    """sha256 of the encoder's weights (names, shapes, bytes) and of every sequence's input and token type ids."""
    h = hashlib.sha256()
    for name, tensor in sorted(head.bert.state_dict().items()):
        h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    for f in features:
        h.update(np.asarray(f["input_ids"], dtype=np.int64).tobytes() + b"|")
        h.update(np.asarray(f.get("token_type_ids", []), dtype=np.int64).tobytes() + b";")
    return h.hexdigest()


def write_cache(head: BertForFrozenTokenClassification, features: Sequence[Feature], path: Path,
                batch_size: int = ENCODE_BATCH_SIZE) -> None:
    """Run the encoder once over every sequence (batched by length) and write its hidden states to `path` (fp16)."""
    lengths = [len(f["input_ids"]) for f in features]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    config = head.config
    shape = (int(offsets[-1]), config.num_hidden_layers + 1, config.hidden_size)
    started = time.perf_counter()
    collate = Collator(pad_token_id=config.pad_token_id, model_keys=("input_ids", "token_type_ids"))
    with atomic_path(path) as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=shape)
        with progress_bar(len(features), "encoding once (frozen)", "seq") as bar:
            for i, out in iter_model_outputs(_LayerFeatures(head), features, collate, batch_size, (CACHED_KEY,),
                                             per_token=True):
                array[offsets[i]:offsets[i + 1]] = out[CACHED_KEY]
                bar.update(1)
        array.flush()
        del array
    logger.info("encoded %d sequences (%d tokens) once in %.0f s -> %s", len(features), shape[0],
                time.perf_counter() - started, path)


def with_cached_layers(head: BertForFrozenTokenClassification, features: Sequence[Feature],
                       cache_dir: str | os.PathLike) -> list[Feature]:
    """The features, each with its (seq, L + 1, hidden) fp16 hidden states under CACHED_KEY: read from the cache
    in `cache_dir` when it holds them, else computed once and written there first."""
    path = Path(cache_dir) / f"{cache_key(head, features)}.npy"
    if path.is_file():
        logger.info("reusing the cached encoder features %s", path)
    else:
        write_cache(head, features, path)
    layers = np.load(path, mmap_mode="r")
    lengths = [len(f["input_ids"]) for f in features]
    expected = (sum(lengths), head.config.num_hidden_layers + 1, head.config.hidden_size)
    if layers.shape != expected:
        raise CheckpointError(f"{path}: cached features of shape {layers.shape}, expected {expected}; delete the "
                              "file to compute them again")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [{**f, CACHED_KEY: layers[offsets[i]:offsets[i + 1]]} for i, f in enumerate(features)]
