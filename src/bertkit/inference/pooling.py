"""Padding id lists into a batch, and the pooling modes and a folder's sentence-transformers settings, declared in
`bertkit.model.pooling` (where the embedding task's head reads them too) and re-exported here for the inference side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bertkit.model.pooling import (DEFAULT_POOLING, POOLINGS, Pooling, check_pooling, cls_pool,  # noqa: F401
                                   folder_defaults, mean_pool, pool_hidden)

if TYPE_CHECKING:  # the pooling modes read without torch (`bertkit embed --help` lists them)
    from torch import Tensor


def pad_batch(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]], pad_id: int | None,
              width: int | None = None) -> dict[str, Tensor]:
    """Right-pad token-id lists to the longest (or to `width`, if that is longer): input_ids, token_type_ids and
    attention_mask, each (batch, seq).

    Padded positions are masked out, so a vocabulary without [PAD] (pad_id None) pads with id 0."""
    import torch

    longest = max(width or 0, *(len(x) for x in ids))
    input_ids = torch.full((len(ids), longest), pad_id if pad_id is not None else 0, dtype=torch.long)
    token_type_ids = torch.zeros((len(ids), longest), dtype=torch.long)
    attention_mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for row, (x, t) in enumerate(zip(ids, type_ids)):
        input_ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        token_type_ids[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        attention_mask[row, : len(x)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
