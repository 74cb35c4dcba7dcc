"""`PretrainingDataset`: a torch Dataset over a prepared folder of memory-mapped shards, O(1) per instance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.prepare import CONFIG_FILE, TOKENIZER_DIR
from bertkit.data.pretraining import VocabInfo
from bertkit.data.shards import ShardArrays, open_shard, read_index, verify_shard
from bertkit.errors import data_error

IGNORE_INDEX = -100
"""The label of positions no loss counts (torch cross-entropy's ignore_index): positions without a masked-LM target,
word pieces after a word's first in NER, padding. bertkit's one definition; the model and the tasks import it."""


class PretrainingDataset(Dataset):
    """Instances of a `prepare_pretraining` folder. Item i is a dict of 1-D int64 tensors, unpadded:
    input_ids, token_type_ids, attention_mask, masked_lm_labels (static masks only; -100 where not masked),
    next_sentence_label (0 = B follows A, 1 = B is random, as in transformers' BertForPreTraining), and index.

    Shards are verified against index.json (sizes always, sha256 when `verify_checksums`) and memory-mapped
    lazily in each process, so the dataset pickles cheaply into DataLoader workers.
    """

    def __init__(self, folder: str | os.PathLike, verify_checksums: bool = True) -> None:
        self.folder = Path(folder)
        self.index = read_index(self.folder)
        self.config = PretrainingDataConfig.load(self.folder / CONFIG_FILE)
        self._entries = self.index["shards"]
        self._paths = [verify_shard(self.folder, e, checksum=verify_checksums) for e in self._entries]
        counts = [e["num_instances"] for e in self._entries]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if int(self._starts[-1]) != self.index["num_instances"]:
            raise data_error(self.folder / "index.json", None, "shard instance counts do not add up to num_instances")
        self._shards: list[ShardArrays] | None = None

    @property
    def dynamic_masking(self) -> bool:
        """Whether the shards hold unmasked tokens (masks drawn by the collator)."""
        return bool(self.index["dynamic_masking"])

    @property
    def tokenizer_dir(self) -> Path:
        """The tokenizer folder stored with the data."""
        return self.folder / TOKENIZER_DIR

    def vocab_info(self) -> VocabInfo:
        """Special ids and replacement candidates of the stored vocabulary (for the collator)."""
        return VocabInfo.from_vocab_file(str(self.tokenizer_dir / "vocab.txt"))

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shards"] = None  # re-mapped in the receiving process
        return state

    def _shard(self, k: int) -> ShardArrays:
        if self._shards is None:
            self._shards = [open_shard(p, e) for p, e in zip(self._paths, self._entries)]
        return self._shards[k]

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"instance {i} out of range for a dataset of {n}")
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        s = self._shard(k)
        j = i - int(self._starts[k])
        ids = torch.from_numpy(np.asarray(s.input_ids[s.offsets[j] : s.offsets[j + 1]], dtype=np.int64))
        token_type_ids = torch.zeros_like(ids)
        token_type_ids[int(s.a_lengths[j]) :] = 1
        item: dict[str, Any] = {
            "input_ids": ids,
            "token_type_ids": token_type_ids,
            "attention_mask": torch.ones_like(ids),
            "next_sentence_label": torch.tensor(int(s.is_random_next[j]), dtype=torch.long),
            "index": i,
        }
        if s.mask_offsets is not None:
            lo, hi = int(s.mask_offsets[j]), int(s.mask_offsets[j + 1])
            labels = torch.full_like(ids, IGNORE_INDEX)
            positions = torch.from_numpy(np.asarray(s.masked_positions[lo:hi], dtype=np.int64))
            labels[positions] = torch.from_numpy(np.asarray(s.masked_labels[lo:hi], dtype=np.int64))
            item["masked_lm_labels"] = labels
        return item
