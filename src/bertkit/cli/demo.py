"""`bertkit demo`: the README's main command (see bertkit.jobs.demo); every DemoConfig field is an option, generated
(bertkit.cli.config_options)."""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.cli.config_options import add_config_options, config_fields, config_from_options, shown
from bertkit.jobs.demo import DemoConfig, run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        description="Train a vocabulary, pre-train a small BERT, probe it, fine-tune it on sentiment "
                    "next to a random-init baseline, and write a report.")
    p.add_argument("--quick", action="store_true", help="a tiny model and short runs: about a minute")
    add_config_options(p, [dataclasses.replace(f, help=f"{f.help} ({_defaults(f.path)})".strip())
                           for f in config_fields(DemoConfig)])
    p.set_defaults(func=_demo)


def _defaults(name: str) -> str:
    """A field's default, and its --quick value where that differs."""
    default, quick = getattr(DemoConfig(), name), getattr(DemoConfig.quick(), name)
    return f"default {shown(default)}" + ("" if quick == default else f"; {shown(quick)} with --quick")


def _demo(args: argparse.Namespace) -> int:
    base = dataclasses.asdict(DemoConfig.quick()) if args.quick else None
    run(config_from_options(DemoConfig, args, base))
    return 0
