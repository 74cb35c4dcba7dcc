"""Every table of README.md and docs/ rendered from JSON, so that a figure is typed once and never by hand in Markdown.

    python3 docs/generate.py            rewrite every generated table in place
    python3 docs/generate.py --check    change nothing; exit 1 and print the difference when a table in a page is
                                        not what its JSON gives (tests/docs/test_tables.py runs this in CI)

A generated table sits between two markers in a page:

    <!-- table:NAME -->              table NAME of the JSON file beside the page (results/X.md reads results/X.json)
    <!-- table:PATH.json#NAME -->    table NAME of another JSON file, PATH relative to the page
    | ... |                          written by this script
    <!-- /table -->

A JSON file holds a report's raw figures and how each table shows them:

    {"tables": {NAME: {
        "columns": [{"title": "gain", "template": "**{gain:+.2f}**", "align": "right", "key": "gain"}, ...],
        "defaults": {FIELD: VALUE, ...},      fields every row has unless it gives its own
        "computed": {FIELD: OP, ...},         fields computed from the row's, in this order (below)
        "rows": [{FIELD: VALUE, ..., "_bold": [column key or title, ...], "_italic": true,
                  "_templates": {column key or title: TEMPLATE}}, ...],     a row's own template for a cell
        "rows_of": NAME}}}                    instead of "rows": the rows of another table of the file, shown
                                              with other columns

A column's template is Python's str.format over the row's fields (`{seconds:.2f}`, `{tokens:,}`, `{seeds[0]:.2f}`);
a cell whose template names a field the row lacks (or holds null) is left empty.

A computed field is an OP: a field name, a number, or [operator, operand, ...] with the operators "+", "-", "*",
"/" (two operands, element by element when one is a list), "mean", "median", "min", "max", "spread" (max - min)
of a list, ["pluck", LIST, KEY] (the KEY of each object in LIST) and ["first", OP, ...] (the first that is not null). So a mean, a difference or a ratio is computed from the
figures it comes from instead of being typed beside them. A row that gives a computed field's value itself keeps
it (where only the rounded figure of a lost run is known; its report says so).

A field may also be a reference to a figure of another report: {"ref": "OTHER.json", "table": T, "where":
{FIELD: VALUE}, "field": F} (the one row of that table whose fields match, computed fields included), or {"ref":
"OTHER.json", "pointer": "/a/b/0"} (a value of that file, JSON-pointer syntax). References are resolved before the
computed fields; FIELD_link is then the link from the page to OTHER.md, for templates such as
"[{gain:+.2f}]({gain_link})".
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- table:(?P<name>[^ ]+) -->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)
ALIGN = {"left": "---", "right": "---:", "center": ":---:"}


class TableError(Exception):
    """A marker, a JSON table or a template that cannot be rendered; the message names the page or file."""


def pages(root: Path = ROOT) -> list[Path]:
    """The Markdown files whose tables are generated: README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _evaluate(op: Any, row: dict[str, Any]) -> Any:
    """The value of a computed field (see the module docstring); None when an operand is missing."""
    if isinstance(op, str):
        return row.get(op)
    if isinstance(op, (int, float)):
        return op
    name, *args = op
    if name == "pluck":
        items = _evaluate(args[0], row)
        return None if items is None else [item.get(args[1]) for item in items]
    values = [_evaluate(a, row) for a in args]
    if name == "first":
        return next((v for v in values if v is not None), None)
    if any(v is None for v in values) or any(isinstance(v, list) and None in v for v in values):
        return None
    if name in ("+", "-", "*", "/"):
        return _arithmetic(name, *values)
    if name in ("mean", "median", "min", "max", "spread"):
        (xs,) = values
        return {"mean": statistics.fmean, "median": statistics.median, "min": min, "max": max,
                "spread": lambda v: max(v) - min(v)}[name](xs)
    raise TableError(f"unknown operator {name!r} in {op!r}")


def _arithmetic(name: str, a: Any, b: Any) -> Any:
    """a (op) b, element by element where either is a list (a number goes with every element)."""
    if isinstance(a, list) or isinstance(b, list):
        n = len(a) if isinstance(a, list) else len(b)
        xs = a if isinstance(a, list) else [a] * n
        ys = b if isinstance(b, list) else [b] * n
        return [_arithmetic(name, x, y) for x, y in zip(xs, ys, strict=True)]
    if name == "/" and b == 0:
        return None
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[name]


class _Formatter(string.Formatter):
    """str.format that reports a missing or null field instead of raising, so the cell stays empty."""

    class Missing(Exception):
        pass

    def get_value(self, key: int | str, args: Any, kwargs: dict[str, Any]) -> Any:
        value = kwargs.get(key) if isinstance(key, str) else None
        if value is None:
            raise self.Missing(key)
        return value

    def get_field(self, field_name: str, args: Any, kwargs: dict[str, Any]) -> Any:
        obj, first = super().get_field(field_name, args, kwargs)
        if obj is None:
            raise self.Missing(field_name)
        return obj, first


_FORMAT = _Formatter()


