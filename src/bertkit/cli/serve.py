"""`bertkit serve`: an HTTP JSON service over a model folder (FastAPI on uvicorn)."""

from __future__ import annotations

import argparse

from bertkit.cli.config_options import add_options, config_from_options
from bertkit.errors import ConfigError
from bertkit.serve.settings import ServeAddress, ServeSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the serve verb; its limits are bertkit.serve.ServeSettings' fields, generated."""
    p = subparsers.add_parser(
        "serve",
        description="Start a FastAPI service with the endpoints the folder's head supports, "
                    "an OpenAPI document at /docs and /openapi.json, and /health.")
    p.add_argument("--model", required=True, metavar="DIR")
    add_options(p, ServeAddress)
    add_options(p.add_argument_group("limits and batching (ServeSettings)"), ServeSettings)
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit serve`."""
    try:  # the extra's packages, before any work: uvicorn is imported only when the server starts
        import uvicorn  # noqa: F401

        from bertkit.serve import serve
    except ImportError as e:
        raise ConfigError(f"serving needs the serve extra (fastapi, uvicorn and prometheus-client; fastapi-offline for "
                          f"/docs), and {e.name or e} is not installed: pip install 'bertkit[serve]'") from None
    address = config_from_options(ServeAddress, args)
    settings = config_from_options(ServeSettings, args)
    serve(args.model, address.host, address.port, settings)
    return 0
