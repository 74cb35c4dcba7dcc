"""The embedding helpers: pooling token vectors into one sentence vector, padding id lists into a batch, and the
pooling, normalisation and length a folder's sentence-transformers files ask for. Used by the encoder, the
reference path, the feature extractor and the server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def pad_batch(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]], pad_id: int | None) -> dict[str, Tensor]:
    """Right-pad token-id lists to the longest: input_ids, token_type_ids and attention_mask, each (batch, seq).

    Padded positions are masked out, so a vocabulary without [PAD] (pad_id None) pads with id 0."""
    longest = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), longest), pad_id if pad_id is not None else 0, dtype=torch.long)
    token_type_ids = torch.zeros((len(ids), longest), dtype=torch.long)
    attention_mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for row, (x, t) in enumerate(zip(ids, type_ids)):
        input_ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        token_type_ids[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        attention_mask[row, : len(x)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def folder_defaults(folder: str | Path) -> dict[str, Any]:
    """Pooling, normalisation and length a folder's sentence-transformers files ask for (empty dict if none)."""
    folder = Path(folder)
    found: dict[str, Any] = {}

    def read(name: str) -> Any:
        try:
            return json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    settings = read("sentence_bert_config.json")
    if isinstance(settings, dict) and isinstance(settings.get("max_seq_length"), int):
        found["max_length"] = settings["max_seq_length"]
    pooling = read("1_Pooling/config.json")
    if isinstance(pooling, dict):
        if pooling.get("pooling_mode_mean_tokens"):
            found["pooling"] = "mean"
        elif pooling.get("pooling_mode_cls_token"):
            found["pooling"] = "cls"
    modules = read("modules.json")
    if isinstance(modules, list):
        found["normalize"] = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
    return found
