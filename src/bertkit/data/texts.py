"""Texts to embed, read lazily one row at a time: plain text (one text per line, `-` for standard input), JSON
lines, CSV/TSV or Parquet with a text field and an optional id field. What `bertkit embed` reads: a file of any
size streams through in constant memory, and every bad row is named by file and line (or row, for Parquet).

A plain-text file's rows are those of `str.splitlines()` on its text (what `bertkit embed` always did: a form feed
or U+2028 inside a line ends a row too), an empty line kept as the empty text so row i stays line i.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bertkit.data.corpus import json_line
from bertkit.errors import ConfigError, data_error

FORMATS = ("auto", "text", "jsonl", "csv", "tsv", "parquet")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
PARQUET_BATCH_ROWS = 4096  # rows per Parquet batch read: a few MB of text at most


@dataclass(frozen=True)
class TextRow:
    """One text to embed: its id (the id field's value, else the row number), the text, and where it was read."""

    id: Any
    text: str
    line: int
    """1-based line of the file (a Parquet file's row)."""


def resolve_format(path: str, fmt: str = "auto") -> str:
    """The input format: `fmt` itself, or from the file's suffix under 'auto' (anything unknown, and stdin, is text)."""
    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt != "auto":
        return fmt
    return "text" if path == "-" else _BY_SUFFIX.get(Path(path).suffix.lower(), "text")


def read_texts(path: str, fmt: str = "auto", text_field: str = "text", id_field: str | None = None) -> Iterator[TextRow]:
    """Every row of `path` in order, read lazily; a DataError naming the file and line for a row without its text
    (or id) field, a text that is not a string, bytes that are not UTF-8."""
    fmt = resolve_format(path, fmt)
    if fmt == "text" and id_field:
        raise ConfigError(f"{path}: a plain-text input has no fields; --id-field needs JSONL, CSV, TSV or Parquet")
    if fmt == "parquet":
        yield from _parquet_rows(path, text_field, id_field)
        return
    with _open_text(path) as f:
        name = "<stdin>" if path == "-" else path
        rows = {"text": _text_rows, "jsonl": _jsonl_rows}.get(fmt, _csv_rows)
        try:
            yield from rows(f, name, fmt, text_field, id_field)
        except UnicodeDecodeError as e:
            raise data_error(name, None, f"not UTF-8 text ({e})") from None


def count_rows(path: str, fmt: str = "auto", text_field: str = "text", id_field: str | None = None) -> int:
    """How many rows `read_texts` yields (a Parquet file's from its metadata; the others by reading it once, in
    constant memory): the total a progress report and a torchrun split need."""
    if resolve_format(path, fmt) == "parquet":
        return _parquet_file(path).metadata.num_rows
    return sum(1 for _ in read_texts(path, fmt, text_field, id_field))


def read_lines(path: str) -> list[str]:
    """Every line of a plain-text input (`-`: stdin) as a list, for the verbs that need them all at once
    (extract-features): an empty file is a DataError, empty lines are kept as the empty text with a warning."""
    name = "<stdin>" if path == "-" else path
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


def _open_text(path: str) -> TextIO:
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline=None)
    try:
        return open(path, encoding="utf-8", newline=None if not path.endswith((".csv", ".tsv")) else "")
    except FileNotFoundError:
        raise data_error(path, None, "no such file") from None
    except IsADirectoryError:
        raise data_error(path, None, "is a folder; expected a text file") from None


def _text_rows(f: TextIO, name: str, fmt: str, text_field: str, id_field: str | None) -> Iterator[TextRow]:
    number = 0
    for physical in f:
        for text in physical.splitlines() or [""]:
            number += 1
            yield TextRow(number, text, number)


def _field(record: dict[str, Any], key: str, name: str, line: int, role: str) -> Any:
    """record[key], or the DataError naming the file, the line, the missing field and the fields there are."""
    if key not in record:
        found = ", ".join(map(repr, list(record)[:10])) or "none"
        raise data_error(name, line, f"no {role} field {key!r} (fields found: {found}); expected it in every row "
                         f"(--{role}-field names another)")
    return record[key]


def _row(record: dict[str, Any], name: str, line: int, text_field: str, id_field: str | None) -> TextRow:
    text = _field(record, text_field, name, line, "text")
    if not isinstance(text, str):
        raise data_error(name, line, f"field {text_field!r} is {json.dumps(text)[:40]}; expected a string")
    ident = _field(record, id_field, name, line, "id") if id_field else line
    if ident is None or (id_field and not isinstance(ident, (str, int))):
        raise data_error(name, line, f"field {id_field!r} is {json.dumps(ident)[:40]}; expected a string or an "
                         "integer id")
    return TextRow(ident, text, line)


def _jsonl_rows(f: TextIO, name: str, fmt: str, text_field: str, id_field: str | None) -> Iterator[TextRow]:
    for line, raw in enumerate(f, start=1):
        if not raw.strip():
            continue
        record = json_line(raw, name, line)
        if not isinstance(record, dict):
            raise data_error(name, line, f"expected a JSON object, found {type(record).__name__}")
        yield _row(record, name, line, text_field, id_field)


def _csv_rows(f: TextIO, name: str, fmt: str, text_field: str, id_field: str | None) -> Iterator[TextRow]:
    reader = csv.DictReader(f, delimiter="\t" if fmt == "tsv" else ",")
    if reader.fieldnames is None:
        return
    for record in reader:
        line = reader.line_num
        missing = [k for k, v in record.items() if v is None]
        if missing and (text_field in missing or id_field in missing):
            raise data_error(name, line, f"{len(record) - len(missing)} columns, the header has "
                             f"{len(reader.fieldnames)}; expected a value for every column")
        yield _row(record, name, line, text_field, id_field)


def _parquet_file(path: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow: pip install 'bertkit[index]' ({e})") from None
    if not Path(path).is_file():
        raise data_error(path, None, "no such file")
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own errors: not a Parquet file, a broken footer
        raise data_error(path, None, f"not a Parquet file ({e})") from None


def _parquet_rows(path: str, text_field: str, id_field: str | None) -> Iterator[TextRow]:
    file = _parquet_file(path)
    names = file.schema_arrow.names
    for key, role in ((text_field, "text"), (id_field, "id")):
        if key and key not in names:
            raise data_error(path, None, f"no {role} column {key!r} (columns: {', '.join(names[:10])}); "
                             f"--{role}-field names another")
    columns = [text_field] + ([id_field] if id_field and id_field != text_field else [])
    row = 0
    for batch in file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        data = batch.to_pydict()
        for i in range(batch.num_rows):
            row += 1
            yield _row({k: data[k][i] for k in columns}, f"{path} row", row, text_field, id_field)


__all__ = ["FORMATS", "TextRow", "count_rows", "read_texts", "resolve_format"]
