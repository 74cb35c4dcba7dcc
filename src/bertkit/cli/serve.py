"""`bertkit serve`: an HTTP JSON service over a model folder (FastAPI on uvicorn)."""

from __future__ import annotations

import argparse

from bertkit.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the serve verb; its limits mirror bertkit.serve.ServeSettings."""
    p = subparsers.add_parser("serve", help="serve a model folder over HTTP (/embed, /fill-mask, /classify, ...)",
                              description="Start a FastAPI service with the endpoints the folder's head supports, "
                              "an OpenAPI document at /docs and /openapi.json, and /health.")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch-size", type=int, default=32, help="texts per forward pass at most")
    p.add_argument("--max-batch-delay-ms", type=float, default=5.0, help="how long a batch waits to fill")
    p.add_argument("--max-request-texts", type=int, default=64, help="texts in one request at most")
    p.add_argument("--max-text-chars", type=int, default=10000, help="characters in one text at most")
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit serve`."""
    for name in ("max_batch_size", "max_request_texts", "max_text_chars"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    try:
        from bertkit.serve import ServeSettings, serve
    except ImportError as e:
        raise ConfigError(f"serving needs fastapi and uvicorn: pip install 'bertkit[serve]' ({e})") from None
    settings = ServeSettings(args.max_batch_size, args.max_batch_delay_ms, args.max_request_texts,
                             args.max_text_chars)
    serve(args.model, args.host, args.port, settings)
    return 0
