"""The embedding helpers: pooling token vectors into one sentence vector and padding id lists into a batch. Used by
the encoder, the reference path, the feature extractor and the server.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from bertkit.errors import ConfigError

POOLINGS = ("mean", "cls")


def pool_hidden(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(batch, seq, hidden) -> (batch, hidden): the [CLS] vector, or the mean over real (mask = 1) tokens."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")


def pad_batch(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]], pad_id: int | None,
              width: int | None = None) -> dict[str, Tensor]:
    """Right-pad token-id lists to the longest (or to `width`, if that is longer): input_ids, token_type_ids and
    attention_mask, each (batch, seq).

    Padded positions are masked out, so a vocabulary without [PAD] (pad_id None) pads with id 0."""
    longest = max(width or 0, *(len(x) for x in ids))
    input_ids = torch.full((len(ids), longest), pad_id if pad_id is not None else 0, dtype=torch.long)
    token_type_ids = torch.zeros((len(ids), longest), dtype=torch.long)
    attention_mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for row, (x, t) in enumerate(zip(ids, type_ids)):
        input_ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        token_type_ids[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        attention_mask[row, : len(x)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
