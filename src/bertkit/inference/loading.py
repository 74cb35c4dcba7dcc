"""Open a bertkit (or Hugging Face) model folder for inference: the head class its config names, and its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError
from bertkit.model import MODEL_CLASSES, BertConfig, BertModel, BertPreTrainedModel


def read_config_json(folder: str | Path) -> dict[str, Any]:
    """The raw config.json of a model folder (for `architectures`, `task`, ...), with a clear error if missing."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (expected a model folder with config.json)")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(d).__name__}")
    return d


def architecture(folder: str | Path) -> str:
    """The head class a folder was saved with ('BertModel' when config.json names none)."""
    archs = read_config_json(folder).get("architectures") or ["BertModel"]
    name = archs[0]
    if name not in MODEL_CLASSES:
        raise CheckpointError(f"{Path(folder) / 'config.json'}: architectures[0] is {name!r}, expected one of "
                              f"{', '.join(MODEL_CLASSES)}")
    return name


def load_model(folder: str | Path, cls: type[BertPreTrainedModel] | None = None) -> BertPreTrainedModel:
    """Load the folder's model in eval mode: as `cls` if given, else as the class its config.json names."""
    cls = cls or MODEL_CLASSES[architecture(folder)]
    return cls.from_pretrained(str(folder)).eval()


def load_tokenizer(folder: str | Path) -> Any:
    """The folder's bertkit BertTokenizer (vocab.txt + tokenizer_config.json)."""
    from bertkit.tokenizer import BertTokenizer

    if not (Path(folder) / "vocab.txt").is_file():
        raise CheckpointError(f"{Path(folder) / 'vocab.txt'}: no such file (a model folder needs its vocabulary)")
    return BertTokenizer.from_pretrained(str(folder))


def base_model(model: BertPreTrainedModel) -> BertModel:
    """The BertModel inside a head (or the model itself)."""
    return model if isinstance(model, BertModel) else model.bert  # type: ignore[return-value]


def default_max_seq_length(folder: str | Path | None, config: BertConfig) -> int:
    """sentence-transformers' max_seq_length when the folder has one (MiniLM: 256), else the position table size."""
    if folder is not None:
        path = Path(folder) / "sentence_bert_config.json"
        if path.is_file():
            try:
                value = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length")
            except json.JSONDecodeError:
                value = None
            if isinstance(value, int) and value > 0:
                return min(value, config.max_position_embeddings)
    return config.max_position_embeddings
