"""Configs as dataclasses: nested dataclass <-> dict, JSON and YAML, with type checks, and field docstrings for help.

Shared by every config of bertkit (the data recipe, the trainer, pre-training, serving): a typo or a string where a
number belongs fails with the field's dotted name, and generated command-line options take their help from the
docstring under each field.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from bertkit.errors import ConfigError

T = TypeVar("T")

def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce_value(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently convert: int -> float, a dict -> a nested dataclass) `value` against the annotation `tp`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce_value(value, arg, where)
            except ConfigError as e:
                errors.append(e)
        raise ConfigError(f"{where}: expected {_type_name(tp)}, found {value!r}")
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping of {tp.__name__} fields, found {value!r}")
        return config_from_dict(tp, value, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, found {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [coerce_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, found {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, found {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, found {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, found {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise ConfigError(f"{where}: expected a string, found {value!r}")
    return value


def config_from_dict(cls: type[T], d: dict[str, Any], where: str | None = None) -> T:
    """Build dataclass `cls` from a dict, recursing into nested dataclasses; unknown keys name the field."""
    where = where or cls.__name__
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping, found {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(names)}")
    kwargs = {k: coerce_value(v, hints[k], f"{where}.{k}") for k, v in d.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, the fields it inherits included (for generated command-line
    help)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a base's docs first, a subclass's where it redefines a field
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    """The docstrings under the fields written in `cls`'s own class body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a JSON or YAML config file into a dict (errors name the file)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            d = json.loads(text)
        else:
            import yaml

            d = yaml.safe_load(text)
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError
        raise ConfigError(f"{path}: cannot parse ({e})") from None
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, found {type(d).__name__}")
    return d


def dump_config(config: Any, fmt: str = "yaml") -> str:
    """A dataclass config as YAML or JSON text."""
    d = dataclasses.asdict(config)
    if fmt == "json":
        return json.dumps(d, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(d, sort_keys=False)


def save_config(config: Any, path: str | os.PathLike) -> None:
    """Write a dataclass config atomically, as JSON for a .json path and YAML otherwise."""
    from bertkit.io import atomic_write_text

    atomic_write_text(path, dump_config(config, "json" if str(path).endswith(".json") else "yaml"))
