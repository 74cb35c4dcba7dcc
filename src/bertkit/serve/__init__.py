"""HTTP service over a model folder (needs the optional fastapi + uvicorn dependencies for `create_app`/`serve`)."""

from bertkit.serve.settings import ServeSettings

__all__ = ["ServeSettings", "build_server", "create_app", "serve"]


def __getattr__(name: str):  # noqa: ANN202 (the app's names, imported with fastapi on first use)
    if name in ("build_server", "create_app", "serve"):
        from bertkit.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'bertkit.serve' has no attribute {name!r}")
