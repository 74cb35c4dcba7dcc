"""`bertkit tokenize` (text lines -> JSON ids/offsets) and `bertkit train-tokenizer` (text -> WordPiece folder)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from bertkit.cli.config_options import add_options, config_from_options
from bertkit.errors import CheckpointError, DataError, data_error
from bertkit.io import atomic_open, check_output_dir, check_output_file
from bertkit.pretrained import SHIPPED, resolve_model_dir
from bertkit.tokenizer.trainer import VocabOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `tokenize` and `train-tokenizer` verbs."""
    p = subparsers.add_parser(
        "tokenize",
        description="Write one JSON object per input line: input_ids, token_type_ids and offsets (character "
        "spans in the line). With --pairs each line is 'text<TAB>pair'.",
    )
    p.add_argument("input", metavar="INPUT", help="text file, one text per line ('-' for standard input)")
    p.add_argument("--model", required=True, help="tokenizer or model folder (vocab.txt, tokenizer_config.json), "
                   "or a shipped model's name")
    p.add_argument("--pairs", action="store_true", help="each line holds two texts separated by a tab")
    p.add_argument("--max-length", type=int, default=None, help="truncate to this many tokens (default: no limit)")
    p.add_argument("-o", "--output", default=None, help="output JSONL file (default: standard output)")
    p.set_defaults(func=tokenize_command)

    t = subparsers.add_parser(
        "train-tokenizer",
        description="Learn a WordPiece vocabulary from text files with the WordPiece likelihood criterion "
        "(merge the pair that most raises the unigram likelihood) and write a folder BertTokenizer loads.",
    )
    t.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files")
    t.add_argument("-o", "--output", required=True, help="output tokenizer folder")
    t.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case, strip accents)")
    t.add_argument("--overwrite", action="store_true", help="write into an output folder that already holds files")
    add_options(t, VocabOptions, required=("vocab_size",))
    t.set_defaults(func=train_tokenizer_command)


def _read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 file (or stdin for '-') without their line endings."""
    if path == "-":
        return sys.stdin.read().splitlines()
    from bertkit.tokenizer.tokenizer import read_utf8

    text = read_utf8(Path(path), DataError, "no such input file")
    if not text:
        return []  # an empty file has no lines (not one empty line)
    return [line.rstrip("\r") for line in text.split("\n")][: -1 if text.endswith("\n") else None]


def tokenize_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit tokenize`."""
    from bertkit.tokenizer import load_tokenizer

    folder = resolve_model_dir(args.model)  # a folder, or a shipped model's name
    if not folder.exists():
        raise CheckpointError(f"{args.model}: no such tokenizer folder (nor a shipped model's name: "
                              f"{', '.join(SHIPPED)})")
    tok = load_tokenizer(folder)
    lines = _read_lines(args.input)
    if args.output:
        check_output_file(args.output)
    texts, pairs = lines, None
    if args.pairs:
        texts, pairs = [], []
        for i, line in enumerate(lines, 1):
            if "\t" not in line:
                raise data_error(args.input, i, "expected two texts separated by a tab (--pairs)")
            a, b = line.split("\t", 1)
            texts.append(a)
            pairs.append(b)
    truncation = "longest_first" if args.max_length is not None else False
    batch = tok(texts, pairs, max_length=args.max_length, truncation=truncation)

    with atomic_open(args.output) if args.output else contextlib.nullcontext(sys.stdout) as f:
        for enc in batch:
            f.write(json.dumps({"input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids,
                                "offsets": [list(o) for o in enc.offsets]}) + "\n")
    return 0


def train_tokenizer_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit train-tokenizer`."""
    from bertkit.tokenizer.trainer import train_tokenizer

    options = config_from_options(VocabOptions, args)
    for f in args.files:
        if not Path(f).is_file():
            raise DataError(f"{f}: no such input file")
    check_output_dir(args.output, args.overwrite)  # before the work, not after it
    start = time.perf_counter()
    tok = train_tokenizer([Path(f) for f in args.files], vocab_size=options.vocab_size,
                          min_frequency=options.min_frequency, lowercase=not args.cased,
                          limit_alphabet=options.limit_alphabet, criterion=options.criterion, progress=True)
    tok.save_pretrained(args.output)
    print(f"wrote {args.output}: {tok.vocab_size} tokens in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0
