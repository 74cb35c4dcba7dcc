"""The one options layer (bertkit.dataclass_io): every field of every config dataclass declares its valid values beside
it (`spec`), and every way of building a config checks them in one place. A walk over every field of every config
tries NaN, the infinities, zero, a negative number, a huge number, the wrong type and the empty string, built from
Python and read from a dict (a YAML/JSON file): each value is either refused with a ConfigError naming the field,
or accepted as given and inside the field's declared range; never a traceback, never a silent accept."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import types
import typing
from typing import Any

import pytest

import bertkit
from bertkit.dataclass_io import SPEC, Config, Spec, check_value, config_from_dict, field_spec, spec
from bertkit.errors import ConfigError

BAD_VALUES: list[Any] = [math.nan, math.inf, -math.inf, 0, -1, 10**30, 1e30, "abc", "", True, [1], {"a": 1}, None,
                         "nan", "inf"]


def _all_configs() -> list[type]:
    """Every Config subclass defined in bertkit (every module imported first)."""
    for info in pkgutil.walk_packages(bertkit.__path__, "bertkit."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: list[type] = []
    stack = list(Config.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("bertkit.") and cls not in found:
            found.append(cls)
        stack += cls.__subclasses__()
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


CONFIGS = _all_configs()


def _kinds(tp: Any) -> list[Any]:
    """The non-None members of a type (an Optional's, a list's items)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [k for arg in typing.get_args(tp) if arg is not type(None) for k in _kinds(arg)]
    if typing.get_origin(tp) is list:
        return _kinds(typing.get_args(tp)[0])
    return [tp]


def _fields() -> list[tuple[type, str, Any]]:
    return [(cls, f.name, typing.get_type_hints(cls)[f.name]) for cls in CONFIGS for f in dataclasses.fields(cls)]


def test_every_config_of_the_package_is_found() -> None:
    names = {c.__name__ for c in CONFIGS}
    assert {"TrainingConfig", "BertConfig", "PretrainingDataConfig", "PretrainConfig", "FinetuneConfig",
            "DistillConfig", "EmbedConfig", "IndexOptions", "SearchConfig", "ServeSettings", "ClassificationOptions",
            "QAOptions", "NerOptions", "DemoConfig", "FillMaskOptions", "ExportOptions"} <= names
    assert len(CONFIGS) >= 30


