"""Fine-tuning tasks, one module each: classification, ner, qa, multiple_choice. `get_task(name)` finds one."""

from __future__ import annotations

from bertkit.errors import ConfigError
from bertkit.tasks.base import Task
from bertkit.tasks.classification import ClassificationTask
from bertkit.tasks.multiple_choice import MultipleChoiceTask
from bertkit.tasks.ner import NerTask
from bertkit.tasks.qa import QATask

TASKS: dict[str, type[Task]] = {
    "classification": ClassificationTask,
    "ner": NerTask,
    "qa": QATask,
    "multiple-choice": MultipleChoiceTask,
}
# Other spellings people use, including the names bertkit.model.checkpoint keeps in config.task.
ALIASES = {
    "sequence_classification": "classification",
    "glue": "classification",
    "token_classification": "ner",
    "squad": "qa",
    "multiple_choice": "multiple-choice",
    "swag": "multiple-choice",
}


def get_task(name: str) -> Task:
    """The task registered under `name` (or an alias); ConfigError listing the known ones otherwise."""
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise ConfigError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[key]()


__all__ = ["TASKS", "Task", "get_task"]
