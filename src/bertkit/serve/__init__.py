"""HTTP service over a model folder (needs the optional fastapi + uvicorn dependencies for `create_app`/`serve`)."""

from bertkit.lazy import lazy_exports
from bertkit.serve.settings import ServeSettings

__all__ = ["ServeSettings", "build_server", "create_app", "serve"]
# The app's names, imported with fastapi on first use.
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__[1:], "bertkit.serve.app"))
