"""Texts to embed, read lazily one row at a time: plain text (one text per line, `-` for standard input), JSON
lines, CSV/TSV or Parquet with a text field and an optional id field. What `bertkit embed` reads: a file of any
size streams through in constant memory, and every bad row is named by file and line (or row, for Parquet). The
files are read by `bertkit.data.tables`, under the rules the fine-tuning readers follow too (encodings, quoting,
field counts, header names, JSON objects, text types).

A plain-text file's rows are those of `str.splitlines()` on its text (what `bertkit embed` always did: a form feed
or U+2028 inside a line ends a row too), an empty line kept as the empty text so row i stays line i.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bertkit.data.tables import (STDIN, check_text, format_of, iter_lines, iter_parquet, iter_records, parquet_file,
                                 shown, source_name)
from bertkit.errors import ConfigError, data_error

FORMATS = ("auto", "text", "jsonl", "csv", "tsv", "parquet")


@dataclass(frozen=True)
class TextRow:
    """One text to embed: its id (the id field's value, else the row number), the text, and where it was read."""

    id: Any
    text: str
    line: int
    """1-based line of the file (a Parquet file's row)."""


def resolve_format(path: str, fmt: str = "auto") -> str:
    """The input format: `fmt` itself, or from the file's suffix (before any .gz) under 'auto' (anything unknown, and
    stdin, is text)."""
    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt != "auto":
        return fmt
    return "text" if path == STDIN else format_of(path) or "text"


def read_texts(path: str, fmt: str = "auto", text_field: str = "text",
               id_field: str | None = None) -> Iterator[TextRow]:
    """Every row of `path` in order, read lazily; a DataError naming the file and line for a row without its text
    (or id) field, a text that is not a string, and whatever `bertkit.data.tables` refuses."""
    fmt = resolve_format(path, fmt)
    if fmt == "text" and id_field:
        raise ConfigError(f"{path}: a plain-text input has no fields; --id-field needs JSONL, CSV, TSV or Parquet")
    if fmt == "parquet":
        file = _parquet_checked(path, text_field, id_field)
        columns = [text_field] + ([id_field] if id_field and id_field != text_field else [])
        for row, record in iter_parquet(file, path, columns):
            yield _row(record, f"{path} row", row, text_field, id_field)
    elif fmt == "text":
        number = 0
        for _, physical in iter_lines(path):
            for text in physical.splitlines() or [""]:
                number += 1
                yield TextRow(number, text, number)
    else:
        for line, record in iter_records(path, fmt):
            yield _row(record, source_name(path), line, text_field, id_field)


def count_rows(path: str, fmt: str = "auto", text_field: str = "text", id_field: str | None = None) -> int:
    """How many rows `read_texts` yields (a Parquet file's from its metadata; the others by reading it once, in
    constant memory): the total a progress report and a torchrun split need."""
    if resolve_format(path, fmt) == "parquet":
        return _parquet_checked(path, text_field, id_field).metadata.num_rows
    return sum(1 for _ in read_texts(path, fmt, text_field, id_field))


def read_lines(path: str) -> list[str]:
    """Every line of a plain-text input (`-`: stdin) as a list, for the verbs that need them all at once
    (extract-features): an empty file is a DataError, empty lines are kept as the empty text with a warning."""
    name = source_name(path)
    lines = [row.text for row in read_texts(path, "text")]
    if not lines:
        raise data_error(name, None, "no text")
    blank = [number for number, line in enumerate(lines, start=1) if not line.strip()]
    if blank:
        print(blank_lines_warning(name, len(blank), blank[:10]), file=sys.stderr)
    return lines


def blank_lines_warning(name: str, count: int, shown: list[int]) -> str:
    """The warning for `count` empty lines of input `name` (the first ones' numbers `shown`), each kept as the
    empty text so that output row i stays input line i."""
    listed = ", ".join(map(str, shown)) + (f" and {count - len(shown)} more" if count > len(shown) else "")
    return f"warning: {name}: {count} empty line(s) ({listed}), each kept as the empty text (one output per line)"


def _field(record: dict[str, Any], key: str, name: str, line: int, role: str) -> Any:
    """record[key], or the DataError naming the file, the line, the missing field and the fields there are."""
    if key not in record:
        found = ", ".join(map(repr, list(record)[:10])) or "none"
        raise data_error(name, line, f"no {role} field {key!r} (fields found: {found}); expected it in every row "
                         f"(--{role}-field names another)")
    return record[key]


def _row(record: dict[str, Any], name: str, line: int, text_field: str, id_field: str | None) -> TextRow:
    text = check_text(name, line, text_field, _field(record, text_field, name, line, "text"))
    ident = _field(record, id_field, name, line, "id") if id_field else line
    if ident is None or (id_field and (isinstance(ident, bool) or not isinstance(ident, (str, int)))):
        raise data_error(name, line, f"field {id_field!r} is {shown(ident)}; expected a string or an integer id")
    return TextRow(ident, text, line)


def _parquet_checked(path: str, text_field: str, id_field: str | None) -> Any:
    """The opened Parquet file (`parquet_file`: unique column names, a string text column), with its text and id
    columns there."""
    file = parquet_file(path, [text_field])
    names = file.schema_arrow.names
    for key, role in ((text_field, "text"), (id_field, "id")):
        if key and key not in names:
            raise data_error(path, None, f"no {role} column {key!r} (columns: {', '.join(names[:10])}); "
                             f"--{role}-field names another")
    return file


__all__ = ["FORMATS", "TextRow", "count_rows", "read_texts", "resolve_format"]
