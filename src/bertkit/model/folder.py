"""Open a model folder in one place: config.json read once, the head class picked, the model built with the config
already read, and the tokenizer. The API (`bertkit.load`), the encoder, the server, the CLI and the jobs all open
folders here, so a bad folder gets the same CheckpointError / TokenizerError naming the folder and the file
everywhere.

The door has three steps, each the one before plus one thing: `read_folder` (config.json, parsed once: for callers
that need only the config, such as a job checking a folder before it trains), `load_model` (+ the model) and
`open_folder` (+ the tokenizer). Each takes a folder, a shipped model's name, or what `read_folder` returned, so a
config read once is handed down instead of read again.

Which head: the class asked for, else the one config.json names in `architectures`, else, for a hand-written config
that names only a bertkit `task`, that task's head (`TASK_HEADS`, filled by the task registry a floor up), else
BertModel. The model's classes (torch) are imported when a step needs them, so the CLI's help reads without torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import CheckpointError
from bertkit.model import families
from bertkit.model.config import BertConfig
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer import load_tokenizer
from bertkit.tokenizer.auto import Tokenizer

if TYPE_CHECKING:
    from bertkit.model.bert import BertPreTrainedModel

# Task name (and each alias) -> the head class name its fine-tuned folders use, given the folder's task settings
# (NER's `frozen` setting picks the frozen tagger, say). Filled by the task registry (`bertkit.tasks`) at import.
TASK_HEADS: dict[str, Callable[[dict[str, Any]], str]] = {}


def register_task_head(names: Iterable[str], head: Callable[[dict[str, Any]], str]) -> None:
    """Declare the head of a task's fine-tuned folders under the task's name and aliases: `head(task_settings)` is
    the class name. (The task registry, which calls this, is where two tasks claiming one name are refused.)"""
    for name in names:
        TASK_HEADS[name] = head


@dataclass(frozen=True)
class FolderConfig:
    """A model folder's config.json, read once: the folder, its BertConfig and the raw dict (for `architectures`)."""

    path: Path
    config: BertConfig
    raw: dict[str, Any]

    @property
    def config_path(self) -> Path:
        from bertkit.model.checkpoint import CONFIG_NAME

        return self.path / CONFIG_NAME


@dataclass
class ModelFolder:
    """What a model folder holds, opened: the model and its tokenizer."""

    path: Path
    model: BertPreTrainedModel
    tokenizer: Tokenizer

    @property
    def config(self) -> BertConfig:
        return self.model.config


Folder = str | os.PathLike | FolderConfig
"""What every step of the door takes: a folder, a shipped model's name, or a folder read by `read_folder`."""


def read_folder(folder: Folder) -> FolderConfig:
    """The door's first step: resolve a shipped model's name, check the folder, parse config.json once (a
    FolderConfig as it is comes back unchanged, without reading anything)."""
    if isinstance(folder, FolderConfig):
        return folder
    from bertkit.model.checkpoint import read_config

    path = resolve_model_dir(folder)
    config, raw = read_config(path)
    return FolderConfig(path, config, raw)


def head_class(folder: FolderConfig, model_class: str | None = None) -> type[BertPreTrainedModel]:
    """The class to build: `model_class` if given, else config.json's `architectures`, else the head of the task it
    names (TASK_HEADS), else BertModel."""
    from bertkit.model.bert import BertModel
    from bertkit.model.heads import MODEL_CLASSES

    if model_class is not None:
        if model_class not in MODEL_CLASSES:
            raise CheckpointError(f"unknown model class {model_class!r}; expected one of {', '.join(MODEL_CLASSES)}")
        return MODEL_CLASSES[model_class]
    source, names = folder.config_path, folder.raw.get("architectures") or []
    for name in names:
        name = families.class_name(folder.raw.get("model_type", ""), name) or name  # RobertaForMaskedLM, ...
        if name in MODEL_CLASSES:
            return MODEL_CLASSES[name]
    if names:
        raise CheckpointError(f"{source}: architectures {names} names no BERT class bertkit has "
                              f"({', '.join(MODEL_CLASSES)})")
    task = folder.config.task
    if not task:
        return BertModel
    if task not in TASK_HEADS:
        known = ", ".join(sorted(TASK_HEADS)) or "none; `import bertkit.tasks` registers bertkit's"
        raise CheckpointError(f"{source}: names task {task!r} but no `architectures`, and no registered task has that "
                              f"name (registered: {known}); add \"architectures\": [\"<class>\"] with one of "
                              f"{', '.join(MODEL_CLASSES)}")
    return head_class(folder, TASK_HEADS[task](dict(folder.config.task_settings or {})))


def load_model(folder: Folder, model_class: str | None = None, **overrides: Any) -> BertPreTrainedModel:
    """The door's second step: the folder's model (class as `head_class` picks it), built with the config read once
    and checked against the folder's vocabulary. overrides go to from_pretrained (strict=, dtype=, config field
    overrides such as num_labels=)."""
    from bertkit.model.checkpoint import check_vocab

    folder = read_folder(folder)
    cls = head_class(folder, model_class)
    check_vocab(folder.path, folder.config)
    return cls.from_pretrained(folder.path, config=folder.config, config_source=str(folder.config_path),
                               model_type=folder.raw.get("model_type", "bert"), **overrides)


def open_folder(folder: Folder, model_class: str | None = None, **overrides: Any) -> ModelFolder:
    """The door: a model folder (or a shipped model's name, or a `read_folder` result) opened into its model
    (`load_model`) and its tokenizer, config.json parsed once. Every problem is a CheckpointError or TokenizerError
    naming the folder and the file."""
    folder = read_folder(folder)
    model = load_model(folder, model_class, **overrides)
    return ModelFolder(folder.path, model, load_tokenizer(folder.path, model_type=folder.raw.get("model_type")))
