"""Open a model folder in one place: its model (the head class config.json names), its tokenizer and the
sentence-embedding defaults its sentence-transformers files set, with one set of error messages. The API
(`bertkit.load`), the encoder, the tasks, the server and the CLI all open folders through `open_folder`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.model.bert import BertPreTrainedModel
from bertkit.model.checkpoint import load_model
from bertkit.model.config import BertConfig
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer import BertTokenizer


@dataclass
class ModelFolder:
    """What a model folder holds, opened: the model, its tokenizer and its embedding defaults."""

    path: Path
    model: BertPreTrainedModel
    tokenizer: BertTokenizer
    defaults: dict[str, Any] = field(default_factory=dict)
    """pooling / normalize / max_length from the folder's sentence-transformers files (empty when it has none)."""

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
    return ModelFolder(path, model, BertTokenizer.from_pretrained(path), folder_defaults(path))


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
