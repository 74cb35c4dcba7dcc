"""The task registry: every task module found, each name and alias resolving to its task and its head, and a
hand-written config.json that names only a task opening into that head (the registry is the one table of names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bertkit
from bertkit.errors import CheckpointError, ConfigError
from bertkit.model import MODEL_CLASSES, BertConfig, BertModel
from bertkit.model.checkpoint import load_model
from bertkit.tasks import ALIASES, TASKS, get_task, open_task_folder


def test_every_task_module_is_registered_in_order() -> None:
    assert list(TASKS) == ["classification", "ner", "qa", "multiple-choice"]
    assert ALIASES["glue"] == "classification" and ALIASES["swag"] == "multiple-choice"


@pytest.mark.parametrize("name", sorted(set(TASKS) | set(ALIASES)))
def test_each_name_and_alias_finds_its_task_and_its_head(name: str, tmp_path: Path) -> None:
    task = get_task(name)
    assert name in (task.name, *task.aliases)
    assert task.model_class_name in MODEL_CLASSES
    # A folder whose config.json names only `task: name` (no `architectures`) opens into the head the task fine-tunes
    # when opened as a fine-tuned folder; the model layer alone refuses it, naming the fix.
    BertModel(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37)).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                  + [f"w{i}" for i in range(94)]) + "\n", encoding="utf-8")
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]
    config["task"] = name
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert type(open_task_folder(tmp_path).model).__name__ == task.model_class_name
    assert type(bertkit.load(tmp_path).model).__name__ == task.model_class_name
    with pytest.raises(CheckpointError, match=f"names task '{name}' but no `architectures`"):
        load_model(tmp_path)


def test_an_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown task 'sentiment'; expected one of classification, ner"):
        get_task("sentiment")
