"""HTTP service over a model folder (needs the optional fastapi + uvicorn dependencies)."""

from bertkit.serve.app import ServeSettings, create_app, serve

__all__ = ["ServeSettings", "create_app", "serve"]
