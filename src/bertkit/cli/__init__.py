"""The `bertkit` command: one verb per job, each defined in its own module of this package.

Every module listed in VERB_MODULES has a `register(subparsers)` function that adds its verbs;
a verb's handler takes the parsed `argparse.Namespace` and returns an exit code (or None for 0).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from bertkit.errors import BertkitError, Interrupted

# In the order `bertkit --help` lists them: following the data's path.
VERB_MODULES = [
    "bertkit.cli.tokenize",  # tokenize, train-tokenizer
    "bertkit.cli.model",  # info, convert
    "bertkit.cli.data",  # prepare-pretraining
    "bertkit.cli.pretrain",  # pretrain
    "bertkit.cli.finetune",  # finetune, evaluate, predict
    "bertkit.cli.distill",  # distill
    "bertkit.cli.inference",  # embed
    "bertkit.cli.search",  # index, search
    "bertkit.cli.explore",  # fill-mask, extract-features, attention
    "bertkit.cli.export",  # export-onnx
    "bertkit.cli.serve",  # serve
    "bertkit.cli.demo",  # demo
]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every verb registered."""
    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="BERT end to end: tokenize, pre-train, fine-tune, evaluate and serve.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in VERB_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertkit` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = args.func(args)
    except Interrupted as e:
        print(f"bertkit {args.command}: {e}", file=sys.stderr)
        return 128 + e.signal
    except BertkitError as e:
        if args.debug:
            traceback.print_exc()
        print(f"bertkit {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertkit info DIR | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
