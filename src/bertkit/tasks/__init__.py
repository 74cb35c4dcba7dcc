"""Fine-tuning tasks, one module each (classification, ner, qa, multiple_choice). `get_task(name)` finds one.

The registry is the task classes themselves: every module of this package is imported, and every `Task` subclass
with a `name` defined in one is found here (with its `aliases`), so a new task is one new module, plus its head in
`bertkit.model.heads` when it needs a new one. The package holds tasks and what they share (base, metrics,
significance, feature_cache) and nothing that imports this registry (the jobs that run tasks live in `bertkit.jobs`),
so no module needs skipping; two tasks claiming one name or alias are an error here, not a silent overwrite.
Each task's head is declared to the model floor at import (`bertkit.model.folder.TASK_HEADS`), so a folder whose
config.json names only its task opens into that head wherever folders are opened, without the model floor importing
this one.
"""

from __future__ import annotations

import importlib
import pkgutil

from bertkit.errors import ConfigError
from bertkit.model.folder import register_task_head
from bertkit.tasks.base import Task


def _discover() -> dict[str, type[Task]]:
    """Every named Task subclass defined in a module of this package, by name, in the tasks' `order`."""
    found: dict[str, type[Task]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            defined_here = isinstance(value, type) and value.__module__ == module.__name__
            if defined_here and issubclass(value, Task) and value.name:
                if value.name in found:
                    raise TypeError(f"task name {value.name!r} is claimed by {found[value.name].__qualname__} and "
                                    f"{value.__qualname__}")
                found[value.name] = value
    return dict(sorted(found.items(), key=lambda kv: kv[1].order))


def _aliases(tasks: dict[str, type[Task]]) -> dict[str, str]:
    """Alias -> task name; an alias that is another task's name or alias is an error."""
    out: dict[str, str] = {}
    for name, cls in tasks.items():
        for alias in cls.aliases:
            if alias in tasks or out.get(alias, name) != name:
                raise TypeError(f"task alias {alias!r} of {name!r} is also the name or an alias of another task")
            out[alias] = name
    return out


def _declare_heads(tasks: dict[str, type[Task]]) -> None:
    """Give the model floor each task's head under its name and aliases (`bertkit.model.folder.TASK_HEADS`), so a
    config.json that names only its task opens into that head wherever a folder is opened."""
    for name, cls in tasks.items():
        register_task_head((name, *cls.aliases), cls().model_class)


TASKS: dict[str, type[Task]] = _discover()
ALIASES: dict[str, str] = _aliases(TASKS)
_declare_heads(TASKS)


def get_task(name: str) -> Task:
    """The task registered under `name` (or an alias); ConfigError listing the known ones otherwise."""
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise ConfigError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[key]()


__all__ = ["ALIASES", "TASKS", "Task", "get_task"]
