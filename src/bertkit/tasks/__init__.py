"""Fine-tuning tasks, one module each (classification, ner, qa, multiple_choice). `get_task(name)` finds one.

The registry is the task classes themselves: every `Task` subclass with a `name` defined in a module of this package
is found here (with its `aliases`), so a new task is one new module, plus its head in `bertkit.model.heads` when it
needs a new one.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import ConfigError
from bertkit.tasks.base import Task

if TYPE_CHECKING:
    from bertkit.model.folder import ModelFolder

# Modules of this package that hold no task (helpers and the runner, which imports this registry).
_NOT_TASKS = {"base", "metrics", "runner", "payoff", "distill"}


def _discover() -> dict[str, type[Task]]:
    found: dict[str, type[Task]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _NOT_TASKS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            defined_here = isinstance(value, type) and value.__module__ == module.__name__
            if defined_here and issubclass(value, Task) and value.name:
                found[value.name] = value
    return dict(sorted(found.items(), key=lambda kv: kv[1].order))


TASKS: dict[str, type[Task]] = _discover()
ALIASES: dict[str, str] = {alias: name for name, cls in TASKS.items() for alias in cls.aliases}


def task_model_class(folder: str | Path) -> str | None:
    """The head for a config.json that names a bertkit `task` but no `architectures` (a hand-written one): the
    class its task fine-tunes, which only this registry knows. None when `architectures` decides (or no task)."""
    from bertkit.model.checkpoint import read_config

    config, raw = read_config(folder)
    if raw.get("architectures") or not config.task:
        return None
    return get_task(config.task).model_class(dict(config.task_settings or {}))


def open_task_folder(folder: str | Path, **kwargs: Any) -> ModelFolder:
    """`open_folder` that also opens a config.json naming only its task (`task_model_class`): every floor above
    the tasks opens folders through this."""
    from bertkit.model.folder import open_folder

    return open_folder(folder, task_model_class(folder), **kwargs)


def get_task(name: str) -> Task:
    """The task registered under `name` (or an alias); ConfigError listing the known ones otherwise."""
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise ConfigError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[key]()


__all__ = ["ALIASES", "TASKS", "Task", "get_task", "open_task_folder", "task_model_class"]
