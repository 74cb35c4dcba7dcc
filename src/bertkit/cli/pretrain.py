"""`bertkit pretrain --config CONFIG.yaml`: the pre-training job; every config field is also a command-line option.

Options are generated from the PretrainConfig and TrainingConfig dataclasses: `--training.lr 1e-4` or the flat
`--lr 1e-4`, `--eval_data DIR` (or `--eval-data`), `--model_overrides '{hidden_dropout_prob: 0}'`. Values are
read as YAML scalars (numbers, true/false, null, [lists], {mappings}) and checked against the field's type.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from bertkit.training.config import TrainingConfig, field_docs
from bertkit.training.pretrain import PretrainConfig

_PREFIX = "override:"


def _option_names(path: str, flat: bool) -> list[str]:
    """'training.lr' -> ['--training.lr', '--lr'] (flat when unambiguous), plus dashed spellings."""
    names = [path] + ([path.split(".")[-1]] if flat else [])
    out: list[str] = []
    for n in names:
        for spelling in (n, n.replace("_", "-")):
            if f"--{spelling}" not in out:
                out.append(f"--{spelling}")
    return out


def config_fields() -> list[tuple[str, dataclasses.Field]]:
    """(dotted path, field) of every option: PretrainConfig's fields and `training.*`."""
    top = [(f.name, f) for f in dataclasses.fields(PretrainConfig) if f.name != "training"]
    nested = [(f"training.{f.name}", f) for f in dataclasses.fields(TrainingConfig)]
    return top + nested


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `pretrain` verb."""
    p = subparsers.add_parser(
        "pretrain",
        help="pre-train BERT (masked LM + next sentence) on prepared shards",
        description="Pre-train BertForPreTraining from a preset or a model folder on folders written by "
        "`bertkit prepare-pretraining`, in one or two phases (seq 128 then 512) under one LR schedule. Any config "
        "field can be overridden: --training.lr 1e-4 (or --lr 1e-4), --phases '[{data: d128, max_steps: 900}]'.",
    )
    p.add_argument("--config", metavar="CONFIG.yaml", help="YAML or JSON PretrainConfig (see configs/)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in output_dir")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    top_names = {f.name for f in dataclasses.fields(PretrainConfig)}
    docs = {"": field_docs(PretrainConfig), "training.": field_docs(TrainingConfig)}
    group = p.add_argument_group("config overrides (YAML values)")
    for path, f in config_fields():
        flat = path.startswith("training.") and f.name not in top_names
        doc = docs["training." if path.startswith("training.") else ""].get(f.name, "")
        group.add_argument(*_option_names(path, flat), dest=_PREFIX + path, default=argparse.SUPPRESS,
                           metavar="VALUE", help=doc.replace("%", "%%") or None)
    p.set_defaults(func=pretrain_command)


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def resolve_config(args: argparse.Namespace) -> PretrainConfig:
    """The config file (or the defaults) with the command-line overrides applied."""
    from bertkit.training.config import read_config_file

    d: dict[str, Any] = read_config_file(args.config) if args.config else {}
    for key, value in vars(args).items():
        if not key.startswith(_PREFIX):
            continue
        path = key[len(_PREFIX):].split(".")
        target = d
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = _parse_value(value)
    return PretrainConfig.from_dict(d, args.config or "PretrainConfig")


def pretrain_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit pretrain`."""
    config = resolve_config(args)
    if args.print_config:
        from bertkit.training.config import dump_config

        print(dump_config(config), end="")
        return 0
    from bertkit.training.pretrain import run_pretraining

    result = run_pretraining(config, resume=args.resume)
    if result.interrupted:
        return 128 + int(result.signal or 0)
    if result.final_dir is not None:  # rank 0
        print(f"trained {result.global_step} steps; model + tokenizer in {result.final_dir}")
        if result.final_metrics:
            print("eval: " + json.dumps({k: round(v, 4) for k, v in result.final_metrics.items()
                                         if isinstance(v, float)}))
    return 0
