"""Command-line options generated from config dataclasses: each option's name, help and default are written once,
on the dataclass field, and the CLI mirrors the config one to one.

Three steps, the same for every verb:
- `config_fields(cls, nested)` lists a dataclass's fields, the nested configs named in `nested` expanded (`lr` of
  `training` is `training.lr`); `task_option_fields()` lists every task's options (a FinetuneConfig's `options.*`);
- `add_config_options(group, fields)` adds one option per field (`add_options`: every field of an options class);
- `apply_overrides(d, args)` writes the options given on the command line into a config dict (a --config file's, or
  an empty one), which the config's own `from_dict` / `config_from_dict` then checks, naming the field.

Names: a field at `path` is `--path`, also its flat `--name` when no other field of the verb has that name, and the
dashed spelling of each (`--training.lr`, `--lr`; `--eval-batch-size`, `--eval_batch_size`). Values: a string
field takes the text as written (a path like data.json#38: is not YAML; 'null' is None where the field allows it),
a list of strings a YAML list or names separated by commas, any other field a YAML value (numbers, true/false,
null, [lists], {mappings}). A boolean field takes a value (`--shuffle false`), or with `switches=True` is a switch
(`--whole-word-mask`, `--no-whole-word-mask`). A field's default is the config's: an option not given is not set.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from bertkit.dataclass_io import (
    SPEC,
    Spec,
    coerce_value,
    config_from_dict,
    dump_config,
    field_docs,
    read_config_file,
)
from bertkit.errors import ConfigError

PREFIX = "override:"  # argparse dest prefix of every generated option: PREFIX + the field's path
T = TypeVar("T")


@dataclass(frozen=True)
class ConfigField:
    """One generated option: where its value goes in the config dict, the field's type and the help text."""

    path: str
    """Dotted place in the config dict: `lr` of `training` is 'training.lr', a task option 'options.max_length'."""
    type: Any
    """The field's annotation (resolved), which decides how the command-line text is read."""
    help: str = ""
    name: str = ""
    """The option's name when it is not the path (a task option: 'max_length' for 'options.max_length')."""
    spec: Spec | None = None
    """The field's valid values (its choices become the option's)."""
    default: str | None = None
    """The default as the help shows it (None: not shown)."""


def config_fields(cls: type, nested: dict[str, type] | None = None, skip: tuple[str, ...] = (),
                  defaults: Any = None) -> list[ConfigField]:
    """Every field of dataclass `cls` but those in `skip`; a field named in `nested` (field name -> its dataclass)
    stands for that dataclass's fields. With `defaults` (an instance of `cls`) the help shows each default."""
    nested = nested or {}
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out: list[ConfigField] = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name in nested:
            inner = config_fields(nested[f.name], defaults=getattr(defaults, f.name, None))
            out += [dataclasses.replace(g, path=f"{f.name}.{g.path}") for g in inner]
            continue
        default = shown(getattr(defaults, f.name)) if defaults is not None else None
        out.append(ConfigField(f.name, hints[f.name], docs.get(f.name, ""), spec=f.metadata.get(SPEC), default=default))
    return out


def shown(value: Any) -> str:
    """A default as the help shows it ('' for the empty string, null for None)."""
    if value is None:
        return "null"
    return repr(value) if value == "" else str(value)


def task_option_fields() -> list[ConfigField]:
    """Every task's options as `options.NAME` fields spelled `--NAME`, each once (TaskOptions' own first); the help of
    an option that only some tasks have names them."""
    from bertkit.tasks import TASKS

    owners = task_option_owners()
    first: dict[str, ConfigField] = {}
    for task_cls in TASKS.values():
        for f in config_fields(task_cls.options_class):
            first.setdefault(f.path, f)
    out = []
    for name, f in first.items():
        tasks = "" if len(owners[name]) == len(TASKS) else f"[{', '.join(owners[name])}] "
        out.append(dataclasses.replace(f, path=f"options.{name}", name=name, help=tasks + f.help))
    return out


def task_option_owners() -> dict[str, list[str]]:
    """Task option name -> the tasks that have it, in the registry's order."""
    from bertkit.tasks import TASKS

    owners: dict[str, list[str]] = {}
    for task, task_cls in TASKS.items():
        for f in dataclasses.fields(task_cls.options_class):
            owners.setdefault(f.name, []).append(task)
    return owners


