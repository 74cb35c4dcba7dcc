"""Open a model folder for inference: the head class its config names, its tokenizer, its raw config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.model import BertModel, BertPreTrainedModel
from bertkit.model.checkpoint import load_model, model_class_for, read_config
from bertkit.tokenizer import BertTokenizer

__all__ = ["base_model", "head_class", "load_model", "load_tokenizer", "read_raw_config"]

load_tokenizer = BertTokenizer.from_pretrained  # the one tokenizer loader (errors name the folder and the file)


def read_raw_config(folder: str | Path) -> dict[str, Any]:
    """The folder's config.json as a dict (for `architectures`, `task`, label names), CheckpointError if unusable."""
    return read_config(Path(folder))[1]


def head_class(folder: str | Path) -> type[BertPreTrainedModel]:
    """The head class a folder was saved with (BertModel when config.json names none)."""
    return model_class_for(read_raw_config(folder), str(Path(folder) / "config.json"))


def base_model(model: BertPreTrainedModel) -> BertModel:
    """The BertModel inside a head (or the model itself)."""
    return model if isinstance(model, BertModel) else model.bert  # type: ignore[return-value]
