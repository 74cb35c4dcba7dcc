"""Fine-tuning: the job behind `bertkit finetune` (`run(FinetuneConfig)`, also named `finetune`), and the opening of
a fine-tuned folder that the evaluate, predict and payoff jobs share.

Training is the one Trainer's; this module only wires a task's data, head and metric into it. The fine-tuned
folder (`OUTPUT/best`, or `OUTPUT/final` when there is no dev file) loads with `from_pretrained` and carries the
tokenizer, the label names, the task and its settings.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from bertkit.dataclass_io import Config, config_from_dict, spec
from bertkit.errors import CheckpointError, ConfigError, Interrupted
from bertkit.io import atomic_write_json
from bertkit.pretrained import resolve_model_dir
from bertkit.model.folder import Folder, FolderConfig, load_model, open_folder, read_folder
from bertkit.tasks import get_task
from bertkit.tasks.base import (DEFAULT_METRIC, Task, TaskSettings, collator, evaluate, predict, require_examples,
                                task_options)
from bertkit.tokenizer import load_tokenizer
from bertkit.training.config import TrainingConfig

if TYPE_CHECKING:  # imported where a run starts: the config reads without torch
    import torch

logger = logging.getLogger(__name__)

RESULTS_NAME = "results.json"


def subset(examples: list, limit: int | None, seed: int) -> list:
    """At most `limit` examples: a seeded random sample kept in file order (all when limit is None)."""
    if limit is None or limit >= len(examples):
        return examples
    keep = np.random.default_rng(seed).choice(len(examples), size=limit, replace=False)
    return [examples[i] for i in sorted(keep)]


def read_examples(task: Task, path: str, settings: TaskSettings, limit: int | None, seed: int,
                  what: str = "examples") -> list:
    """The labelled examples of `path` (an error when there are none), at most `limit` of them (`subset`)."""
    examples = task.read(path, settings)
    require_examples(examples, path, what)
    return subset(examples, limit, seed)


def _check_same_task(task: Task, config: Any, folder: str | os.PathLike) -> None:
    """CheckpointError when a fine-tuned folder was trained for another task (an NER model given to classify)."""
    if config.task and get_task(config.task).name != task.name:
        raise CheckpointError(f"{folder}: a model fine-tuned for task {config.task!r} "
                              f"({task.head(task.settings()).class_name} is needed for --task {task.name}); "
                              "start from a pre-trained folder or pass the matching --task")


def _check_head(task: Task, config: Any, settings: TaskSettings, folder: str | os.PathLike) -> None:
    """CheckpointError when a fine-tuned head's labels differ from the label set of the training data."""
    sizes = task.head(settings).config
    if not config.task or "num_labels" not in sizes:
        return
    names = sizes.get("label_names")
    if names is not None and config.label_names is not None and list(config.label_names) != list(names):
        raise CheckpointError(f"{folder}: the head has {config.num_labels} labels {config.label_names}, the "
                              f"training data has {len(names)}: {names}")
    if config.num_labels != sizes["num_labels"]:
        raise CheckpointError(f"{folder}: the head has {config.num_labels} outputs, the task needs "
                              f"{sizes['num_labels']}")


def build_model(task: Task, folder: Folder, settings: TaskSettings) -> Any:
    """The task's head (`Task.head`) on the folder's weights, its config carrying the task, its settings (as
    config.json keeps them) and the head's sizes."""
    head = task.head(settings)
    return load_model(folder, head.class_name, task=task.name, task_settings=settings.to_dict(), **head.config)


MAX_EXAMPLES = 10**9  # an example limit beyond any file's size


