"""Fine-tuning tasks, one module each (classification, ner, qa, multiple_choice, embedding). `get_task(name)` finds one.

The registry is the task classes themselves: every `Task` subclass with a `name` defined in a module of this package
(but the SHARED ones, which the registry leaves to the modules that use them, so reading every task's options needs
no torch) is registered with its aliases, so a new task is one new module (plus its head in `bertkit.model.heads`).
A plug-in task joins with `register_task(cls, *heads)`. Two tasks claiming one name, alias or endpoint are an error
here, not a silent overwrite. Each task's head is declared to the model floor (`bertkit.model.folder.TASK_HEADS`),
so a folder whose config.json names only its task opens into that head.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

from bertkit.errors import ConfigError
from bertkit.model.folder import register_task_head
from bertkit.tasks.base import Serving, Task


# How the built-in tasks are listed (CLI help, error messages); other tasks follow, in the order they are found.
ORDER = ("classification", "ner", "qa", "multiple-choice")
# The modules of this package that hold what the tasks share, not tasks: not imported by the registry.
SHARED = ("base", "columns", "feature_cache", "metrics", "significance")


def _discover() -> list[type[Task]]:
    """Every named Task subclass defined in a module of this package (but the SHARED ones)."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name not in SHARED:
            module = importlib.import_module(f"{__name__}.{info.name}")
            found += [value for value in vars(module).values() if isinstance(value, type)
                      and value.__module__ == module.__name__ and issubclass(value, Task) and value.name]
    return found


def _aliases(tasks: dict[str, type[Task]]) -> dict[str, str]:
    """Alias -> task name; an alias that is another task's name or alias is an error."""
    out: dict[str, str] = {}
    for name, cls in tasks.items():
        for alias in cls.aliases:
            if alias in tasks or out.get(alias, name) != name:
                raise TypeError(f"task alias {alias!r} of {name!r} is also the name or an alias of another task")
            out[alias] = name
    return out


# What `bertkit serve` answers itself, beside the tasks' endpoints: a task may not declare one of these.
SERVER_ENDPOINTS = ("health", "embed", "fill-mask", "search", "docs", "redoc", "openapi.json")


def _endpoints(tasks: dict[str, type[Task]]) -> dict[str, str]:
    """Endpoint -> the task serving it; a TypeError naming both when two tasks, or a task and the server itself,
    declare one endpoint (found when the task is registered, not later by every server of the process)."""
    out: dict[str, str] = {}
    for name, cls in tasks.items():
        if cls.serving is None:
            continue
        endpoint = cls.serving.endpoint
        if endpoint in SERVER_ENDPOINTS:
            raise TypeError(f"task {name!r} declares the endpoint /{endpoint}, which the server serves itself "
                            f"({', '.join('/' + e for e in SERVER_ENDPOINTS)})")
        if endpoint in out:
            raise TypeError(f"task {name!r} declares the endpoint /{endpoint}, which task {out[endpoint]!r} serves "
                            "already")
        out[endpoint] = name
    return out


def _head_of(cls: type[Task]) -> Callable[[dict[str, Any]], str]:
    """The head class name a fine-tuned folder of task `cls` holds, from its config.json `task_settings`."""
    def head(raw: dict[str, Any]) -> str:
        task = cls()
        return task.head(task.settings_of(raw, "config.json task_settings")).class_name
    return head


TASKS: dict[str, type[Task]] = {}
ALIASES: dict[str, str] = {}


def register_task(cls: type[Task], *heads: type) -> type[Task]:
    """Add a task class to the registry (a plug-in's; also usable as a class decorator): its name
    and aliases become known to `get_task`, `bertkit finetune`'s options built after the call, evaluate, predict,
    serve and export-onnx, and the head classes it brings (`heads`, which its `head` names) to the model floor.
    Registering the same class again is a no-op; a name, alias or endpoint another task holds is an error naming
    both."""
    if not (isinstance(cls, type) and issubclass(cls, Task) and cls.name):
        raise TypeError(f"register_task takes a Task subclass with a name, got {cls!r}")
    _check_current_api(cls)
    taken = TASKS.get(cls.name)
    if taken is not None and taken is not cls:
        raise TypeError(f"task name {cls.name!r} is claimed by {taken.__qualname__} and {cls.__qualname__}")
    tasks = dict(sorted({**TASKS, cls.name: cls}.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER
                        else len(ORDER)))
    aliases = _aliases(tasks)  # checks the new aliases and endpoint before anything changes
    _endpoints(tasks)
    if heads:
        from bertkit.model.heads import register_head

        for head in heads:
            register_head(head)
    register_task_head((cls.name, *cls.aliases), _head_of(cls))
    TASKS.clear()
    TASKS.update(tasks)
    ALIASES.clear()
    ALIASES.update(aliases)
    return cls


MOVED = {"model_inputs": "the Head its head() returns (Head.inputs)", "label_keys": "the Head its head() returns "
         "(Head.labels)", "start_settings": "settings(options, start=None)"}  # Task members that moved


def _check_current_api(cls: type[Task]) -> None:
    """A plug-in written for an older Task is refused with what moved, not failed later in a run."""
    old = [name for name in MOVED if any(name in vars(k) for k in cls.__mro__ if k is not Task)]
    if old:
        raise TypeError(f"task {cls.name!r} ({cls.__qualname__}) defines " + "; ".join(
            f"{name}, which is now {MOVED[name]}" for name in old))
    if "start" not in inspect.signature(cls.settings).parameters:
        raise TypeError(f"task {cls.name!r} ({cls.__qualname__}): settings must take the start folder's config, "
                        "settings(self, options=None, start=None)")


def serving_task(config: Any, head: str) -> Task | None:
    """The task whose endpoint serves a loaded folder with head class `head`: the task its config.json names, else
    the one whose default head it is; None when no task serves it (a BertModel, a masked LM)."""
    named = TASKS.get(ALIASES.get(config.task, config.task)) if config.task else None
    for task in (cls() for cls in ([named] if named is not None else TASKS.values())):
        if task.serving is not None and task.head(task.settings_of(config)).class_name == head:
            return task
    return None


def folder_serving(model: Any, tokenizer: Any) -> Serving | None:
    """The serving object of a loaded folder's head (`serving_task`), built with the task settings saved in the
    folder, as `bertkit predict` and the server read them; None when no task serves the head."""
    task = serving_task(model.config, type(model).__name__)
    return None if task is None else task.serving(task, task.settings_of(model.config), tokenizer)


for _cls in _discover():
    register_task(_cls)


def get_task(name: str) -> Task:
    """The task registered under `name` (or an alias); ConfigError listing the known ones otherwise."""
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise ConfigError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[key]()


__all__ = ["ALIASES", "SERVER_ENDPOINTS", "TASKS", "Serving", "Task", "folder_serving", "get_task", "register_task",
           "serving_task"]
