"""The task registry: every task module found, each name and alias resolving to its task and its head, and a
hand-written config.json that names only a task opening into that head wherever a folder is opened (the registry is
the one table of names: it declares each task's head to the model floor, `bertkit.model.folder.TASK_HEADS`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bertkit
from bertkit.errors import ConfigError
from bertkit.model import MODEL_CLASSES, BertConfig, BertModel
from bertkit.model.folder import TASK_HEADS, load_model, open_folder
from bertkit.tasks import ALIASES, TASKS, get_task

HEADS = {"classification": "BertForSequenceClassification", "ner": "BertForTokenClassification",
         "qa": "BertForQuestionAnswering", "multiple-choice": "BertForMultipleChoice",
         "embedding": "BertForEmbedding"}
"""The head each task fine-tunes by default."""


def test_every_task_module_is_registered_in_order() -> None:
    assert list(TASKS) == ["classification", "ner", "qa", "multiple-choice", "embedding"]
    assert ALIASES["glue"] == "classification" and ALIASES["swag"] == "multiple-choice"


@pytest.mark.parametrize("name", sorted(set(TASKS) | set(ALIASES)))
def test_each_name_and_alias_finds_its_task_and_its_head(name: str, tmp_path: Path) -> None:
    task = get_task(name)
    assert name in (task.name, *task.aliases)
    head = HEADS[task.name]
    assert task.head(task.settings()).class_name == head and head in MODEL_CLASSES
    # A folder whose config.json names only `task: name` (no `architectures`) opens into the head the task fine-tunes,
    # through every step of the door: the model floor has the head from the registry.
    assert TASK_HEADS[name]({}) == head
    BertModel(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37)).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                  + [f"w{i}" for i in range(94)]) + "\n", encoding="utf-8")
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]
    config["task"] = name
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert type(open_folder(tmp_path).model).__name__ == head
    assert type(bertkit.load(tmp_path).model).__name__ == head
    assert type(load_model(tmp_path)).__name__ == head


def test_a_setting_that_picks_another_head_reaches_the_model_floor() -> None:
    """NER's `frozen` setting picks the frozen tagger: the head the registry declared reads the folder's settings."""
    for name in ("ner", *get_task("ner").aliases):
        assert TASK_HEADS[name]({"frozen": True}) == "BertForFrozenTokenClassification"
        assert TASK_HEADS[name]({}) == "BertForTokenClassification"


def test_an_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown task 'sentiment'; expected one of classification, ner"):
        get_task("sentiment")


@pytest.mark.parametrize("member", ["model_inputs", "label_keys", "start_settings", "settings"])
def test_a_plug_in_written_for_the_older_task_is_refused_naming_what_moved(member: str) -> None:
    from bertkit.tasks import register_task
    from bertkit.tasks.classification import ClassificationTask

    body = {"name": "older"}
    if member == "settings":  # an override without the start folder's config
        body["settings"] = lambda self, options=None: ClassificationTask.settings(self, options)
    else:
        body[member] = ("input_ids",) if member != "start_settings" else (lambda self, options, start: None)
    older = type("Older", (ClassificationTask,), body)
    expected = "start=None" if member == "settings" else {"model_inputs": "Head.inputs", "label_keys": "Head.labels",
                                                           "start_settings": "settings(options, start=None)"}[member]
    before = dict(TASKS)
    with pytest.raises(TypeError, match=r"task 'older' \(Older\)") as error:
        register_task(older)
    assert expected in str(error.value) and TASKS == before