@dataclass
class FinetuneConfig(Config):
    """One fine-tuning run: the task and its typed options, the start, the data and the training settings;
    `bertkit finetune`'s options are generated from these fields, TrainingConfig's and every task's options."""

    task: str = spec("")
    """The task: classification, ner, qa or multiple-choice (or an alias such as glue, squad, swag)."""
    model: str = spec("")
    """Pre-trained (or fine-tuned) model folder, or a shipped model's name."""
    train: str = spec("")
    """Training file (QA: FILE#START:END selects articles)."""
    dev: str | None = spec(None)
    """Dev file, evaluated during training; the best model by the task's main metric is kept in OUTPUT/best. Without
    one: no evaluation, and the last step's model, OUTPUT/final, is the result (results.json's `final_dir`)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The task's own options (its `options_class`: max_length, text_column, doc_stride, ...)."""
    eval_batch_size: int = spec(64, ge=1, le=2**20)
    """Batch size of evaluation."""
    max_train_examples: int | None = spec(None, ge=1, le=MAX_EXAMPLES)
    """A seeded random subset of the training file (None: all of it)."""
    max_eval_examples: int | None = spec(None, ge=1, le=MAX_EXAMPLES)
    """A seeded random subset of the dev file (None: all of it)."""
    training: TrainingConfig | None = None
    """The one trainer's settings; None = the fine-tuning defaults (paper, appendix A.3: 3 epochs, batch 32, warm-up
    10% of the steps, the task's learning rate, evaluation every epoch). training.output_dir is the run's folder."""

    def validate(self) -> None:
        task = get_task(self.task)  # an unknown task name is an error here, before anything is read
        task_options(task, self.options)
        if self.training is None:
            self.training = finetune_training(task, {})

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "FinetuneConfig") -> "FinetuneConfig":
        """From a config file's dict: `training:` fields not given take the fine-tuning defaults (not the
        pre-training ones TrainingConfig has), the learning rate the task's."""
        d = dict(d)
        training = pop_training(d, where)
        config = config_from_dict(cls, d, where)
        config.training = finetune_training(get_task(config.task), training, where)
        return config


def pop_training(d: dict[str, Any], where: str) -> dict[str, Any]:
    """A config dict's `training:` mapping, taken out of `d` (empty when not given)."""
    training = d.pop("training", None) or {}
    if not isinstance(training, dict):
        raise ConfigError(f"{where}: training must be a mapping of TrainingConfig fields")
    return training


# The learning rate by task (paper, appendix A.3, searched 5e-5, 3e-5 and 2e-5): 3e-5, and 5e-5 for the token-level
# tasks (google-research/bert's run_squad default).
TASK_LR = {"ner": 5e-5, "qa": 5e-5}
DEFAULT_LR = 3e-5


def finetune_training(task: Task, overrides: dict[str, Any], where: str = "FinetuneConfig") -> TrainingConfig:
    """TrainingConfig for fine-tuning: the paper's fine-tuning defaults, the task's LR and main metric (every task
    metric is better larger), then `overrides`."""
    values: dict[str, Any] = dict(output_dir="", lr=TASK_LR.get(task.name, DEFAULT_LR), batch_size=32, epochs=3.0,
                                  warmup=0.1, weight_decay=0.01, max_grad_norm=1.0, eval_every=None, seed=42,
                                  precision="auto", metric_for_best=task.settings().main_metric or DEFAULT_METRIC,
                                  greater_is_better=True)
    values.update(overrides)
    return config_from_dict(TrainingConfig, values, f"{where}.training")


def finetune_fingerprint(config: FinetuneConfig, task: Task, model: str) -> dict[str, Any]:
    """The data and settings of a fine-tuning run a resume must match (bertkit.training.provenance). A resume may
    change eval_batch_size (the same metrics in other chunks) and options.feature_cache (where features are kept)."""
    from bertkit.io import file_identity, folder_identity
    from bertkit.training.provenance import flatten

    options = dataclasses.asdict(task_options(task, config.options))
    options.pop("feature_cache", None)
    return {"task": task.name, "model": folder_identity(model), "train": file_identity(config.train),
            "dev": file_identity(config.dev) if config.dev is not None else None, **flatten("options", options),
            "max_train_examples": config.max_train_examples, "max_eval_examples": config.max_eval_examples}


