"""A package's exported names imported on first use (PEP 562 module `__getattr__`), so that importing one light
module of a package (its config, say) does not import the package's heavy modules (torch): the CLI builds a verb's
options from its configs, and `bertkit VERB --help` prints them without loading the model code."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, for names (name -> the module that defines it) imported when first
    used and then kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
