"""`bertkit embed`: one sentence embedding per input line, written as a .npy matrix."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.errors import data_error
from bertkit.inference.pooling import DEFAULT_POOLING, POOLINGS
from bertkit.inference.precision import DEFAULT_PRECISION, PRECISIONS


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embed` verb."""
    p = subparsers.add_parser(
        "embed",
        help="embed one text per line into a .npy matrix",
        description="Embed every line of INPUT (UTF-8, one text per line) with a model folder and write a "
        "(lines, hidden) float32 matrix, row i for line i. An empty line is embedded as the empty text, as "
        "bertkit.load(DIR).encode(['']) does, so the rows stay aligned with the lines; a warning names such lines. "
        "Defaults for pooling, normalisation and length come from the folder's sentence-transformers files "
        f"when it has them, else {DEFAULT_POOLING} pooling, no normalisation, the model's position limit.",
    )
    p.add_argument("input", metavar="INPUT", help="text file, one text per line ('-' reads standard input)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.npy", help="output .npy file (written atomically)")
    p.add_argument("--model", required=True, metavar="DIR", help="model folder with vocab.txt")
    p.add_argument("--pooling", choices=tuple(POOLINGS), default=None,
                   help="; ".join(f"{name}: {mode.help}" for name, mode in POOLINGS.items())
                   + f" (default: the folder's, else {DEFAULT_POOLING})")
    p.add_argument("--normalize", action="store_true", default=None, help="L2-normalise every embedding")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default %(default)s)")
    p.add_argument("--max-length", type=int, default=None, help="truncate texts to this many tokens")
    p.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                   help="auto: bf16 where this machine has bf16 matrix units (AVX512-BF16/AMX, a GPU), else fp32; "
                   "int8 only when asked (default %(default)s)")
    p.set_defaults(func=embed_command)


def read_lines(path: str) -> list[str]:
    """The texts of an input file, one per line, in order. An empty (or blank) line is kept as the empty text, with
    a warning naming its line: dropping it would shift every later row, and refusing it would make the CLI
    disagree with the API, which embeds "" like any text."""
    if path == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        try:
            text, name = Path(path).read_text(encoding="utf-8"), path
        except FileNotFoundError:
            raise data_error(path, None, "no such file") from None
        except IsADirectoryError:
            raise data_error(path, None, "is a folder; expected a text file") from None
        except UnicodeDecodeError as e:
            raise data_error(path, None, f"not UTF-8 text ({e})") from None
    lines = text.splitlines()
    if not lines:
        raise data_error(name, None, "no text to embed")
    blank = [number for number, line in enumerate(lines, start=1) if not line.strip()]
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (f" and {len(blank) - 10} more" if len(blank) > 10 else "")
        print(f"warning: {name}: {len(blank)} empty line(s) ({shown}), each kept as the empty text (one output "
              "per line)", file=sys.stderr)
    return lines


def embed_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit embed`."""
    import numpy as np

    from bertkit.api import load
    from bertkit.errors import CheckpointError
    from bertkit.io import atomic_open, check_output_file

    texts = read_lines(args.input)
    check_output_file(args.output)  # a read-only folder is reported now, not after the whole computation
    bundle = load(args.model)
    encoder = bundle.encoder(args.precision, args.max_length)  # the one `encode` below runs
    print(f"precision: {encoder.precision} ({encoder.precision_reason})", file=sys.stderr)
    vectors = bundle.encode(texts, pooling=args.pooling, normalize=args.normalize, batch_size=args.batch_size,
                            max_length=args.max_length, precision=args.precision)
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size:  # a broken model (weights or config) must not leave a matrix of NaN behind with exit code 0
        raise CheckpointError(f"{args.model}: the model computed non-finite values (NaN or infinity) for "
                              f"{bad.size} of {len(texts)} lines (first: {args.input}:{bad[0] + 1}); its weights or "
                              "config.json are broken; nothing was written")
    with atomic_open(args.output, "wb") as f:
        np.save(f, vectors)
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} embeddings to {args.output}", file=sys.stderr)
    return 0
