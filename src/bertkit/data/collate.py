"""`PretrainingCollator`: pads a batch of pre-training instances and, for dynamic masking, draws its masks."""

from __future__ import annotations

import hashlib
import random
from typing import Any, Mapping, Sequence

import torch

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.dataset import IGNORE_INDEX
from bertkit.data.pretraining import VocabInfo, mask_tokens
from bertkit.errors import ConfigError


def instance_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The masking RNG of one instance in one epoch: the same (seed, epoch, index) gives the same mask,
    whatever the batch, its order or the number of DataLoader workers."""
    digest = hashlib.sha256(f"bertkit-dynamic-mask:{seed}:{epoch}:{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


class PretrainingCollator:
    """Batch `PretrainingDataset` items: pad to the longest (optionally a multiple of 8) and return tensors
    input_ids, token_type_ids, attention_mask, labels (masked-LM targets, -100 elsewhere) and, when
    `next_sentence` (default: the data holds sentence pairs), next_sentence_label; without it the model's loss is
    masked LM alone (RoBERTa's objective).

    With `dynamic_masking`, masks are drawn here (RoBERTa-style), differently each epoch (`set_epoch`):
    from (seed, epoch, item index) when items carry an index, else from `generator`.
    """

    def __init__(
        self,
        vocab: VocabInfo | Any,
        dynamic_masking: bool = False,
        config: PretrainingDataConfig | None = None,
        seed: int = 0,
        generator: torch.Generator | None = None,
        pad_to_multiple_of: int | None = None,
        next_sentence: bool | None = None,
    ) -> None:
        self.vocab = vocab if isinstance(vocab, VocabInfo) else VocabInfo.from_vocab(vocab.vocab)
        self.dynamic_masking = dynamic_masking
        self.config = config or PretrainingDataConfig()
        if next_sentence and not self.config.next_sentence:
            raise ConfigError(f"next-sentence prediction needs sentence-pair instances; this data holds "
                              f"{self.config.instances!r} (prepared with --instances full_sentences)")
        self.next_sentence = self.config.next_sentence if next_sentence is None else next_sentence
        self.seed = seed
        self.generator = generator
        self.pad_to_multiple_of = pad_to_multiple_of
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose masks the next batches get."""
        self.epoch = epoch

    def _rng(self, item: Mapping[str, Any]) -> random.Random:
        if "index" in item and self.generator is None:
            return instance_rng(self.seed, self.epoch, int(item["index"]))
        g = self.generator if self.generator is not None else torch.Generator().manual_seed(self.seed)
        return random.Random(int(torch.randint(0, 2**62, (1,), generator=g)))

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("empty batch")
        longest = max(len(x["input_ids"]) for x in items)
        m = self.pad_to_multiple_of
        width = -(-longest // m) * m if m else longest
        batch = len(items)
        input_ids = torch.full((batch, width), self.vocab.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((batch, width), dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        labels = torch.full((batch, width), IGNORE_INDEX, dtype=torch.long)
        nsp = torch.empty(batch, dtype=torch.long)
        c = self.config
        for b, item in enumerate(items):
            ids = torch.as_tensor(item["input_ids"], dtype=torch.long)
            n = len(ids)
            if self.dynamic_masking:
                if "masked_lm_labels" in item:
                    raise ConfigError(
                        "dynamic_masking=True but the dataset holds static masks (prepared without --dynamic-masking)"
                    )
                masked, positions, originals = mask_tokens(ids.tolist(), self.vocab, self._rng(item), **c.mask_options())
                input_ids[b, :n] = torch.tensor(masked, dtype=torch.long)
                labels[b, positions] = torch.tensor(originals, dtype=torch.long)
            else:
                if "masked_lm_labels" not in item:
                    raise ConfigError("the dataset holds no masks (prepared with --dynamic-masking): use dynamic_masking=True")
                input_ids[b, :n] = ids
                labels[b, :n] = torch.as_tensor(item["masked_lm_labels"], dtype=torch.long)
            token_type_ids[b, :n] = torch.as_tensor(item["token_type_ids"], dtype=torch.long)
            attention_mask[b, :n] = 1
            nsp[b] = int(item["next_sentence_label"])
        batch = {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
            "labels": labels,
        }
        if self.next_sentence:
            batch["next_sentence_label"] = nsp
        return batch
