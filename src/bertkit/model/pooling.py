"""Sentence embeddings from token vectors: the pooling modes, and a model folder's sentence-transformers files, read
and written here, in one place.

`POOLINGS` is the one declaration of the pooling modes (the encoder, `bertkit embed`, the server, the embedding
task and a folder's `1_Pooling/config.json` all take their choices from it). The embedding head's settings
(`EmbeddingHeadSettings`) are declared here too, without torch, so the embedding task's options read without it.

A folder's embedding settings live in sentence-transformers' layout (`modules.json`, `1_Pooling/config.json`,
`sentence_bert_config.json`): `write_sentence_transformers` writes them as the Hub's models have them and
`folder_defaults` reads them back, so `bertkit embed` and `SentenceTransformer(folder)` give the same vectors.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.dataclass_io import Config, config_from_dict, spec
from bertkit.errors import ConfigError
from bertkit.io import atomic_write_json

if TYPE_CHECKING:  # the pooling functions only call tensor methods: this module, and the settings, read without torch
    from torch import Tensor
else:
    Tensor = Any  # what annotations name at run time (typing.get_type_hints), torch unimported


@dataclass(frozen=True)
class Pooling:
    """One way to turn a sentence's token vectors into one vector."""

    pool: Callable[[Tensor, Tensor], Tensor]
    """(hidden (batch, seq, hidden), attention_mask (batch, seq), 1 on real tokens) -> (batch, hidden)."""
    help: str
    """What it reads, in a few words (the CLI's --help)."""
    sentence_transformers: str | None = None
    """The switch of a sentence-transformers folder's 1_Pooling/config.json that asks for it (None: no such)."""
    mode: str | None = None
    """Its name in sentence-transformers 6's single `pooling_mode` (None: no such)."""


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of the real (mask = 1) tokens' vectors."""
    import torch  # here, not at the top: this module's settings are read without torch

    mask = attention_mask.unsqueeze(1).to(hidden.dtype)  # (batch, 1, seq)
    # The masked sum as one batched product: a broadcast multiply and a sum make two passes (and two backward).
    # Outside autocast, so it sums in the hidden states' own precision, as the multiply and the sum did.
    with torch.autocast(hidden.device.type, enabled=False):
        return mask.bmm(hidden).squeeze(1) / mask.sum(2).clamp(min=1e-9)


def cls_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The [CLS] token's vector."""
    return hidden[:, 0]


# The pooling modes by name. Where a folder's 1_Pooling/config.json switches on more than one (sentence-transformers
# then concatenates them), the first in this order is read.
POOLINGS: dict[str, Pooling] = {
    "mean": Pooling(mean_pool, "mean over the real tokens", "pooling_mode_mean_tokens", "mean"),
    "cls": Pooling(cls_pool, "the [CLS] vector", "pooling_mode_cls_token", "cls"),
}
DEFAULT_POOLING = "mean"  # where neither the caller nor the folder names one

# sentence-transformers' module types as the Hub's models name them (every version resolves these names).
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
ST_POOLING = "sentence_transformers.models.Pooling"
ST_NORMALIZE = "sentence_transformers.models.Normalize"
# The pooling switches of a 1_Pooling/config.json as all-MiniLM-L6-v2's has them (all off but the chosen one).
ST_POOLING_SWITCHES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                       "pooling_mode_mean_sqrt_len_tokens")


DEFAULT_SCALE = 20.0  # sentence-transformers' scale for its losses; SimCSE's temperature 0.05 (Gao et al. 2021)
MAX_SCALE = 100.0  # the largest learned scale: CLIP's clamp of its learned logit scale (Radford et al. 2021)


@dataclass
class EmbeddingHeadSettings(Config):
    """How BertForEmbedding embeds and scores: the part of the embedding task's settings (config.task_settings) that
    the head reads. Its pooling, normalisation and length are also written in sentence-transformers' layout
    (`write_sentence_transformers`), where `bertkit embed`, the server and sentence-transformers read them."""

    pooling: str = spec(DEFAULT_POOLING, choices=tuple(POOLINGS))
    """How a text's token vectors become one vector: mean (over the real tokens) or cls."""
    normalize: bool = True
    """L2-normalise every embedding (dot product = cosine)."""
    max_length: int = spec(128, ge=1, le=2**20)
    """Word pieces per text (sentence-transformers' max_seq_length)."""
    scale: float = spec(DEFAULT_SCALE, gt=0, le=MAX_SCALE)
    """The losses' scale, an inverse temperature: cosines are multiplied by it (20: temperature 0.05)."""
    learn_scale: bool = False
    """Learn the scale, from `scale` (as CLIP learns its logit scale; at most MAX_SCALE)."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "EmbeddingHeadSettings":
        """These settings from a dict that holds others too (config.task_settings), each value checked."""
        names = {f.name for f in fields(cls)}
        return config_from_dict(cls, {k: v for k, v in settings.items() if k in names}, "task_settings")


def check_pooling(name: str) -> Pooling:
    """The pooling mode called `name`; ConfigError listing the known ones otherwise."""
    if name not in POOLINGS:
        raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {name!r}")
    return POOLINGS[name]


def pool_hidden(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(batch, seq, hidden) -> (batch, hidden), pooled the way `pooling` (a POOLINGS name) says."""
    return check_pooling(pooling).pool(hidden, attention_mask)


def _pooling_modes(switches: dict[str, Any]) -> list[str]:
    """The modes a 1_Pooling/config.json asks for, as its own names: the switches set on (the Hub's layout), or
    sentence-transformers 6's `pooling_mode` (a name or a list of names)."""
    mode = switches.get("pooling_mode")
    if isinstance(mode, str):
        return [mode]
    if isinstance(mode, list):
        return [m for m in mode if isinstance(m, str)]
    return [key for key, value in switches.items() if key.startswith("pooling_mode_") and value]


def folder_defaults(folder: str | Path) -> dict[str, Any]:
    """pooling / normalize / max_length a folder's sentence-transformers files ask for (empty dict if none): the
    embedding defaults of `Encoder(folder)`, `bertkit.load(folder).encode`, `bertkit embed`, /embed, and the
    embedding task's start folder."""
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
        on = _pooling_modes(switches)
        known = [name for name, mode in POOLINGS.items() if mode.sentence_transformers in on or mode.mode in on]
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


def write_sentence_transformers(folder: str | Path, pooling: str, normalize: bool, max_length: int,
                                hidden_size: int) -> None:
    """Write a model folder's sentence-transformers files (each atomically), as the Hub's models have them:
    modules.json (Transformer, Pooling, and Normalize when `normalize`), 1_Pooling/config.json (the `pooling`
    switch on), sentence_bert_config.json (max_seq_length) and config_sentence_transformers.json (cosine
    similarity). `folder_defaults` reads back exactly what this writes."""
    folder = Path(folder)
    switch = check_pooling(pooling).sentence_transformers
    if switch is None:
        raise ConfigError(f"pooling {pooling!r} has no sentence-transformers counterpart; a folder with it cannot be "
                          "written in sentence-transformers' layout")
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": ST_NORMALIZE})
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "1_Pooling" / "config.json",
                      {"word_embedding_dimension": hidden_size, **{s: s == switch for s in ST_POOLING_SWITCHES}})
    atomic_write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    atomic_write_json(folder / "config_sentence_transformers.json",
                      {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    atomic_write_json(folder / "modules.json", modules)  # last: the file that makes it a sentence-transformers folder
