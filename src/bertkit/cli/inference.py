"""`bertkit embed`: one sentence embedding per input row, streamed into resumable shards or one .npy matrix; its
options are generated from EmbedConfig (bertkit.jobs.embed_config: the config of the job it runs, bertkit.jobs.embed,
read without torch)."""

from __future__ import annotations

import argparse
import sys

from bertkit.cli.config_options import PREFIX, add_config_options, config_fields, config_from_options
from bertkit.inference.pooling import DEFAULT_POOLING, POOLINGS
from bertkit.inference.options import DEFAULT_PRECISION, PRECISIONS
from bertkit.jobs.embed_config import EmbedConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embed` verb."""
    p = subparsers.add_parser(
        "embed",
        description="Embed every row of INPUT (a UTF-8 text file, one text per line, '-' for standard input; or "
        "JSONL/CSV/TSV/Parquet with --text-field and an optional --id-field) with a model folder, reading it "
        "lazily. -o DIR writes fixed-size shards (shard-NNNNN.npy with their ids and texts in shard-NNNNN.jsonl) "
        "and DIR/manifest.json at the end; after a kill, --resume skips the finished shards. -o OUT.npy writes one "
        "(rows, hidden) matrix, row i for row i. An empty line is embedded as the empty text, as "
        "bertkit.load(DIR).encode(['']) does, so the rows stay aligned with the lines; a warning names such lines. "
        "Defaults for pooling, normalisation and length come from the folder's sentence-transformers files "
        f"when it has them, else {DEFAULT_POOLING} pooling, no normalisation, the model's position limit. Under "
        "`torchrun --nproc-per-node N -m bertkit embed ... -o DIR` each process embeds its own range of rows.",
    )
    p.add_argument("input", metavar="INPUT", help="the texts: a file, or '-' for standard input")
    p.add_argument("-o", "--output", dest=PREFIX + "output", required=True, metavar="DIR|OUT.npy",
                   help="a folder (resumable shards + manifest.json) or a .npy file (one matrix; written atomically)")
    p.add_argument("--model", dest=PREFIX + "model", required=True, metavar="DIR",
                   help="model folder (or a shipped model's name)")
    p.add_argument("--normalize", dest=PREFIX + "normalize", action=argparse.BooleanOptionalAction,
                   default=argparse.SUPPRESS, help="L2-normalise every embedding (default: the folder's "
                   "sentence-transformers setting, else no)")
    p.add_argument("--pooling", choices=tuple(POOLINGS), default=None,
                   help="; ".join(f"{name}: {mode.help}" for name, mode in POOLINGS.items())
                   + f" (default: the folder's, else {DEFAULT_POOLING})")
    p.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                   help="auto: bf16 where this machine has bf16 matrix units (AVX512-BF16/AMX, a GPU), else fp32; "
                   "int8 only when asked (default %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue the run that wrote DIR, skipping its finished "
                   "shards")
    p.add_argument("--no-progress", dest=PREFIX + "progress", action="store_false", default=argparse.SUPPRESS,
                   help="no progress report")
    generated = config_fields(EmbedConfig, skip=("input", "output", "model", "normalize", "pooling", "precision",
                                                 "progress"),
                              defaults=EmbedConfig(input="INPUT", output="OUT", model="DIR"))
    add_config_options(p, generated)
    p.set_defaults(func=embed_command)


def embed_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit embed`."""
    from bertkit.jobs import embed

    for name in ("input", "pooling", "precision"):  # plain options (the registries give their choices)
        setattr(args, PREFIX + name, getattr(args, name))
    config = config_from_options(EmbedConfig, args)
    result = embed.run(config, resume=args.resume)
    if result.blank_count:
        from bertkit.data.texts import blank_lines_warning

        name = "<stdin>" if config.input == "-" else config.input
        print(blank_lines_warning(name, result.blank_count, list(result.blank_lines)), file=sys.stderr)
    skipped = f" ({result.shards_skipped} finished shards kept)" if result.shards_skipped else ""
    print(f"rank {result.rank}: embedded {result.rows} rows{skipped}" if result.rank else
          f"wrote {result.rows} x {result.dim} embeddings to {result.output}{skipped}", file=sys.stderr)
    return 0
