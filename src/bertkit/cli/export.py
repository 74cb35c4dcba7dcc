"""`bertkit export-onnx`: a model folder -> one ONNX file with dynamic batch and sequence axes."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the export-onnx verb."""
    p = subparsers.add_parser("export-onnx", help="export a model folder (any head) to ONNX",
                              description="Export DIR's model (the head its config.json names) to ONNX with "
                              "dynamic batch and sequence axes; inputs input_ids, attention_mask, token_type_ids.")
    p.add_argument("model", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.onnx")
    p.add_argument("--opset", type=int, default=17)
    p.set_defaults(func=export_onnx_command)


def export_onnx_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit export-onnx`."""
    from bertkit.inference.onnx_export import export_onnx
    from bertkit.io import check_output_file
    import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config naming only its task opens)
    from bertkit.model.folder import load_model

    check_output_file(args.output)
    model = load_model(args.model)
    names = export_onnx(model, args.output, args.opset)
    print(f"wrote {args.output} ({type(model).__name__}; outputs: {', '.join(names)})", file=sys.stderr)
    return 0
