"""`bertkit fill-mask`, `bertkit extract-features`, `bertkit attention`: look inside a model folder."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bertkit.cli.config_options import add_options, config_from_options
from bertkit.errors import ConfigError
from bertkit.inference.options import AttentionOptions, FeatureOptions, FillMaskOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the fill-mask, extract-features and attention verbs."""
    p = subparsers.add_parser(
        "fill-mask",
        description="Print the masked-LM head's top-k tokens with probabilities at every mask token of TEXT, the "
                    "folder's own ([MASK] for BERT, <mask> for RoBERTa); the folder must hold a masked-LM head "
                    "(BertForMaskedLM, BertForPreTraining, or a family's, e.g. RobertaForMaskedLM).")
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--model", required=True, metavar="DIR")
    add_options(p, FillMaskOptions)
    p.set_defaults(func=fill_mask_command)

    p = subparsers.add_parser(
        "extract-features",
        description="Write one JSON object per line of INPUT (a pair as 'A ||| B') in "
                    "extract_features.py's format, values rounded to 6 decimals.")
    p.add_argument("input", metavar="INPUT", help="text file, one text or 'A ||| B' pair per line")
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--layers", default="-1,-2,-3,-4",
                   help="layer indices, -1 = last; write --layers=-1,-2 (default %(default)s)")
    add_options(p, FeatureOptions, aliases={"max_length": ("max_seq_length",)})  # the reference's spelling
    p.set_defaults(func=extract_features_command)

    p = subparsers.add_parser(
        "attention",
        description="Draw the attention maps of TEXT (and --pair) per layer and head into "
                    "OUT.png and a self-contained OUT.html next to it.")
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--pair", default=None, help="second segment of a sentence pair")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    add_options(p, AttentionOptions)
    p.set_defaults(func=attention_command)


def _load(folder: str):  # noqa: ANN202 (model, tokenizer)
    import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config naming only its task opens)
    from bertkit.model.folder import open_folder

    opened = open_folder(folder)
    return opened.model, opened.tokenizer


def fill_mask_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit fill-mask`."""
    from bertkit.inference.fill_mask import fill_mask

    options = config_from_options(FillMaskOptions, args)
    model, tokenizer = _load(args.model)
    for i, predictions in enumerate(fill_mask(model, tokenizer, args.text, options.top_k), start=1):
        print(f"{tokenizer.mask_token} #{i}:")
        for p in predictions:
            print(f"  {p.token:20s} {p.probability:.4f}")
    return 0


def extract_features_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit extract-features`."""
    from bertkit.answers import check_finite
    from bertkit.data.texts import read_lines
    from bertkit.inference.features import extract_features, parse_layers
    from bertkit.io import atomic_open, check_output_file

    options = config_from_options(FeatureOptions, args)
    lines = read_lines(args.input)
    check_output_file(args.output)  # before the model runs, not after
    model, tokenizer = _load(args.model)
    layers = parse_layers(args.layers, model.config.num_hidden_layers)
    records = extract_features(model, tokenizer, lines, layers, options.max_length, options.batch_size)
    with atomic_open(args.output, "w") as f:
        for n, record in enumerate(records, start=1):
            check_finite(record, f"the features of {args.input} line {n}")  # never NaN, which is not JSON
            f.write(json.dumps(record, allow_nan=False) + "\n")
    print(f"wrote features of {len(lines)} lines to {args.output}", file=sys.stderr)
    return 0


def attention_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit attention`."""
    from bertkit.inference.attention import attention_maps, render_png, write_html
    from bertkit.io import check_output_file

    options = config_from_options(AttentionOptions, args)
    if not args.text.strip():
        raise ConfigError("the text is empty; give a sentence to draw")
    html_path = Path(args.output).with_suffix(".html")
    for path in (args.output, html_path):
        check_output_file(path)
    model, tokenizer = _load(args.model)
    tokens, maps = attention_maps(model, tokenizer, args.text, args.pair, options.max_length)
    title = f"{Path(args.model).name}: {args.text}" + (f" ||| {args.pair}" if args.pair else "")
    render_png(tokens, maps, args.output, title)
    write_html(args.output, html_path, tokens, title)
    print(f"wrote {args.output} and {html_path}", file=sys.stderr)
    return 0
