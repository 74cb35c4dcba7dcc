"""Command-line options generated from config dataclasses, so each default and help text is written once (on the
dataclass field). A field at `path` (dotted for nested configs: `training.lr`) becomes `--training.lr`, its flat
`--lr` when no other field has that name, and the dashed spellings of both. Values are read as YAML scalars
(numbers, true/false, null, [lists], {mappings}) and checked against the field's type when the config is built.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bertkit.dataclass_io import dump_config, field_docs, read_config_file

PREFIX = "override:"


def option_names(path: str, flat: bool, aliases: tuple[str, ...] = ()) -> list[str]:
    """'training.lr' -> ['--training.lr', '--lr'] (flat when unambiguous), plus dashed spellings and aliases."""
    names = [path] + ([path.split(".")[-1]] if flat else []) + list(aliases)
    out: list[str] = []
    for n in names:
        for spelling in (n, n.replace("_", "-")):
            if f"--{spelling}" not in out:
                out.append(f"--{spelling}")
    return out


STRING_TYPES = ("str", "str | None")  # fields whose command-line value is taken as written, never YAML-parsed


def string_or_none(text: str) -> str | None:
    """A string field's command-line value: the text itself, or None for 'null' / '~' (as YAML would read them)."""
    return None if text in ("null", "~") else text


def string_list(text: str) -> list[str]:
    """A list option's value: a YAML list ('[Age, Rating]') or names separated by commas ('Age,Rating')."""
    if text.lstrip().startswith("["):
        value = parse_value(text)
        if isinstance(value, list):
            return [str(v) for v in value]
    return [part.strip() for part in text.split(",") if part.strip()]


def dataclass_fields(cls: type, nested: dict[str, type], skip: tuple[str, ...] = ()) -> list[tuple[str, str, bool]]:
    """(dotted path, help, whether it is a string field) of every field of `cls` and of the nested configs named
    in `nested` (field name -> class)."""
    out = []
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name in nested:
            sub_docs = field_docs(nested[f.name])
            out += [(f"{f.name}.{g.name}", sub_docs.get(g.name, ""), str(g.type) in STRING_TYPES)
                    for g in dataclasses.fields(nested[f.name])]
        else:
            out.append((f.name, docs.get(f.name, ""), str(f.type) in STRING_TYPES))
    return out


def add_config_options(group: argparse._ArgumentGroup, fields: list[tuple[str, str, bool]],
                       aliases: dict[str, tuple[str, ...]] | None = None) -> None:
    """One option per field; nested fields also get their flat name when no top-level field has it. String fields
    keep the text as written (a path like data.json#38: is not YAML); the others are read as YAML values."""
    top = {path for path, _, _ in fields if "." not in path}
    for path, doc, is_string in fields:
        flat = "." in path and path.split(".")[-1] not in top
        group.add_argument(*option_names(path, flat, (aliases or {}).get(path, ())), dest=PREFIX + path,
                           type=string_or_none if is_string else parse_value, default=argparse.SUPPRESS,
                           metavar="VALUE", help=doc.replace("%", "%%") or None)


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it ('3e-4' -> 0.0003, 'null' -> None, '{a: 1}' -> dict)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(d: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The config dict `d` (from a file, or empty) with every option given on the command line set in it."""
    for key, value in vars(args).items():
        if not key.startswith(PREFIX):
            continue
        path = key[len(PREFIX):].split(".")
        target = d
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return d


def add_run_options(parser: argparse.ArgumentParser, config_name: str) -> None:
    """--config, --resume, --print-config and --no-progress: what a training verb has besides its generated options."""
    parser.add_argument("--config", metavar="CONFIG.yaml", help=f"YAML or JSON {config_name}")
    parser.add_argument("--resume", action="store_true", help="continue from OUTPUT's latest checkpoint")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def config_dict(args: argparse.Namespace) -> dict[str, Any]:
    """The --config file's dict (or an empty one) with the command-line options applied; --no-progress turns the
    trainer's progress bar off."""
    d: dict[str, Any] = read_config_file(args.config) if args.config else {}
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
