"""`bertkit export-onnx`: a model folder -> one ONNX file with dynamic batch and sequence axes."""

from __future__ import annotations

import argparse
import sys

from bertkit.cli.config_options import add_options, config_from_options
from bertkit.inference.options import ExportOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the export-onnx verb."""
    p = subparsers.add_parser(
        "export-onnx",
        description="Export DIR's model (the head its config.json names) to ONNX with "
                    "dynamic batch and sequence axes; inputs input_ids, attention_mask, token_type_ids, "
                    "and every other input the folder's task gives its head (a classifier's "
                    "numeric_features and categorical_ids).")
    p.add_argument("model", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.onnx")
    add_options(p, ExportOptions)
    p.set_defaults(func=export_onnx_command)


def export_onnx_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit export-onnx`."""
    from bertkit.inference.onnx_export import export_folder
    from bertkit.io import check_output_file

    options = config_from_options(ExportOptions, args)
    check_output_file(args.output)
    model, names = export_folder(args.model, args.output, options.opset)
    print(f"wrote {args.output} ({type(model).__name__}; outputs: {', '.join(names)})", file=sys.stderr)
    return 0