def check_task_options(args: argparse.Namespace, task: str | None) -> None:
    """ConfigError naming the flag and the tasks that have it when a task option given on the command line is not
    an option of `task` (the registry's name or alias; None: not known yet, nothing to check)."""
    if not task:
        return
    from bertkit.tasks import get_task

    name = get_task(task).name
    owners = task_option_owners()
    for path in given_options(args):
        option = path.removeprefix("options.")
        if path.startswith("options.") and name not in owners[option]:
            raise ConfigError(f"--{option.replace('_', '-')} is an option of {', '.join(owners[option])}, "
                              f"not of --task {name}")


def option_names(path: str, flat: bool, aliases: tuple[str, ...] = ()) -> list[str]:
    """'training.lr' -> ['--lr', '--training.lr'] (the flat name first when unambiguous: the one the help shows),
    plus aliases, each dashed and as written: 'eval_batch_size' -> ['--eval-batch-size', '--eval_batch_size']."""
    names = ([path.split(".")[-1]] if flat else []) + [path] + list(aliases)
    return list(dict.fromkeys(f"--{spelling}" for n in names for spelling in (n.replace("_", "-"), n)))


def add_config_options(group: argparse.ArgumentParser | argparse._ArgumentGroup, fields: Iterable[ConfigField],
                       aliases: dict[str, tuple[str, ...]] | None = None,
                       choices: dict[str, tuple[str, ...]] | None = None, switches: bool = False,
                       required: tuple[str, ...] = (), groups: dict[str, str] | None = None) -> None:
    """One option per field, named and read as the module's docstring says; `aliases` and `choices` are keyed by
    the field's path, `required` names the paths argparse itself requires (a verb without --config). An option not
    given is not set, so the config's own default applies. `groups` (nested config's field name, '' for the
    config's own fields -> title) puts each field's option in the argument group of its config."""
    fields = list(fields)
    names = [f.name or f.path for f in fields]
    top = {n for n in names if "." not in n}
    where = {prefix: group.add_argument_group(title) for prefix, title in (groups or {}).items()}
    for f, name in zip(fields, names):
        into = where.get(f.path.split(".")[0] if "." in f.path else "", group)
        flat = "." in name and name.split(".")[-1] not in top
        kwargs: dict[str, Any] = {"dest": PREFIX + f.path, "default": argparse.SUPPRESS,
                                  "help": f.help.replace("%", "%%") or None, "required": f.path in required}
        declared = f.spec.choices if f.spec is not None and isinstance(f.spec.choices, tuple) else None
        listed = (choices or {}).get(f.path) or declared  # a registry's names are checked when the config is built
        if switches and f.type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif listed and f.type is str:  # an optional string takes null too: not argparse's to check
            kwargs.update(type=value_reader(f.type), choices=listed)
        else:
            kwargs.update(type=value_reader(f.type), metavar=type_metavar(f.type))
        action = into.add_argument(*option_names(name, flat, (aliases or {}).get(f.path, ())), **kwargs)
        action.shown_default = f.default  # type: ignore[attr-defined]  (the help's default: cli.HelpFormatter)


def add_options(group: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, **kwargs: Any) -> None:
    """One option per field of options dataclass `cls`, each with its default in its help (`add_config_options`'
    keyword arguments)."""
    add_config_options(group, config_fields(cls, defaults=cls()), **kwargs)


def type_metavar(tp: Any) -> str:
    """An option's value as the help names it, by its field's type: INT, FLOAT, STR, BOOL, LIST or MAP (null is
    taken where the field is optional)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is list:
        return "LIST"
    if typing.get_origin(tp) is dict or tp is dict or dataclasses.is_dataclass(tp):
        return "MAP"
    return {int: "INT", float: "FLOAT", str: "STR", bool: "BOOL"}.get(tp, "VALUE")


def value_reader(tp: Any) -> Callable[[str], Any]:
    """How an option's text becomes a value, by its field's type: a string as written, a list of strings from a YAML
    list or commas, anything else as YAML (a scalar already converted to the field's type where it fits)."""
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)
    kinds = [a for a in typing.get_args(tp) if a is not type(None)] if optional else [tp]
    if kinds == [str]:
        return string_or_none if optional else str
    if kinds == [list[str]]:
        return string_list

    def typed_value(text: str) -> Any:
        value = parse_value(text)
        if value is None or isinstance(value, (str, int, float, bool)):
            try:
                return coerce_value(value, tp, "")  # '3e-4' for a float field -> 0.0003
            except ConfigError:
                pass  # left as read: the config's check names the field
        return value

    typed_value.__name__ = getattr(tp, "__name__", str(tp))  # argparse names the type in its messages
    return typed_value