def run(config: FinetuneConfig, resume: bool = False,
        wrap_model: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        fingerprint: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        on_start: Callable[[], None] | None = None, model_folder: FolderConfig | None = None) -> dict[str, Any]:
    """Fine-tune config.model on config.train, evaluating on config.dev; the best model -> OUTPUT/best (without a
    dev file: no evaluation, and the last step's model, OUTPUT/final, is the result).

    Returns the run's summary (also written to OUTPUT/results.json). `resume` continues OUTPUT's latest checkpoint.
    A wrapping job (distillation) passes `wrap_model`, `fingerprint`, `on_start` and `model_folder` as
    `bertkit.jobs.pretrain.run` takes them.
    """
    import torch

    from bertkit.tasks.feature_cache import frozen_inputs
    from bertkit.training import Trainer, TrainPhase
    from bertkit.training.distributed import setup_distributed
    from bertkit.training.provenance import check_output_apart
    from bertkit.training.checkpoint import output_lock

    c, cfg = config, config.training
    assert cfg is not None  # set by __post_init__ / from_dict
    if not cfg.output_dir:
        raise ConfigError("FinetuneConfig.training.output_dir is required (--output)")
    if c.dev is None and cfg.early_stopping_patience is not None:
        raise ConfigError("FinetuneConfig.training.early_stopping_patience watches the dev score: give a dev file "
                          "(FinetuneConfig.dev, --dev)")
    started = time.perf_counter()
    model = str(resolve_model_dir(c.model))  # a shipped model's name works too
    if model_folder is not None and model_folder.path != Path(model):
        raise ValueError(f"model_folder {model_folder.path} is not config.model {model}")
    check_output_apart(cfg.output_dir, model, "the model folder")
    dist_info = setup_distributed(cfg.device)
    with output_lock(cfg.output_dir, dist_info):  # before anything is read: a second job stops at once
        train, dev, seed = c.train, c.dev, cfg.seed
        t = get_task(c.task)
        start = read_folder(model_folder or model)  # config.json, read once: checked here, built on below
        _check_same_task(t, start.config, model)
        settings = t.settings(c.options, start)  # an embedding model keeps its folder's pooling
        tokenizer = load_tokenizer(start.path, model_type=start.raw.get("model_type"))

        train_examples = read_examples(t, train, settings, c.max_train_examples, seed, "training examples")
        settings = t.fit_labels(train_examples, settings)
        _check_head(t, start.config, settings, model)
        dev_examples: list = []
        if dev is not None:  # else no evaluation: the last step's model is the result
            # with the fitted labels: one training never had is an error
            dev_examples = read_examples(t, dev, settings, c.max_eval_examples, seed, "dev examples")

        train_features = t.features(train_examples, tokenizer, settings, training=True)
        dev_features = t.features(dev_examples, tokenizer, settings, training=False) if dev_examples else []
        with torch.random.fork_rng(devices=[]):  # the new head's initial weights are a function of the seed
            torch.manual_seed(seed)
            net = build_model(t, start, settings)
        options = task_options(t, c.options)  # a frozen tagger's encoder runs once: its features are cached
        train_features = frozen_inputs(net, train_features, options, cfg.output_dir)
        dev_features = frozen_inputs(net, dev_features, options, cfg.output_dir) if dev_examples else []
        if wrap_model is not None:
            net = wrap_model(net)
        main = settings.main_metric or DEFAULT_METRIC  # the data may pick it (MRPC/QQP: F1; CoLA: Matthews)
        cfg = dataclasses.replace(cfg, metric_for_best=None if dev is None else main)
        output = cfg.output_dir
        fp = finetune_fingerprint(c, t, model)
        phase = TrainPhase(train_features, collator(t.head(settings), tokenizer),
                           batch_sampler=t.batch_sampler(train_features, settings))
        trainer = Trainer(net, cfg, phases=[phase],
                          evaluate=None if dev is None else lambda m: evaluate(
                              t, m, dev_examples, dev_features, settings, c.eval_batch_size, tokenizer),
                          save_extra=tokenizer.save_pretrained, dist_info=dist_info,
                          fingerprint=fingerprint(fp) if fingerprint is not None else fp, on_start=on_start)
        result = trainer.train(resume=resume)
        if result.interrupted:  # no result to report: a partial run's best must never pass for the run's
            name = signal.Signals(result.signal or signal.SIGTERM).name
            raise Interrupted(f"{output}: stopped by {name} at step {result.global_step} after writing a checkpoint; "
                              "run again with resume (--resume) to continue", result.signal or signal.SIGTERM)
        summary = {
            "task": t.name, "model": str(model), "train": str(train), "dev": dev,
            "train_examples": len(train_examples), "train_features": len(train_features),
            "dev_examples": len(dev_examples), "main_metric": main,
            "best_metrics": result.best_metrics, "final_metrics": result.final_metrics,
            "best_dir": str(result.best_dir) if result.best_dir else None,
            "final_dir": str(result.final_dir) if result.final_dir else None, "stop_reason": result.stop_reason,
            "seconds": round(time.perf_counter() - started, 1),
            "training": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "output_dir"},
            "resumes": result.resumes,
        }
        if dist_info.is_main:  # the other ranks have no metrics to report
            atomic_write_json(Path(output) / RESULTS_NAME, summary)
        return summary