@pytest.mark.parametrize("cls,name,tp", _fields(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_number_and_string_field_declares_its_valid_values(cls: type, name: str, tp: Any) -> None:
    kinds = _kinds(tp)
    declared = field_spec(cls, name)
    if any(k in (int, float) for k in kinds):
        assert declared is not None, f"{cls.__name__}.{name}: a number with no declared range"
        lower = [declared.ge, declared.gt]
        upper = [declared.le, declared.lt]
        assert any(v is not None for v in lower) and any(v is not None for v in upper), \
            f"{cls.__name__}.{name}: a number needs both bounds (a huge value must be refused)"
    if str in kinds:
        assert declared is not None, f"{cls.__name__}.{name}: a string with no declared values"


def _accepted(cls: type, name: str, value: Any) -> Any:
    """check_value's result, or the ConfigError it raised (anything else fails the test)."""
    try:
        return check_value(cls, name, value)
    except ConfigError as e:
        return e


@pytest.mark.parametrize("cls,name,tp", _fields(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_field_refuses_by_name_or_accepts_within_its_range(cls: type, name: str, tp: Any) -> None:
    declared = field_spec(cls, name)
    kinds = _kinds(tp)
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)
    for value in BAD_VALUES + ([[v] for v in (math.nan, -1, 10**30, "")] if typing.get_origin(tp) is list else []):
        result = _accepted(cls, name, value)
        if isinstance(result, ConfigError):
            assert name in str(result), f"{cls.__name__}.{name} = {value!r}: the message does not name it: {result}"
            continue
        # Accepted: only as a value of the field's own type, finite, and inside its declared range.
        if result is None:
            assert optional or not any(k in (int, float, str, bool) for k in kinds), (cls, name)
            continue
        for item in (result if isinstance(result, list) else [result]):
            if isinstance(item, float):
                assert math.isfinite(item), (cls, name, value)
            if isinstance(item, bool):
                assert bool in kinds, (cls, name, value)
            elif isinstance(item, (int, float)):
                assert int in kinds or float in kinds, (cls, name, value)
            elif isinstance(item, str):
                assert str in kinds, (cls, name, value)
        if declared is not None:
            declared.check(result, name)  # raises if the layer let through what its spec refuses


# Values a config built from Python must take as valid for the fields this walk does not change.
REQUIRED: dict[str, dict[str, Any]] = {
    "FinetuneConfig": dict(task="classification", model="m", train="t", dev="d"),
    "EvaluateConfig": dict(model="m", input="i"),
    "PredictConfig": dict(model="m", input="i", output="o"),
    "EmbedConfig": dict(input="i", output="o", model="m"),
    "IndexConfig": dict(embeddings="e", output="o"),
    "SearchConfig": dict(index="i"),
    "FinetuneBudget": dict(task="classification", train="t", dev="d"),
    "PhaseConfig": dict(data="d"),
}
SKIP_BUILD = {"DistillConfig", "PayoffConfig"}  # built from a real teacher folder / a budget: tested in their jobs


@pytest.mark.parametrize("cls", [c for c in CONFIGS if c.__name__ not in SKIP_BUILD], ids=lambda c: c.__name__)
def test_building_a_config_from_python_or_a_dict_checks_every_field(cls: type) -> None:
    """The check runs on construction (Config.__post_init__), not only in check_value: a config with one bad field,
    built from keyword arguments or read from a dict, is refused naming that field."""
    base = REQUIRED.get(cls.__name__, {})
    cls(**base)  # the defaults are valid
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not any(k in (int, float) for k in _kinds(hints[f.name])):
            continue
        for value in (math.nan, math.inf, 10**30, "abc"):
            for build in (lambda v: cls(**{**base, f.name: v}), lambda v: config_from_dict(cls, {**base, f.name: v})):
                with pytest.raises(ConfigError, match=f.name):
                    build(value)


def test_a_spec_says_what_it_expects_and_why() -> None:
    s = Spec(gt=0, le=1e-3, why="a reason")
    with pytest.raises(ConfigError, match=r"X.eps: expected a number > 0 and <= 0.001 \(a reason\), found 0.9"):
        s.check(0.9, "X.eps")
    with pytest.raises(ConfigError, match=r"X.k: expected an integer >= 1, found 0"):
        Spec(ge=1).check(0, "X.k")
    with pytest.raises(ConfigError, match=r"X.mode: expected one of a, b, found 'c'"):
        Spec(choices=("a", "b")).check("c", "X.mode")
    with pytest.raises(ConfigError, match=r"X.name is required"):
        Spec().check("", "X.name")
    Spec(empty=True).check("", "X.name")
    with pytest.raises(ConfigError, match=r"X.xs\[1\]: expected an integer >= 0"):
        Spec(ge=0).check([0, -2], "X.xs")


def test_a_registry_choice_is_read_when_checked() -> None:
    names = ["a"]

    @dataclasses.dataclass
    class C(Config):
        kind: str = spec("a", choices=lambda: tuple(names))

    with pytest.raises(ConfigError, match="C.kind: expected one of a, found 'b'"):
        C(kind="b")
    names.append("b")
    assert C(kind="b").kind == "b"


def test_the_spec_lives_in_the_field_metadata() -> None:
    @dataclasses.dataclass
    class C(Config):
        n: int = spec(3, ge=1, le=10)

    (f,) = dataclasses.fields(C)
    assert f.metadata[SPEC] == Spec(ge=1, le=10) and C().n == 3
    assert C(n=4.0).n == 4 and isinstance(C(n=4.0).n, int)  # a whole float is the integer it names
    with pytest.raises(ConfigError, match="C.n: expected an integer, found 4.5"):
        C(n=4.5)


def test_the_config_reference_lists_every_config() -> None:
    """docs/reference/configs.md shows each config's valid values: every Config but the tasks' (listed from the
    registry there) is in its list."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
    import reference

    from bertkit.tasks import TASKS
    from bertkit.tasks.base import TaskOptions, TaskSettings

    listed = {name for _, name in reference.CONFIGS}
    tasks = {c.__name__ for t in TASKS.values() for c in (t.options_class, t.settings_class)}
    missing = {c.__name__ for c in CONFIGS} - listed - tasks - {TaskOptions.__name__, TaskSettings.__name__}
    assert not missing, f"add these to docs/reference.py CONFIGS: {sorted(missing)}"