class Renderer:
    """Renders tables from JSON files, caching each file and each table's rows (computed fields included)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._files: dict[Path, dict[str, Any]] = {}
        self._rows: dict[tuple[Path, str], list[tuple[dict[str, Any], dict[str, Path]]]] = {}

    def load(self, path: Path) -> dict[str, Any]:
        path = path.resolve()
        if path not in self._files:
            if not path.is_file():
                raise TableError(f"{path}: no such JSON file")
            try:
                self._files[path] = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise TableError(f"{path}:{e.lineno}:{e.colno}: {e.msg}") from None
        return self._files[path]

    def spec(self, path: Path, name: str) -> dict[str, Any]:
        tables = self.load(path).get("tables", {})
        if name not in tables:
            raise TableError(f"{path}: no table {name!r} (it has {', '.join(sorted(tables)) or 'none'})")
        return tables[name]

    def rows(self, path: Path, name: str, page: Path) -> list[dict[str, Any]]:
        """The table's rows: defaults, references resolved (FIELD_link relative to `page`), computed fields."""
        key = (path.resolve(), name)
        if key not in self._rows:
            self._rows[key] = []  # a table that refers to itself stops here instead of recursing
            spec = self.spec(path, name)
            rows = []
            for raw in spec["rows"] if "rows" in spec else self.spec(path, spec["rows_of"])["rows"]:
                row = {**spec.get("defaults", {}), **raw}
                targets = {}
                for field, value in list(row.items()):
                    if isinstance(value, dict) and "ref" in value:
                        row[field], targets[field] = self.resolve(path, value)
                for field, op in spec.get("computed", {}).items():
                    if field not in raw:  # a row may give the figure itself where only a rounded one is known
                        row[field] = _evaluate(op, row)
                rows.append((row, targets))
            self._rows[key] = rows
        out = []
        for row, targets in self._rows[key]:
            links = {f"{field}_link": os.path.relpath(target.with_suffix(".md"), page.parent)
                     for field, target in targets.items()}
            out.append({**row, **links})
        return out

    def resolve(self, path: Path, ref: dict[str, Any]) -> tuple[Any, Path]:
        """The figure a reference names, and the JSON file it comes from."""
        target = (path.parent / ref["ref"]).resolve()
        if "pointer" in ref:
            value: Any = self.load(target)
            for part in ref["pointer"].strip("/").split("/"):
                value = value[int(part)] if isinstance(value, list) else value[part]
            return value, target
        matches = [r for r in self.rows(target, ref["table"], target)
                   if all(r.get(k) == v for k, v in ref.get("where", {}).items())]
        if len(matches) != 1:
            raise TableError(f"{path}: reference {ref} matches {len(matches)} rows of {target.name}, not one")
        return matches[0].get(ref["field"]), target

    def render(self, path: Path, name: str, page: Path) -> str:
        """The Markdown table NAME of the JSON file at `path`, as shown on `page`."""
        spec = self.spec(path, name)
        columns = spec["columns"]
        lines = ["| " + " | ".join(c["title"] for c in columns) + " |",
                 "|" + "|".join(f" {ALIGN[c.get('align', 'left')]} " for c in columns) + "|"]
        keys = {c.get("key", c["title"]) for c in columns}
        for row in self.rows(path, name, page):
            stray = set(row.get("_templates", {})) - keys
            if stray:  # a template no column uses would leave its cell silently empty
                raise TableError(f"{path}: table {name!r}: a row's _templates names {sorted(stray)}, which no column "
                                 f"has as its key (keys: {sorted(keys)})")
            bold = set(row.get("_bold", []))
            cells = []
            for c in columns:
                key = c.get("key", c["title"])
                try:
                    cell = _FORMAT.format(row.get("_templates", {}).get(key, c["template"]), **row)
                except _Formatter.Missing:
                    cell = ""
                except (ValueError, TypeError, IndexError, KeyError) as e:
                    raise TableError(f"{path}: table {name!r}, column {c['title']!r}: {e!r}") from None
                if cell and key in bold:
                    cell = f"**{cell}**"
                if cell and row.get("_italic"):
                    cell = f"*{cell}*"
                cells.append(cell)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


def regenerate(page: Path, text: str, renderer: Renderer) -> str:
    """The page's text with every marked table rendered afresh."""

    def table(match: re.Match[str]) -> str:
        name = match["name"]
        file, _, table_name = name.rpartition("#") if "#" in name else (None, "", name)
        path = (page.parent / file) if file else page.with_suffix(".json")
        try:
            body = renderer.render(path, table_name, page)
        except TableError as e:
            raise TableError(f"{page}: <!-- table:{name} -->: {e}") from None
        return f"<!-- table:{name} -->\n{body}<!-- /table -->"

    return MARKER.sub(table, text)


def differences(root: Path = ROOT) -> Iterator[tuple[Path, str, str]]:
    """(page, current text, generated text) for every page whose tables are not what the JSON gives."""
    renderer = Renderer(root)
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        new = regenerate(page, text, renderer)
        if new != text:
            yield page, text, new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if any generated table differs")
    args = p.parse_args(argv)
    try:
        changed = list(differences())
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for page, old, new in changed:
        rel = page.relative_to(ROOT)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       f"{rel} (as written)", f"{rel} (from its JSON)"))
        else:
            tmp = page.with_name(f".{page.name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            os.replace(tmp, page)
            print(f"rewrote {rel}")
    if args.check and changed:
        print(f"\n{len(changed)} page(s) hold tables that differ from their JSON: edit the JSON, then run "
              "`python3 docs/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