finetune = run  # the name the benchmarks, the tests and the guide's examples call it by


def finetuned_task(model: Folder) -> tuple[Task, TaskSettings, FolderConfig]:
    """Task, settings and config.json (`read_folder`) of a fine-tuned folder; no weights are read."""
    folder = read_folder(model)
    config = folder.config
    if not config.task:
        raise CheckpointError(f"{folder.config_path}: no bertkit task; this is not a fine-tuned model folder "
                              "(fine-tune it first with `bertkit finetune`)")
    t = get_task(config.task)
    return t, t.settings_of(config), folder


def _load_finetuned(model: str) -> tuple[Task, TaskSettings, Any, Any]:
    """Task, settings, model and tokenizer of a fine-tuned folder, its config.json read once."""
    t, settings, folder = finetuned_task(model)
    config = folder.config
    opened = open_folder(folder)
    net = opened.model
    head = t.head(settings)
    if type(net).__name__ != head.class_name:
        raise CheckpointError(f"{model}: config.json says task {config.task!r} but its architecture is "
                              f"{type(net).__name__}, not {head.class_name}")
    n = head.config.get("num_labels")
    if n is not None and n != config.num_labels:
        raise CheckpointError(f"{model}: the head has {config.num_labels} outputs but {n} label names")
    return t, settings, net, opened.tokenizer


def predictions_on(model: str, input: str, batch_size: int = 64) -> tuple[Task, TaskSettings, list, list]:
    """A fine-tuned folder's task and settings, the labelled examples of `input`, and its prediction for each
    (what a paired significance test of two models compares)."""
    t, settings, net, tokenizer = _load_finetuned(model)
    examples = read_examples(t, input, settings, None, 0)
    features = t.features(examples, tokenizer, settings, training=False)
    return t, settings, examples, predict(t, net, examples, features, settings, batch_size, tokenizer)


def format_metrics(metrics: dict[str, Any], keys: Sequence[str] | None = None) -> str:
    """One line of `name value` pairs for the terminal."""
    items = [(k, metrics[k]) for k in (keys or metrics) if k in metrics]
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in items)


def dumps(obj: Any) -> str:
    """Indented JSON for the terminal."""
    return json.dumps(obj, indent=2, ensure_ascii=False, default=str)


__all__ = ["FinetuneConfig", "finetune", "run"]
