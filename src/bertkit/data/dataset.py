"""`PretrainingDataset`: a torch Dataset over a prepared folder of memory-mapped shards, O(1) per instance, and
`InstanceBatch`, a batch of its instances read as contiguous token arrays (what the DataLoader fetches)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.masking import IGNORE_INDEX
from bertkit.data.prepare import CONFIG_FILE, TOKENIZER_DIR, vocab_fingerprint
from bertkit.data.pretraining import VocabInfo
from bertkit.data.shards import INDEX_FILE, ShardArrays, open_shard, read_index
from bertkit.errors import BertkitError, DataError, data_error
from bertkit.io import check_file, sealed_entries
from bertkit.tokenizer.tokenizer import load_vocab


@dataclass
class InstanceBatch(Sequence):
    """Instances of one batch, unpadded, back to back: instance b is tokens[starts[b] : starts[b] + lengths[b]].

    Every array is numpy, int64 unless noted. Static masks (`mask_counts` not None): instance b's masked positions
    and original ids are the next `mask_counts[b]` entries of `masked_positions` / `masked_labels`. Indexing gives
    the item dicts `PretrainingDataset[i]` gives, for code that reads a batch as a list of items.
    """

    tokens: np.ndarray  # (total tokens,)
    lengths: np.ndarray  # (batch,)
    a_lengths: np.ndarray  # (batch,) tokens of [CLS] A [SEP] (token_type_ids 0)
    is_random_next: np.ndarray  # (batch,)
    indices: np.ndarray | None  # (batch,) dataset indices (they key dynamic masks); None if the items had none
    mask_counts: np.ndarray | None = None
    masked_positions: np.ndarray | None = None
    masked_labels: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        """Where each instance begins in `tokens`."""
        return np.cumsum(self.lengths) - self.lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, b: int) -> dict[str, Any]:  # type: ignore[override]
        start, n = int(self.starts[b]), int(self.lengths[b])
        masked = None
        if self.mask_counts is not None:
            lo = int(self.mask_counts[:b].sum())
            hi = lo + int(self.mask_counts[b])
            masked = (self.masked_positions[lo:hi], self.masked_labels[lo:hi])  # type: ignore[index]
        return _item(self.tokens[start : start + n], int(self.a_lengths[b]), int(self.is_random_next[b]),
                     None if self.indices is None else int(self.indices[b]), masked)

    @classmethod
    def from_items(cls, items: Sequence[Mapping[str, Any]]) -> "InstanceBatch":
        """The batch of a list of item dicts (`PretrainingDataset[i]`'s, or any with the same keys)."""
        if not items:
            raise ValueError("empty batch")
        ids = [np.asarray(x["input_ids"], dtype=np.int64) for x in items]
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        a_lengths = np.array([int(np.count_nonzero(np.asarray(x["token_type_ids"]) == 0)) for x in items])
        batch = cls(tokens=np.concatenate(ids), lengths=lengths, a_lengths=a_lengths,
                    is_random_next=np.array([int(x["next_sentence_label"]) for x in items], dtype=np.int64),
                    indices=np.array([int(x["index"]) for x in items]) if all("index" in x for x in items) else None)
        statics = ["masked_lm_labels" in x for x in items]
        if any(statics):
            if not all(statics):
                raise ValueError("a batch mixes items with and without static masks")
            labels = [np.asarray(x["masked_lm_labels"], dtype=np.int64) for x in items]
            positions = [np.flatnonzero(x != IGNORE_INDEX) for x in labels]
            batch.mask_counts = np.array([len(p) for p in positions], dtype=np.int64)
            batch.masked_positions = np.concatenate(positions).astype(np.int64)
            batch.masked_labels = np.concatenate([x[p] for x, p in zip(labels, positions)])
        return batch


def _item(tokens: np.ndarray, a_length: int, is_random_next: int, index: int | None,
          masked: tuple[np.ndarray, np.ndarray] | None) -> dict[str, Any]:
    """One instance as `PretrainingDataset[i]` gives it; `masked`: its static masks' positions and original ids."""
    ids = torch.from_numpy(np.array(tokens, dtype=np.int64))
    token_type_ids = torch.zeros_like(ids)
    token_type_ids[a_length:] = 1
    item: dict[str, Any] = {"input_ids": ids, "token_type_ids": token_type_ids, "attention_mask": torch.ones_like(ids),
                            "next_sentence_label": torch.tensor(is_random_next, dtype=torch.long)}
    if index is not None:
        item["index"] = index
    if masked is not None:
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[torch.from_numpy(np.array(masked[0], dtype=np.int64))] = torch.from_numpy(np.array(masked[1], np.int64))
        item["masked_lm_labels"] = labels
    return item


def check_stored_files(folder: Path, index: dict[str, Any]) -> None:
    """DataError unless the tokenizer and data settings stored beside the shards are the ones they were made with:
    the stored vocabulary against index.json's vocab_sha256 (another tokenizer means other token ids), then every
    file index.json lists under "files" against its sha256 (folders prepared before that list check the first)."""
    marker = folder / INDEX_FILE
    vocab = folder / TOKENIZER_DIR / "vocab.txt"
    if not vocab.is_file():
        raise data_error(vocab, None, f"missing; the vocabulary the shards' token ids were made with ({marker})")
    try:
        found, expected = vocab_fingerprint(load_vocab(vocab)), index.get("vocab_sha256")
    except BertkitError as e:  # not UTF-8, an empty or duplicate token: a damaged data folder, named as one
        raise DataError(str(e)) from None
    if found != expected:
        raise data_error(vocab, None, f"not the vocabulary the shards' token ids were made with: its tokens hash to "
                                      f"{found[:12]}..., {marker.name} records vocab_sha256 {str(expected)[:12]}... "
                                      "(the tokenizer/ folder was replaced); put back the tokenizer the data was "
                                      "prepared with, or prepare the data again with this one")
    if "files" in index:
        for entry in sealed_entries(index, marker, error=DataError).values():
            check_file(folder, entry, marker, DataError)


class PretrainingDataset(Dataset):
    """Instances of a `prepare_pretraining` folder. Item i is a dict of 1-D int64 tensors, unpadded:
    input_ids, token_type_ids, attention_mask, masked_lm_labels (static masks only; -100 where not masked),
    next_sentence_label (0 = B follows A, 1 = B is random, as in transformers' BertForPreTraining), and index.

    Shards are verified against index.json (sizes always, sha256 when `verify_checksums`) and memory-mapped
    lazily in each process, so the dataset pickles cheaply into DataLoader workers. A DataLoader fetches a whole
    batch at once (`__getitems__`): an `InstanceBatch` of contiguous token arrays, read with array indexing.
    """

    def __init__(self, folder: str | os.PathLike, verify_checksums: bool = True) -> None:
        self.folder = Path(folder)
        self.index = read_index(self.folder)
        check_stored_files(self.folder, self.index)
        self.config = PretrainingDataConfig.load(self.folder / CONFIG_FILE)
        self._entries = self.index["shards"]
        self._paths = [check_file(self.folder, e, self.folder / INDEX_FILE, DataError, verify_checksums)  # size, sha256
                       for e in self._entries]
        counts = [e["num_instances"] for e in self._entries]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if int(self._starts[-1]) != self.index["num_instances"]:
            raise data_error(self.folder / "index.json", None, "shard instance counts do not add up to num_instances")
        self._shards: list[ShardArrays] | None = None
        self._table: dict[str, np.ndarray] | None = None

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
        state["_table"] = None  # rebuilt there on its first batch
        return state

    def _shard(self, k: int) -> ShardArrays:
        if self._shards is None:
            # plain ndarray views of the maps: np.memmap's own indexing costs a Python call per array read
            self._shards = [ShardArrays(**{k: np.asarray(v) for k, v in open_shard(p, e).named().items()})
                            for p, e in zip(self._paths, self._entries)]
        return self._shards[k]

    def _instance_table(self) -> dict[str, np.ndarray]:
        """Every instance's shard, first token (in its shard), length, [CLS] A [SEP] length and next-sentence label
        (and first masked entry and count with static masks), as flat arrays by dataset index: built on the first
        batched read (36 bytes per instance), so that a batch's fields are one gather each, not a few array
        operations per shard it touches."""
        if self._table is None:
            shards = [self._shard(k) for k in range(len(self._entries))]
            table = {
                "shard": np.repeat(np.arange(len(shards), dtype=np.int32), [len(s) for s in shards]),
                "first": np.concatenate([s.offsets[:-1] for s in shards]).astype(np.int64),
                "length": np.concatenate([np.diff(s.offsets) for s in shards]).astype(np.int64),
                "a_length": np.concatenate([s.a_lengths for s in shards]).astype(np.int64),
                "is_random_next": np.concatenate([s.is_random_next for s in shards]).astype(np.int64),
            }
            if shards[0].mask_offsets is not None:
                table["mask_first"] = np.concatenate([s.mask_offsets[:-1] for s in shards]).astype(np.int64)
                table["mask_count"] = np.concatenate([np.diff(s.mask_offsets) for s in shards]).astype(np.int64)
            self._table = table
        return self._table

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"instance {i} out of range for a dataset of {n}")
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        s = self._shard(k)
        j = i - int(self._starts[k])
        masked = None
        if s.mask_offsets is not None:
            lo, hi = int(s.mask_offsets[j]), int(s.mask_offsets[j + 1])
            masked = (s.masked_positions[lo:hi], s.masked_labels[lo:hi])  # type: ignore[index]
        return _item(s.input_ids[s.offsets[j] : s.offsets[j + 1]], int(s.a_lengths[j]), int(s.is_random_next[j]), i,
                     masked)

    def __getitems__(self, indices: Sequence[int]) -> InstanceBatch:
        """The instances at `indices` as one `InstanceBatch` (what `torch.utils.data.DataLoader` fetches)."""
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if idx.size == 0:
            raise ValueError("empty batch")
        idx = np.where(idx < 0, idx + n, idx)
        if idx.min() < 0 or idx.max() >= n:
            raise IndexError(f"instance {int(idx.max() if idx.max() >= n else idx.min())} out of range for a "
                             f"dataset of {n}")
        t = self._instance_table()
        # The rows sorted by shard, so that each shard's tokens are read with one array operation on one slice;
        # the batch is put back in the order asked for at the end.
        shard_of = t["shard"][idx]
        order = np.argsort(shard_of, kind="stable")
        by_shard = shard_of[order]
        cuts = np.flatnonzero(by_shard[1:] != by_shard[:-1]) + 1
        blocks = [(self._shard(int(by_shard[lo])), lo, hi)
                  for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(idx)]]))]
        back = np.empty_like(order)
        back[order] = np.arange(len(idx))
        sorted_idx = idx[order]
        lengths = t["length"][idx]
        tokens = _gather_runs(blocks, "input_ids", t["first"][sorted_idx], lengths[order], back)
        batch = InstanceBatch(tokens, lengths, t["a_length"][idx], t["is_random_next"][idx], idx)
        if "mask_first" in t:
            counts = t["mask_count"][sorted_idx]
            batch.mask_counts = counts[back]
            batch.masked_positions = _gather_runs(blocks, "masked_positions", t["mask_first"][sorted_idx], counts, back)
            batch.masked_labels = _gather_runs(blocks, "masked_labels", t["mask_first"][sorted_idx], counts, back)
        return batch


def _gather_runs(blocks: list[tuple[ShardArrays, int, int]], name: str, first: np.ndarray, counts: np.ndarray,
                 back: np.ndarray) -> np.ndarray:
    """Rows sorted by shard (`blocks`: shard, first row, end row), row r's run of array `name` starting at
    first[r] in its shard: the runs back to back as int64, in the original row order (`back[i]`: row i's place)."""
    src = _runs(first, counts)  # in each row's own shard
    ends = np.cumsum(counts)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
    for s, lo, hi in blocks:
        a, b = (int(ends[lo - 1]) if lo else 0), int(ends[hi - 1])
        out[a:b] = getattr(s, name)[src[a:b]]
    return out[_runs((ends - counts)[back], counts[back])]


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of the runs [starts[i], starts[i] + lengths[i]), concatenated."""
    total = int(lengths.sum())
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift
