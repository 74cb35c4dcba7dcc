"""Configs as dataclasses: the one layer that says which values every option of bertkit accepts.

Every config of bertkit (the data recipe, the model, the trainer, each job, each task's options, the service)
subclasses `Config` and declares each field's valid values beside the field with `spec(...)`:

    lr: float = spec(1e-4, gt=0, le=1)
    # (the field's docstring follows, as usual)

`Config.__post_init__` checks every field against its type and its spec (`check_fields`) and then the class's own
cross-field rules (`validate`), so a value is checked in one place whether it comes from a YAML file
(`config_from_dict`), the command line (bertkit.cli.config_options, which also shows each spec in the help) or
Python: a wrong type, NaN, an infinity or an out-of-range number is a ConfigError naming the field and what was
expected. A function that takes one such value outside a config checks it against the field's spec too
(`check_value(Cls, "field", value)`), so no range is written twice.

Also here: nested dataclass <-> dict, JSON and YAML, and the docstring under each field (for generated help).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import json
import math
import os
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bertkit.errors import ConfigError

T = TypeVar("T")
# A number with an exponent, which PyYAML leaves a string unless it has a dot and a signed exponent (1e-4, 3E5).
_YAML11_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")

def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce_value(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently convert: int -> float, a dict -> a nested dataclass) `value` against the annotation `tp`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                with contextlib.suppress(ConfigError):
                    return coerce_value(value, arg, where)
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
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, found {value!r}")
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _YAML11_EXPONENT.fullmatch(value.strip()):
            number = float(value)  # YAML 1.1 (PyYAML) reads 1e-4 as a string; any other quoted number stays refused
        if number is None:
            raise ConfigError(f"{where}: expected a number, found {value!r}")
        if not math.isfinite(number):  # NaN passes every `x < 0` check; no setting of bertkit means infinity
            raise ConfigError(f"{where}: expected a finite number, found {value!r}")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise ConfigError(f"{where}: expected a string, found {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):  # os.PathLike, a class of bertkit's
        raise ConfigError(f"{where}: expected {_type_name(tp)}, found {value!r}")
    return value


SPEC = "spec"  # the dataclass field metadata key of a field's Spec
# Values shared by several configs' specs.
SEED_LIMIT = 2**63 - 1  # every seed: torch.manual_seed and numpy's SeedSequence take it; 1e23 overflows torch's int64
DEVICE = {"pattern": r"auto|cpu|cuda(:\d{1,3})?|mps", "meaning": "auto, cpu, cuda, cuda:N or mps"}  # torch.device's


@dataclass(frozen=True)
class Spec:
    """The values a config field accepts beyond its type, declared beside the field with `spec(...)`.

    Numbers: bounds (`ge` >=, `gt` >, `le` <=, `lt` <); strings: `choices` (a tuple, or a function giving the
    registry's names at check time), a regular expression the whole string matches (`pattern`, described by
    `meaning`), or any string; a list: each item. A string or list is non-empty unless `empty=True`. `why` is
    said after what was expected (the reason for a bound, e.g. what real checkpoints use)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] | Callable[[], Iterable[str]] | None = None
    pattern: str | None = None
    meaning: str = ""
    empty: bool = False
    why: str = ""

    def names(self) -> tuple[str, ...]:
        """The allowed strings (the registry's now, for a function)."""
        if self.choices is None:
            return ()
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def expected(self, integer: bool = False) -> str:
        """What the field accepts, in words: 'a number > 0 and <= 1', 'one of fp32, bf16', ..."""
        if self.choices is not None:
            return f"one of {', '.join(self.names())}"
        if self.pattern is not None:
            return self.meaning or f"a string matching {self.pattern}"
        bounds = [f"{op} {_number(v)}" for op, v in ((">=", self.ge), (">", self.gt), ("<=", self.le),
                                                   ("<", self.lt)) if v is not None]
        if not bounds:
            return "any string" if self.empty else "a non-empty string"
        return f"{'an integer' if integer else 'a number'} {' and '.join(bounds)}"

    def check(self, value: Any, where: str) -> None:
        """ConfigError naming `where` if `value` (already of the field's type; None passes) is not accepted."""
        if value is None:
            return
        why = f" ({self.why})" if self.why else ""
        if isinstance(value, (list, tuple)):
            if not value and not self.empty:
                raise ConfigError(f"{where}: expected a non-empty list{why}, found []")
            for i, item in enumerate(value):
                self.check(item, f"{where}[{i}]")
            return
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return  # a nested config or mapping: checked by its own class
        if isinstance(value, str) and not value and self.choices is None and self.pattern is None and not self.empty:
            raise ConfigError(f"{where} is required (a non-empty string), found ''")
        if isinstance(value, str):
            ok = (value in self.names() if self.choices is not None
                  else self.pattern is None or bool(re.fullmatch(self.pattern, value)))
        else:
            ok = ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                  and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))
        if not ok:
            raise ConfigError(f"{where}: expected {self.expected(isinstance(value, int))}{why}, found {value!r}")


def _number(v: float) -> str:
    """A bound as written: an integer in full, a float as %g (1e-12, 0.5)."""
    return str(v) if isinstance(v, int) else f"{v:g}"


def spec(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **checks: Any) -> Any:
    """A dataclass field with its valid values (the keyword arguments of `Spec`) in its metadata."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={SPEC: Spec(**checks)})


def field_of(cls: type, name: str, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A field that takes the values of field `name` of config `cls` (its Spec), with its own default: the same
    option in two configs, its range declared once."""
    declared = field_spec(cls, name)
    metadata = {SPEC: declared} if declared is not None else {}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def field_spec(cls: type, name: str) -> Spec | None:
    """The Spec declared on field `name` of dataclass `cls` (None if it declares none)."""
    return next((f.metadata.get(SPEC) for f in dataclasses.fields(cls) if f.name == name), None)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_value(cls: type, name: str, value: Any, where: str | None = None) -> Any:
    """`value` checked as field `name` of config `cls` (its type, then its spec): for a function that takes one
    such value outside a config, so its range is declared once. Returns the value (converted: int -> float)."""
    where = where or f"{cls.__name__}.{name}"
    value = coerce_value(value, _hints(cls)[name], where)
    declared = field_spec(cls, name)
    if declared is not None:
        declared.check(value, where)
    return value


def check_fields(obj: Any) -> None:
    """Check (and convert: int -> float) every field of a config dataclass against its type and its Spec;
    ConfigError naming the first field that is wrong."""
    cls = type(obj)
    for f in dataclasses.fields(obj):
        value = check_value(cls, f.name, getattr(obj, f.name))
        object.__setattr__(obj, f.name, value)  # frozen dataclasses too


class Config:
    """Base of every config dataclass: fields checked on construction (`check_fields`, then `validate`), and read
    from / written to dicts, JSON and YAML."""

    def __post_init__(self) -> None:
        check_fields(self)
        self.validate()

    def validate(self) -> None:
        """A subclass's rules between fields (each field alone is checked by its spec); ConfigError naming them."""

    @classmethod
    def from_older(cls, d: dict[str, Any]) -> dict[str, Any]:
        """A dict of an older version's fields as this version's (a replaced field), so that old config files
        still read; the default returns `d` as it is."""
        return d

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON/YAML-ready)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any], where: str | None = None) -> T:
        """Inverse of `to_dict`; unknown keys, wrong types and values out of range are errors naming the field."""
        return config_from_dict(cls, d, where)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config atomically, as JSON for a .json path and YAML otherwise."""
        save_config(self, path)

    @classmethod
    def load(cls: type[T], path: str | os.PathLike) -> T:
        """Read a config written by `save` (JSON or YAML)."""
        return cls.from_dict(read_config_file(path), str(path))  # type: ignore[attr-defined]


def config_from_dict(cls: type[T], d: dict[str, Any], where: str | None = None) -> T:
    """Build dataclass `cls` from a dict, recursing into nested dataclasses; unknown keys name the field."""
    where = where or cls.__name__
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping, found {type(d).__name__}")
    if issubclass(cls, Config):
        d = cls.from_older(d)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(names)}")
    # Each value checked here as well as on construction, so that its message names where it was read
    # (config.yaml.training.lr, FinetuneConfig.training.seed).
    kwargs = {k: check_value(cls, k, v, f"{where}.{k}") for k, v in d.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if where == cls.__name__:  # the message names Class.field already
            raise
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
