"""Verb `distill`: DistilBERT-style distillation of a teacher folder into a student with fewer of its layers.
Options are generated from DistillConfig, TrainingConfig and every task's options (bertkit.cli.config_options), as
finetune's are."""

from __future__ import annotations

import argparse
from typing import Any

from bertkit.cli.config_options import add_run_options, config_dict, config_fields, printed_config
from bertkit.jobs.distill import DistillConfig
from bertkit.training.config import TrainingConfig


def resolve_distill_config(args: argparse.Namespace) -> DistillConfig:
    """The config file (or nothing) with the command-line options applied."""
    return DistillConfig.from_dict(config_dict(args), args.config or "DistillConfig")


def _distill(args: argparse.Namespace) -> int:
    from bertkit.jobs import distill
    from bertkit.jobs.finetune import format_metrics

    config = resolve_distill_config(args)
    if printed_config(args, config):
        return 0
    summary = distill.run(config, resume=args.resume)
    d = summary["distillation"]
    print(f"student: teacher layers {d['teacher_layers']} of {d['teacher_depth']} ({d['mode']} distillation)")
    print(f"best: {format_metrics(summary.get('best_metrics') or summary.get('final_metrics') or {})}")
    print(f"model: {summary.get('best_dir') or summary.get('final_dir')}")
    return 0


def register(subparsers: Any) -> None:
    """Add the `distill` verb."""
    p = subparsers.add_parser(
        "distill",
        description="Train a student made of every other layer of TEACHER (plus its embeddings and head) on the "
        "hard loss, the teacher's soft targets at a temperature and a cosine alignment of hidden states. A "
        "fine-tuned TEACHER distils on a labelled TRAIN file of its task (OUTPUT/best is a fine-tuned folder); a "
        "pre-trained one on data from `bertkit prepare-pretraining` (masked LM; set --max-steps).")
    add_run_options(p, "DistillConfig", config_fields(DistillConfig, {"training": TrainingConfig}),
                    groups={"": "the run", "training": "training (fine-tuning's defaults for a fine-tuned teacher, "
                            "pre-training's otherwise)"},
                    tasks="task options (task-specific distillation: changed from the teacher's, as in --options; "
                    "[names] marks an option only those tasks have)")
    p.set_defaults(func=_distill)
