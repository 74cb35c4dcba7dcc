"""`bertkit pretrain --config CONFIG.yaml`: the pre-training job; every field of PretrainConfig, its TrainingConfig and
ExecutionConfig is also a command-line option (bertkit.cli.config_options: `--training.lr 1e-4` or `--lr 1e-4`)."""

from __future__ import annotations

import argparse
import json

from bertkit.cli.config_options import add_run_options, config_dict, config_fields, printed_config
from bertkit.jobs.pretrain import ExecutionConfig, PretrainConfig
from bertkit.training.config import TrainingConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `pretrain` verb."""
    p = subparsers.add_parser(
        "pretrain",
        description="Pre-train BertForPreTraining from a preset or a model folder on folders written by "
        "`bertkit prepare-pretraining`, in one or two phases (seq 128 then 512) under one LR schedule. Any config "
        "field can be overridden: --training.lr 1e-4 (or --lr 1e-4), --phases '[{data: d128, max_steps: 900}]'.",
    )
    add_run_options(p, "PretrainConfig (see configs/)",
                    config_fields(PretrainConfig, {"training": TrainingConfig, "execution": ExecutionConfig},
                                  defaults=PretrainConfig()),
                    groups={"": "the run", "training": "training (the paper's pre-training defaults)",
                            "execution": "execution (how a step computes: the same loss, another speed)"})
    p.set_defaults(func=pretrain_command)


def resolve_config(args: argparse.Namespace) -> PretrainConfig:
    """The config file (or the defaults) with the command-line overrides applied."""
    return PretrainConfig.from_dict(config_dict(args), args.config or "PretrainConfig")


def pretrain_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit pretrain`."""
    config = resolve_config(args)
    if printed_config(args, config):
        return 0
    from bertkit.jobs import pretrain

    result = pretrain.run(config, resume=args.resume)
    if result.interrupted:
        return 128 + int(result.signal or 0)
    if result.final_dir is not None:  # rank 0
        print(f"trained {result.global_step} steps; model + tokenizer in {result.final_dir}")
        if result.final_metrics:
            print("eval: " + json.dumps({k: round(v, 4) for k, v in result.final_metrics.items()
                                         if isinstance(v, float)}))
    return 0
