"""`PretrainingCollator`: pads a batch of pre-training instances and, for dynamic masking, draws its masks, with
whole-batch array operations (`bertkit.data.masking`): no Python loop over tokens or instances."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.dataset import IGNORE_INDEX, InstanceBatch
from bertkit.data.masking import MaskTables, instance_keys, mask_batch
from bertkit.data.pretraining import VocabInfo
from bertkit.errors import ConfigError


class PretrainingCollator:
    """Batch `PretrainingDataset` instances (an `InstanceBatch`, as the DataLoader fetches them, or a list of
    items): pad to the longest (optionally a multiple of 8) and return tensors input_ids, token_type_ids,
    attention_mask, labels (masked-LM targets, -100 elsewhere) and, when `next_sentence` (default: the data holds
    sentence pairs), next_sentence_label; without it the model's loss is masked LM alone (RoBERTa's objective).

    With `dynamic_masking`, masks are drawn here (RoBERTa-style), differently each epoch (`set_epoch`): instance
    i's mask is a function of (seed, epoch, i) alone (`bertkit.data.masking`).
    """

    def __init__(self, vocab: VocabInfo | Any, dynamic_masking: bool = False,
                 config: PretrainingDataConfig | None = None, seed: int = 0, pad_to_multiple_of: int | None = None,
                 next_sentence: bool | None = None) -> None:
        self.vocab = vocab if isinstance(vocab, VocabInfo) else VocabInfo.from_vocab(vocab.vocab)
        self.tables = MaskTables.from_vocab(self.vocab)
        self.dynamic_masking = dynamic_masking
        self.config = config or PretrainingDataConfig()
        if next_sentence and not self.config.next_sentence:
            raise ConfigError(f"next-sentence prediction needs sentence-pair instances; this data holds "
                              f"{self.config.instances!r} (prepared with --instances full_sentences)")
        self.next_sentence = self.config.next_sentence if next_sentence is None else next_sentence
        self.seed = seed
        self.pad_to_multiple_of = pad_to_multiple_of
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose masks the next batches get."""
        self.epoch = epoch

    def __call__(self, items: InstanceBatch | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = items if isinstance(items, InstanceBatch) else InstanceBatch.from_items(items)
        if len(batch) == 0:
            raise ValueError("empty batch")
        m = self.pad_to_multiple_of
        longest = int(batch.lengths.max())
        width = -(-longest // m) * m if m else longest
        cols = np.arange(width)
        real = cols[None, :] < batch.lengths[:, None]  # (batch, width)
        input_ids = np.full(real.shape, self.vocab.pad_id, dtype=np.int64)
        input_ids[real] = batch.tokens  # row-major order of the real slots = the instances back to back
        if self.dynamic_masking:
            if batch.mask_counts is not None:
                raise ConfigError("dynamic_masking=True but the dataset holds static masks (prepared without "
                                  "--dynamic-masking)")
            if batch.indices is None:
                raise ConfigError("dynamic masking draws each instance's mask from its dataset index: the items "
                                  "need an 'index' (as PretrainingDataset's have)")
            keys = instance_keys(self.seed, self.epoch, batch.indices)
            input_ids, labels = mask_batch(input_ids, keys, self.tables, **self.config.mask_options())
        else:
            if batch.mask_counts is None:
                raise ConfigError("the dataset holds no masks (prepared with --dynamic-masking): use "
                                  "dynamic_masking=True")
            labels = np.full(real.shape, IGNORE_INDEX, dtype=np.int64)
            labels[np.repeat(np.arange(len(batch)), batch.mask_counts), batch.masked_positions] = batch.masked_labels
        out = {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(((cols[None, :] >= batch.a_lengths[:, None]) & real).astype(np.int64)),
            "attention_mask": torch.from_numpy(real.astype(np.int64)),
            "labels": torch.from_numpy(labels),
        }
        if self.next_sentence:
            out["next_sentence_label"] = torch.from_numpy(np.asarray(batch.is_random_next, dtype=np.int64))
        return out
