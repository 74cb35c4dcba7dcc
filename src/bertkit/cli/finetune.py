"""Verbs `finetune`, `evaluate`, `predict`. `finetune`'s options are generated from FinetuneConfig, TrainingConfig
and every task's options dataclass; `evaluate` and `predict` mirror bertkit.jobs.finetune's functions."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from bertkit.cli.config_options import (
    add_config_options,
    add_run_options,
    config_dict,
    dataclass_fields,
    option_names,
    printed_config,
    string_list,
)
from bertkit.dataclass_io import field_docs
from bertkit.errors import ConfigError
from bertkit.jobs.finetune import FinetuneConfig
from bertkit.tasks import TASKS, get_task
from bertkit.training.config import TrainingConfig


TASK_PREFIX = "task-option:"  # argparse dest prefix of the generated task-option flags


def _task_option_fields() -> dict[str, tuple[dataclasses.Field, str, list[str]]]:
    """Every task option: name -> (field, help, the tasks that have it). The common ones (TaskOptions) first."""
    out: dict[str, tuple[dataclasses.Field, str, list[str]]] = {}
    for name, task_cls in TASKS.items():
        docs = field_docs(task_cls.options_class)
        for cls in reversed(task_cls.options_class.__mro__):  # base fields first, with the base's docs
            if dataclasses.is_dataclass(cls):
                docs = {**field_docs(cls), **docs}
        for f in dataclasses.fields(task_cls.options_class):
            if f.name not in out:
                out[f.name] = (f, docs.get(f.name, ""), [])
            out[f.name][2].append(name)
    return out


def _add_finetune(sub: Any) -> None:
    p = sub.add_parser("finetune", help="fine-tune a pre-trained model on a task (classification, ner, qa, ...)",
                       description="Fine-tune MODEL on TRAIN, evaluating on DEV every epoch (or --eval-every N "
                       "steps); the best model by the task's main metric is kept in OUTPUT/best. Every field of "
                       "FinetuneConfig, its training: TrainingConfig and the task's options is an option here; "
                       "--config reads them from a YAML/JSON file first.")
    add_run_options(p, "FinetuneConfig")
    group = p.add_argument_group("the run (YAML values; fine-tuning defaults: 3 epochs, batch 32, warm-up 0.1, "
                                 "the task's LR)")
    add_config_options(group, dataclass_fields(FinetuneConfig, {"training": TrainingConfig}, skip=("options",)),
                       aliases={"training.output_dir": ("output",)})
    for name, (f, doc, tasks) in _task_option_fields().items():
        owners = "" if len(tasks) == len(TASKS) else f" [{', '.join(tasks)}]"
        help_text = (doc + owners).replace("%", "%%") or None
        flags = option_names(name, False)
        if f.type in (bool, "bool"):
            group.add_argument(*flags, dest=TASK_PREFIX + name, action="store_true", default=argparse.SUPPRESS,
                               help=help_text)
        else:
            kind = {"int": int, "int | None": int, "float": float, "float | None": float,
                    "list[str] | None": string_list}.get(str(f.type), str)
            group.add_argument(*flags, dest=TASK_PREFIX + name, type=kind, default=argparse.SUPPRESS,
                               metavar="VALUE", help=help_text)
    p.set_defaults(func=_finetune)


def resolve_finetune_config(args: argparse.Namespace) -> FinetuneConfig:
    """The config file (or nothing) with the command-line options applied; a task option the chosen task does not
    have is a ConfigError naming the flag and the tasks that do have it."""
    d = config_dict(args)
    given = {k[len(TASK_PREFIX):]: v for k, v in vars(args).items() if k.startswith(TASK_PREFIX)}
    if given:
        fields = _task_option_fields()
        task = d.get("task")
        name = get_task(task).name if task else None
        for option in given:
            if name is not None and name not in fields[option][2]:
                raise ConfigError(f"--{option.replace('_', '-')} is an option of {', '.join(fields[option][2])}, "
                                  f"not of --task {name}")
        d["options"] = {**(d.get("options") or {}), **given}
    return FinetuneConfig.from_dict(d, args.config or "bertkit finetune")


def _finetune(args: argparse.Namespace) -> int:
    from bertkit.jobs import finetune
    from bertkit.jobs.finetune import format_metrics

    config = resolve_finetune_config(args)
    if printed_config(args, config):
        return 0
    summary = finetune.run(config, resume=args.resume)
    print(f"best ({summary['main_metric']}): {format_metrics(summary['best_metrics'] or {})}")
    print(f"model: {summary['best_dir']}  ({summary['train_examples']} training examples, "
          f"{summary['seconds']:.0f} s)")
    return 0


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="score a fine-tuned model on a labelled file",
                       description="Evaluate a fine-tuned model folder on INPUT with its task's metrics.")
    p.add_argument("--model", required=True, help="fine-tuned model folder (e.g. OUTPUT/best)")
    p.add_argument("--input", required=True, help="labelled file in the task's format")
    p.add_argument("--output", default=None, help="write the metrics here as JSON (always printed)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-examples", type=int, default=None)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from bertkit.jobs.finetune import dumps, evaluate

    metrics = evaluate(args.model, args.input, args.output, args.batch_size, args.max_examples)
    print(dumps(metrics))
    return 0


def _add_predict(sub: Any) -> None:
    p = sub.add_parser("predict", help="write a fine-tuned model's predictions for a file",
                       description="Predict with a fine-tuned model: classification -> the input TSV plus a "
                       "prediction column; ner -> token<TAB>tag lines; qa -> {id: answer} JSON; multiple-choice "
                       "-> JSON lines.")
    p.add_argument("--model", required=True, help="fine-tuned model folder")
    p.add_argument("--input", required=True, help="file in the task's format (labels not needed)")
    p.add_argument("--output", required=True, help="predictions file (written atomically)")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=_predict)


def _predict(args: argparse.Namespace) -> int:
    from bertkit.jobs.finetune import predict

    n = predict(args.model, args.input, args.output, args.batch_size)
    print(f"{n} predictions -> {args.output}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add the fine-tuning verbs to the `bertkit` parser."""
    _add_finetune(subparsers)
    _add_evaluate(subparsers)
    _add_predict(subparsers)
