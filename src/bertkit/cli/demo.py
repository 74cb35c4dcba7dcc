"""`bertkit demo`: the README's main command (see bertkit.jobs.demo); every DemoConfig field is an option."""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.jobs.demo import DemoConfig, run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="walk through BERT end to end on the bundled data (offline, ~10 min on 2 cores)",
                       description="Train a vocabulary, pre-train a small BERT, probe it, fine-tune it on sentiment "
                                   "next to a random-init baseline, and write a report.")
    p.add_argument("--quick", action="store_true", help="a tiny model and short runs: about a minute")
    for f in dataclasses.fields(DemoConfig):
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=None,
                       help=f"default {f.default!r} ({DemoConfig.quick().__dict__[f.name]!r} with --quick)")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(DemoConfig)
                 if getattr(args, f.name) is not None}
    cfg = DemoConfig.quick(**overrides) if args.quick else DemoConfig(**overrides)
    run(cfg)
    return 0
