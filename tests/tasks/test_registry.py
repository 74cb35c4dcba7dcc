"""The task registry: every task module found, each name and alias resolving to its task, and the model layer's
map for folders without `architectures` agreeing with it."""

from __future__ import annotations

import pytest

from bertkit.errors import ConfigError
from bertkit.model import MODEL_CLASSES
from bertkit.model.checkpoint import TASK_CLASSES
from bertkit.tasks import ALIASES, TASKS, get_task


def test_every_task_module_is_registered_in_order() -> None:
    assert list(TASKS) == ["classification", "ner", "qa", "multiple-choice"]
    assert ALIASES["glue"] == "classification" and ALIASES["swag"] == "multiple-choice"


@pytest.mark.parametrize("name", sorted(set(TASKS) | set(ALIASES)))
def test_each_name_and_alias_finds_its_task_and_its_head(name: str) -> None:
    task = get_task(name)
    assert name in (task.name, *task.aliases)
    assert task.model_class_name in MODEL_CLASSES
    # A folder whose config.json has only `task: name` loads into the class the task fine-tunes.
    assert TASK_CLASSES[name] == task.model_class_name


def test_an_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown task 'sentiment'; expected one of classification, ner"):
        get_task("sentiment")
