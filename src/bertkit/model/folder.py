"""Open a model folder in one place: its model (the head class config.json names) and its tokenizer, with one set
of error messages. The API (`bertkit.load`), the encoder, the tasks, the server and the CLI all open folders through
`open_folder`. (The sentence-embedding defaults a folder's sentence-transformers files set are the inference
floor's: `bertkit.inference.pooling.folder_defaults`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.model.bert import BertPreTrainedModel
from bertkit.model.checkpoint import load_model
from bertkit.model.config import BertConfig
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer import BertTokenizer


@dataclass
class ModelFolder:
    """What a model folder holds, opened: the model and its tokenizer."""

    path: Path
    model: BertPreTrainedModel
    tokenizer: BertTokenizer

    @property
    def config(self) -> BertConfig:
        return self.model.config


def open_folder(folder: str | Path, model_class: str | None = None, **kwargs: Any) -> ModelFolder:
    """Open a model folder (or a shipped model's name): the class its config.json names, or `model_class`.

    kwargs go to from_pretrained (strict=, dtype=, config field overrides such as num_labels=). Every problem is a
    CheckpointError or TokenizerError naming the folder and the file.
    """
    path = resolve_model_dir(folder)
    model = load_model(path, model_class, **kwargs)
    return ModelFolder(path, model, BertTokenizer.from_pretrained(path))
