"""The embedding helpers: the pooling modes (token vectors -> one sentence vector), a folder's sentence-transformers
settings, and padding id lists into a batch. Used by the encoder, the feature extractor, the CLI and the server.

`POOLINGS` is the one declaration of the pooling modes: the Encoder, `bertkit.load(...).encode`, `bertkit embed
--pooling`, the server's /embed request schema and the reading of a folder's `1_Pooling/config.json` all take their
choices from it, so a new mode is one entry here.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bertkit.errors import ConfigError


@dataclass(frozen=True)
class Pooling:
    """One way to turn a sentence's token vectors into one vector."""

    pool: Callable[[Tensor, Tensor], Tensor]
    """(hidden (batch, seq, hidden), attention_mask (batch, seq), 1 on real tokens) -> (batch, hidden)."""
    help: str
    """What it reads, in a few words (the CLI's --help)."""
    sentence_transformers: str | None = None
    """The switch of a sentence-transformers folder's 1_Pooling/config.json that asks for it (None: no such)."""


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of the real (mask = 1) tokens' vectors."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def cls_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The [CLS] token's vector."""
    return hidden[:, 0]


# The pooling modes by name. Where a folder's 1_Pooling/config.json switches on more than one (sentence-transformers
# then concatenates them), the first in this order is read.
POOLINGS: dict[str, Pooling] = {
    "mean": Pooling(mean_pool, "mean over the real tokens", "pooling_mode_mean_tokens"),
    "cls": Pooling(cls_pool, "the [CLS] vector", "pooling_mode_cls_token"),
}
DEFAULT_POOLING = "mean"  # where neither the caller nor the folder names one


def check_pooling(name: str) -> Pooling:
    """The pooling mode called `name`; ConfigError listing the known ones otherwise."""
    if name not in POOLINGS:
        raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {name!r}")
    return POOLINGS[name]


def pool_hidden(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(batch, seq, hidden) -> (batch, hidden), pooled the way `pooling` (a POOLINGS name) says."""
    return check_pooling(pooling).pool(hidden, attention_mask)


def folder_defaults(folder: str | Path) -> dict[str, Any]:
    """pooling / normalize / max_length a folder's sentence-transformers files ask for (empty dict if none): the
    embedding defaults of `Encoder(folder)`, `bertkit.load(folder).encode`, `bertkit embed` and /embed."""
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
    switches = read("1_Pooling/config.json")
    if isinstance(switches, dict):
        on = [key for key, value in switches.items() if key.startswith("pooling_mode_") and value]
        known = [name for name, mode in POOLINGS.items() if mode.sentence_transformers in on]
        if known:
            found["pooling"] = known[0]
        where = folder / "1_Pooling" / "config.json"
        if not known and on:
            warnings.warn(f"{where} switches on {', '.join(on)}, which bertkit has no pooling for (it has "
                          f"{', '.join(POOLINGS)}); embeddings use {DEFAULT_POOLING} pooling unless pooling= says "
                          "otherwise", stacklevel=2)
        elif len(on) > 1:
            warnings.warn(f"{where} switches on {', '.join(on)}, whose vectors sentence-transformers concatenates; "
                          f"bertkit pools one way: embeddings use {known[0]} pooling unless pooling= says otherwise",
                          stacklevel=2)
    modules = read("modules.json")
    if isinstance(modules, list):
        found["normalize"] = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
    return found


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
