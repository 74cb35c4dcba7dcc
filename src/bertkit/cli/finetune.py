"""Verbs `finetune`, `evaluate`, `predict`, their options generated (bertkit.cli.config_options): `finetune`'s from
FinetuneConfig, TrainingConfig and every task's options dataclass (a group of their own), `evaluate`'s from
EvaluateConfig, `predict`'s from PredictConfig."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bertkit.cli.config_options import (
    add_config_options,
    add_run_options,
    check_task_options,
    config_dict,
    config_fields,
    config_from_options,
    printed_config,
)
from bertkit.jobs.finetune import FinetuneConfig
from bertkit.training.config import TrainingConfig


def register(subparsers: Any) -> None:
    """Add the fine-tuning verbs to the `bertkit` parser."""
    from bertkit.jobs.evaluate import EvaluateConfig
    from bertkit.jobs.predict import PredictConfig

    p = subparsers.add_parser(
        "finetune",
        description="Fine-tune MODEL on TRAIN, evaluating on DEV every epoch (or --eval-every N "
                    "steps); the best model by the task's main metric is kept in OUTPUT/best (without DEV: no "
                    "evaluation, and the last step's model, OUTPUT/final, is the result). Every field of "
                    "FinetuneConfig, its training: TrainingConfig and the task's options is an option here; "
                    "--config reads them from a YAML/JSON file first.")
    add_run_options(p, "FinetuneConfig", config_fields(FinetuneConfig, {"training": TrainingConfig}, skip=("options",)),
                    groups={"": "the run", "training": "training (fine-tuning defaults: 3 epochs, batch 32, warm-up "
                            "0.1, the task's LR, no trackers)"},
                    tasks="task options (the --task's; [names] marks an option only those tasks have)")
    p.set_defaults(func=_finetune)

    p = subparsers.add_parser("evaluate",
                              description="Evaluate a fine-tuned model folder on INPUT with its task's metrics.")
    add_config_options(p, config_fields(EvaluateConfig), required=("model", "input"))
    p.set_defaults(func=_evaluate)

    p = subparsers.add_parser("predict", description="Predict with a fine-tuned model: classification -> the input TSV "
                              "plus a prediction column; ner -> token<TAB>tag lines; qa -> {id: answer} JSON; "
                              "multiple-choice -> JSON lines; embedding -> JSON lines of each query's ranking (or each "
                              "scored pair's cosine); with --probabilities, each answer with its scores as the server "
                              "gives it.")
    add_config_options(p, config_fields(PredictConfig), required=("model", "input", "output"), switches=True)
    p.set_defaults(func=_predict)


def resolve_finetune_config(args: argparse.Namespace) -> FinetuneConfig:
    """The config file (or nothing) with the command-line options applied; a task option the chosen task does not
    have is a ConfigError naming the flag and the tasks that do have it."""
    d = config_dict(args)
    check_task_options(args, d.get("task"))
    return FinetuneConfig.from_dict(d, args.config or "FinetuneConfig")


def _finetune(args: argparse.Namespace) -> int:
    from bertkit.jobs import finetune
    from bertkit.jobs.finetune import format_metrics

    config = resolve_finetune_config(args)
    if printed_config(args, config):
        return 0
    summary = finetune.run(config, resume=args.resume)
    if summary["best_metrics"] is not None:
        print(f"best ({summary['main_metric']}): {format_metrics(summary['best_metrics'])}")
    print(f"model: {summary['best_dir'] or summary['final_dir']}  ({summary['train_examples']} training examples, "
          f"{summary['seconds']:.0f} s)")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from bertkit.jobs import evaluate
    from bertkit.jobs.finetune import dumps

    print(dumps(evaluate.run(config_from_options(evaluate.EvaluateConfig, args))))
    return 0


def _predict(args: argparse.Namespace) -> int:
    from bertkit.jobs import predict

    config = config_from_options(predict.PredictConfig, args)
    n = predict.run(config)
    print(f"{n} predictions -> {config.output}", file=sys.stderr)
    return 0