def string_or_none(text: str) -> str | None:
    """A string field's command-line value: the text itself, or None for 'null' / '~' (as YAML would read them)."""
    return None if text in ("null", "~") else text


def string_list(text: str) -> list[str] | None:
    """A list option's value: a YAML list ('[Age, Rating]'), names separated by commas ('Age,Rating'), or null."""
    if text.lstrip().startswith("["):
        value = parse_value(text)
        if isinstance(value, list):
            return [str(v) for v in value]
    if text in ("null", "~"):
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it ('3e-4' -> '3e-4', 'null' -> None, '{a: 1}' -> dict)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def given_options(args: argparse.Namespace, cls: type | None = None) -> dict[str, Any]:
    """Path -> value of every generated option the command line gave (only those of config `cls`'s fields when
    given: a verb whose options fill two configs)."""
    names = {f.name for f in dataclasses.fields(cls)} if cls is not None else None
    return {k[len(PREFIX):]: v for k, v in vars(args).items()
            if k.startswith(PREFIX) and (names is None or k[len(PREFIX):].split(".")[0] in names)}


def apply_overrides(d: dict[str, Any], args: argparse.Namespace, cls: type | None = None) -> dict[str, Any]:
    """The config dict `d` (from a file, or empty) with every option given on the command line (for config `cls`,
    when given) set in it; a whole mapping (`--options '{...}'`) is set before the keys given into it
    (`--max-length 64`)."""
    for path, value in sorted(given_options(args, cls).items(), key=lambda kv: kv[0].count(".")):
        *parents, last = path.split(".")
        target = d
        for part in parents:
            if target.get(part) is None:
                target[part] = {}
            if not isinstance(target[part], dict):
                raise ConfigError(f"{part}: expected a mapping to set --{path} in, found {target[part]!r}")
            target = target[part]
        target[last] = value
    return d


def config_from_options(cls: type[T], args: argparse.Namespace, base: dict[str, Any] | None = None) -> T:
    """Dataclass `cls` built from `base` (its defaults when None) with the options given on the command line set,
    checked field by field (a ConfigError naming Class.field): the config of a verb without --config."""
    return config_from_dict(cls, apply_overrides(dict(base or {}), args, cls))


def add_run_options(parser: argparse.ArgumentParser, config_name: str, fields: Iterable[ConfigField],
                    groups: dict[str, str], tasks: str | None = None) -> None:
    """A training verb's options: --config, --resume, --print-config and --no-progress; one option per field of its
    config in the argument groups `groups` names (`add_config_options`; --output is training.output_dir's); with
    `tasks` (a group title), every task's options."""
    parser.add_argument("--config", metavar="CONFIG.yaml", help=f"YAML or JSON {config_name}")
    parser.add_argument("--resume", action="store_true", help="continue from OUTPUT's latest checkpoint")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_config_options(parser, fields, aliases={"training.output_dir": ("output",)}, groups=groups)
    if tasks:
        add_config_options(parser.add_argument_group(tasks), task_option_fields(), switches=True)


def config_dict(args: argparse.Namespace) -> dict[str, Any]:
    """The --config file's dict (or an empty one) with the command-line options applied; --no-progress turns the
    trainer's progress bar off."""
    d: dict[str, Any] = read_config_file(args.config) if getattr(args, "config", None) else {}
    apply_overrides(d, args)
    if not getattr(args, "progress", True):
        d.setdefault("training", {})["progress_bar"] = False
    return d


def printed_config(args: argparse.Namespace, config: Any) -> bool:
    """Print the resolved config as YAML when --print-config was given; whether it was (the verb then stops)."""
    if getattr(args, "print_config", False):
        print(dump_config(config), end="")
        return True
    return False
