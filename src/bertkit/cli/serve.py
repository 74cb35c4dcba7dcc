"""`bertkit serve`: an HTTP JSON service over a model folder (FastAPI on uvicorn)."""

from __future__ import annotations

import argparse
import dataclasses

from bertkit.dataclass_io import field_docs
from bertkit.errors import ConfigError
from bertkit.serve.settings import ServeSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the serve verb; its limits mirror bertkit.serve.ServeSettings."""
    p = subparsers.add_parser("serve", help="serve a model folder over HTTP (/embed, /fill-mask, /classify, ...)",
                              description="Start a FastAPI service with the endpoints the folder's head supports, "
                              "an OpenAPI document at /docs and /openapi.json, and /health.")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    docs = field_docs(ServeSettings)  # the dataclass's field docstrings are the help: one source of truth
    for f in dataclasses.fields(ServeSettings):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=docs.get(f.name, "").replace("%", "%%") + " (default %(default)s)")
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit serve`."""
    try:
        from bertkit.serve import serve
    except ImportError as e:
        raise ConfigError(f"serving needs fastapi and uvicorn: pip install 'bertkit[serve]' ({e})") from None
    settings = ServeSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeSettings)})
    settings.validate()
    serve(args.model, args.host, args.port, settings)
    return 0
