"""Verb `distill`: DistilBERT-style distillation of a teacher folder into a student with fewer of its layers.
Options are generated from DistillConfig and TrainingConfig (bertkit.cli.config_options), as finetune's are."""

from __future__ import annotations

import argparse
from typing import Any

from bertkit.cli.config_options import (
    add_config_options,
    apply_overrides,
    dataclass_fields,
)
from bertkit.dataclass_io import dump_config, read_config_file
from bertkit.tasks.distill import DistillConfig
from bertkit.training.config import TrainingConfig


def resolve_distill_config(args: argparse.Namespace) -> DistillConfig:
    """The config file (or nothing) with the command-line options applied."""
    d: dict[str, Any] = read_config_file(args.config) if args.config else {}
    apply_overrides(d, args)
    if not getattr(args, "progress", True):
        d.setdefault("training", {})["progress_bar"] = False
    return DistillConfig.from_dict(d, args.config or "bertkit distill")


def _distill(args: argparse.Namespace) -> int:
    from bertkit.tasks.distill import distill
    from bertkit.tasks.runner import format_metrics

    config = resolve_distill_config(args)
    if args.print_config:
        print(dump_config(config), end="")
        return 0
    summary = distill(config, resume=args.resume)
    d = summary["distillation"]
    print(f"student: teacher layers {d['teacher_layers']} of {d['teacher_depth']} ({d['mode']} distillation)")
    print(f"best: {format_metrics(summary.get('best_metrics') or summary.get('final_metrics') or {})}")
    print(f"model: {summary.get('best_dir') or summary.get('final_dir')}")
    return 0


def register(subparsers: Any) -> None:
    """Add the `distill` verb."""
    p = subparsers.add_parser(
        "distill", help="distil a teacher into a student with fewer of its layers (DistilBERT)",
        description="Train a student made of every other layer of TEACHER (plus its embeddings and head) on the "
        "hard loss, the teacher's soft targets at a temperature and a cosine alignment of hidden states. A "
        "fine-tuned TEACHER distils on a labelled TRAIN file of its task (OUTPUT/best is a fine-tuned folder); a "
        "pre-trained one on data from `bertkit prepare-pretraining` (masked LM; set --max-steps).")
    p.add_argument("--config", metavar="CONFIG.yaml", help="YAML or JSON DistillConfig")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT's latest checkpoint")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    group = p.add_argument_group("the run (YAML values)")
    add_config_options(group, dataclass_fields(DistillConfig, {"training": TrainingConfig}),
                       aliases={"training.output_dir": ("output",)})
    p.set_defaults(func=_distill)
