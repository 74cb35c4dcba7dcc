"""`bertkit embed`: one sentence embedding per input line, written as a .npy matrix."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.errors import data_error


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embed` verb."""
    p = subparsers.add_parser(
        "embed",
        help="embed one text per line into a .npy matrix",
        description="Embed every line of INPUT (UTF-8, one text per line) with a model folder and write a "
        "(lines, hidden) float32 matrix, rows in input order. An empty line is an error naming file:line "
        "(an empty text has no meaning to embed, and silently skipping it would shift every later row). "
        "Defaults for pooling, normalisation and length come from the folder's sentence-transformers files "
        "when it has them, else mean pooling, no normalisation, the model's position limit.",
    )
    p.add_argument("input", metavar="INPUT", help="text file, one text per line ('-' reads standard input)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.npy", help="output .npy file (written atomically)")
    p.add_argument("--model", required=True, metavar="DIR", help="model folder with vocab.txt")
    p.add_argument("--pooling", choices=("mean", "cls"), default=None,
                   help="mean over real tokens, or the [CLS] vector (default: the folder's, else mean)")
    p.add_argument("--normalize", action="store_true", default=None, help="L2-normalise every embedding")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default %(default)s)")
    p.add_argument("--max-length", type=int, default=None, help="truncate texts to this many tokens")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "int8"), default="auto",
                   help="auto (default): bf16 where this machine has bf16 matrix units (AVX512-BF16/AMX, a GPU), "
                   "else fp32; int8 only when asked")
    p.set_defaults(func=embed_command)


def read_lines(path: str) -> list[str]:
    """The texts of an input file, one per line; an empty line raises DataError naming file:line."""
    if path == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        try:
            text, name = Path(path).read_text(encoding="utf-8"), path
        except FileNotFoundError:
            raise data_error(path, None, "no such file") from None
        except UnicodeDecodeError as e:
            raise data_error(path, None, f"not UTF-8 text ({e})") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise data_error(name, number, "empty line; every line must hold one text to embed")
    if not lines:
        raise data_error(name, None, "no text to embed")
    return lines


def embed_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit embed`."""
    import numpy as np

    from bertkit.api import load
    from bertkit.io import atomic_open

    from bertkit.inference.encoder import choose_precision
    from bertkit.model.heads import base_model

    texts = read_lines(args.input)
    bundle = load(args.model)
    precision, reason = choose_precision(args.precision, next(base_model(bundle.model).parameters()).device)
    print(f"precision: {precision} ({reason})", file=sys.stderr)
    vectors = bundle.encode(texts, pooling=args.pooling, normalize=args.normalize, batch_size=args.batch_size,
                            max_length=args.max_length, precision=precision)
    with atomic_open(args.output, "wb") as f:
        np.save(f, vectors)
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} embeddings to {args.output}", file=sys.stderr)
    return 0
