"""The one reader of data files with rows: TSV, CSV, JSON lines (and whole JSON documents) and Parquet, for every
verb that reads them: fine-tuning, evaluate and predict through the tasks' readers, `bertkit embed` through
`bertkit.data.texts`. Every rule below is checked here, once, row by row as the file streams by (a file of
millions of rows is never held whole), and a row that breaks one is a DataError naming the file and line (a
Parquet file's row) and, where one is at fault, the column:

- Bytes: UTF-8 (a line that is not is named with the column of its first bad byte); a byte-order mark at the start
  is dropped; a name ending in .gz is read through gzip, its format being the suffix before (`train.csv.gz` is
  CSV). A line ends at \\n or \\r\\n.
- TSV: a row is one line split on every tab, with no quoting, as GLUE's files need (they hold unescaped quotes):
  a quote is text, and a text cannot hold a tab or a line break.
- CSV: RFC 4180: a field holding a comma, a quote or a line break is quoted ("" for a quote inside it) and may span
  lines (the row is named by its first line); a quote left open, or text after a closing quote, is an error.
- Rows of nothing but whitespace and separators are skipped.
- Every row has as many fields as the header (as the first row, in a file without one): a short or a long row is an
  error giving both counts and the likely cause (`field_count_error`).
- A header names each column once, and so does a Parquet schema: which of two same-named columns holds the value
  would be a guess.
- JSON: each non-blank line of a JSONL file is one object; a key given twice in one object, and a string holding
  half of a UTF-16 surrogate pair (an escape such as \\ud800, which no UTF-8 file can hold) are errors.
- Texts: a text field holds a string (`check_text`); a Parquet text column has a string type, not binary.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import json.decoder
import json.scanner
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from bertkit.errors import ConfigError, DataError, data_error

STDIN = "-"
FORMAT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
PARQUET_BATCH_ROWS = 4096  # rows per Parquet batch read: a few MB of text at most
_BOM = "\ufeff"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

PathLike = str | os.PathLike


def source_name(path: PathLike) -> str:
    """How messages name an input: its path, or <stdin> for `-`."""
    return "<stdin>" if str(path) == STDIN else str(path)


def format_of(path: PathLike) -> str | None:
    """The format a file's name says, from the suffix before any .gz: jsonl, csv, tsv or parquet (None: another)."""
    return FORMAT_SUFFIXES.get(Path(str(path).lower().removesuffix(".gz")).suffix)


def table_delimiter(path: PathLike) -> str:
    """The field separator of a table file, from its name: CSV -> ',', anything else -> tab."""
    return "," if format_of(path) == "csv" else "\t"


# --- lines -----------------------------------------------------------------------------------------------------
def _open_binary(path: PathLike) -> IO[bytes]:
    if str(path) == STDIN:
        return contextlib.nullcontext(sys.stdin.buffer)  # type: ignore[return-value]  (left open: not ours)
    if Path(path).is_dir():
        raise data_error(path, None, "is a folder; expected a data file")
    try:
        return gzip.open(path, "rb") if str(path).lower().endswith(".gz") else open(path, "rb")
    except FileNotFoundError:
        raise data_error(path, None, "no such file") from None
    except OSError as e:
        raise data_error(path, None, f"cannot be read ({e.strerror or e})") from None


def iter_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(1-based number, text) of every line of a file (`-`: standard input), each with its line end: UTF-8, a
    byte-order mark dropped, gzip-compressed when the name ends in .gz. Lines are split at \\n only (a form feed or
    U+2028 inside a text is text), and decoded one by one, so a byte that is not UTF-8 is named by line and column."""
    name = source_name(path)
    with _open_binary(path) as f:
        lines = iter(f)
        number = 0
        while True:
            try:
                raw = next(lines, None)
            except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; a cut-off file raises EOFError
                kind = "gzip file" if name.lower().endswith(".gz") else "file"
                raise data_error(name, number + 1, f"not a readable {kind} ({e})") from None
            if raw is None:
                return
            number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                column = len(raw[:e.start].decode("utf-8", "replace")) + 1
                raise data_error(name, number, f"not UTF-8 text: byte 0x{raw[e.start]:02x} at column {column} "
                                 "(save the file as UTF-8)") from None
            yield number, text[1:] if number == 1 and text.startswith(_BOM) else text


def read_text(path: PathLike) -> str:
    """A whole data file's text, read as `iter_lines` reads it (a missing file, bytes that are not UTF-8 or a broken
    gzip file are a DataError naming the file and line)."""
    return "".join(text for _, text in iter_lines(path))


# --- TSV and CSV -----------------------------------------------------------------------------------------------
def iter_table(path: PathLike, header: bool = True, delimiter: str | None = None) -> Iterator[tuple[int, list[str]]]:
    """Every non-blank row of a TSV or CSV file (`-`: standard input) as (its first line, its fields), the header
    first when `header`: rows stream by under the rules of the module docstring (field counts, header names,
    quoting, encoding). The delimiter defaults from the name: CSV -> ',', anything else -> tab."""
    name = source_name(path)
    delimiter = delimiter or table_delimiter(path)
    # TSV: a row is a line split on every tab, no quoting
    rows = (((number, text.rstrip("\r\n").split("\t")) for number, text in iter_lines(path) if text.strip())
            if delimiter == "\t" else _csv_rows(path, name, delimiter))
    expected: int | None = None
    for line, fields in rows:
        if expected is None:
            expected = len(fields)
            if header:
                check_unique_names(name, line, fields)
        elif len(fields) != expected:
            raise field_count_error(name, line, len(fields), expected, delimiter, header)
        yield line, fields


def read_table(path: PathLike, header: bool = True, delimiter: str | None = None) -> list[tuple[int, list[str]]]:
    """`iter_table` as a list: a task's file, read whole."""
    return list(iter_table(path, header, delimiter))


def first_row(path: PathLike, delimiter: str | None = None) -> tuple[int, list[str]] | None:
    """A table's first non-blank row (line, fields), or None for an empty file: what tells a header from data."""
    rows = iter_table(path, header=False, delimiter=delimiter)
    try:
        return next(rows, None)
    finally:
        rows.close()


def _csv_rows(path: PathLike, name: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    # Line ends kept: a quoted field spanning lines keeps its line break. strict: a quote left open would otherwise
    # swallow the rest of the file into one field, and text after a closing quote would be glued on.
    reader = csv.reader((text for _, text in iter_lines(path)), delimiter=delimiter, strict=True)
    first = 1  # the row's first line (reader.line_num is its last, for a quoted text spanning lines)
    while True:
        try:
            row = next(reader, None)
        except csv.Error as e:
            problem = ("a quoted field opened in this row is never closed" if "unexpected end" in str(e)
                       else f"malformed CSV ({e}, on line {reader.line_num})")
            raise data_error(name, first, f"{problem}; RFC 4180 quotes a field holding the delimiter, a quote or "
                             'a line break, and writes a quote inside it twice ("")') from None
        if row is None:
            return
        if any(cell.strip() for cell in row):
            yield first, row
        first = reader.line_num + 1


def field_count_error(path: PathLike, line: int, found: int, expected: int, delimiter: str | None = None,
                      header: bool = True) -> DataError:
    """The DataError for a row of `found` fields under a header (or first row) of `expected`, with the likely cause
    for the format: TSV has no quoting (a tab or a line break inside a text splits the row), CSV quotes fields (an
    unquoted comma adds one)."""
    against = "the header has" if header else "the first row has"
    if (delimiter or table_delimiter(path)) == "\t":
        kind = "tab-separated"
        hint = ("a tab inside a text?" if found > expected else "a line break inside a text? A TSV row is one line "
                "and has no quoting: a text spanning lines needs a CSV file with the text in double quotes")
    else:
        kind = "comma-separated" if delimiter in (None, ",") else f"{delimiter!r}-separated"
        hint = ("an unquoted comma inside a text? Put a field that holds commas in double quotes"
                if found > expected else "a missing field, or a comma-separated row cut short")
    return data_error(path, line, f"{found} {kind} fields, {against} {expected} ({hint})")


def check_unique_names(path: PathLike, line: int | None, names: Sequence[str], where: str = "the header") -> None:
    """DataError naming the column and its positions if a header (or a Parquet schema) names a column twice."""
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        positions.setdefault(name, []).append(i + 1)
    for name, at in positions.items():
        if len(at) > 1:
            raise data_error(path, line, f"column {name!r} appears {len(at)} times in {where} (fields "
                             f"{', '.join(map(str, at))}); rename or remove all but one")


# --- JSON ------------------------------------------------------------------------------------------------------
class _Refused(ValueError):
    """A JSON object the reader refuses: a key given twice, a string holding half a surrogate pair."""


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key given twice is an error (json.loads would keep the last one silently)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return obj


def _checked_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook for a text holding a surrogate escape: the keys checked, and every string too."""
    obj = _unique_object(pairs)
    for key, value in pairs:
        _check_strings(key, key)
        _check_strings(key, value)
    return obj


def _check_strings(key: str, value: Any) -> None:
    """_Refused if `value` (or a string in a list of it) holds a lone surrogate: json.loads turns the escape \\ud800
    into one, and writing it as UTF-8 (a prediction, an embeddings shard) would fail after the work is done."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise _Refused(f"field {key!r} holds \\u{ord(value[e.start]):04x} at character {e.start + 1}: half of "
                               "a UTF-16 surrogate pair without its other half, which is no text") from None
    elif isinstance(value, list):
        for item in value:
            _check_strings(key, item)


def parse_json(text: str, path: PathLike, line: int | None = None) -> Any:
    """The JSON value of `text`, one line of a JSONL file (`line`) or a whole document (line None), with every object
    checked (no key twice, no lone surrogate); else the DataError naming the file, line and column."""
    # A lone surrogate can only come from a \uD800-\uDFFF escape (UTF-8 cannot hold one): only a text with such an
    # escape needs its strings checked, which costs a Python call per string.
    hook = _checked_object if _SURROGATE_ESCAPE.search(text) else _unique_object
    try:
        return json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as e:
        where, column = (line, e.colno) if line is not None else (e.lineno, e.colno)
        raise data_error(path, where, f"not valid JSON ({e.msg} at column {column})") from None
    except _Refused as e:
        offset = _refused_at(text)
        start = text.rfind("\n", 0, offset) + 1
        where = line if line is not None else text.count("\n", 0, offset) + 1
        raise data_error(path, where, f"{e} (the object at column {offset - start + 1})") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise data_error(path, line, f"not valid JSON ({e})") from None


def _refused_at(text: str) -> int:
    """Where the object `_checked_object` refuses starts: a second, pure-Python parse that notes where each object
    begins, run only after an error (the C parser, which cannot say, stays the normal path)."""
    starts: list[int] = []

    def parse_object(s_and_end: tuple[str, int], *args: Any) -> Any:
        starts.append(s_and_end[1] - 1)
        value = json.decoder.JSONObject(s_and_end, *args)
        starts.pop()
        return value

    decoder = json.JSONDecoder(object_pairs_hook=_checked_object)
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
    except _Refused:
        return starts[-1] if starts else 0
    return 0


def iter_jsonl(path: PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) for every non-blank line of a JSON-lines file (`-`: standard input), streamed; DataError naming
    the line of one that is not a valid, checked JSON object."""
    name = source_name(path)
    for number, text in iter_lines(path):
        if text.strip():
            obj = parse_json(text, name, number)
            if not isinstance(obj, dict):
                raise data_error(name, number, f"expected a JSON object, found {type(obj).__name__}")
            yield number, obj


def read_jsonl(path: PathLike) -> list[tuple[int, dict[str, Any]]]:
    """`iter_jsonl` as a list: a task's file, read whole."""
    return list(iter_jsonl(path))


def read_json(path: PathLike) -> Any:
    """A whole JSON document (a SQuAD file), read and checked as JSONL lines are."""
    return parse_json(read_text(path), source_name(path))


# --- fields ----------------------------------------------------------------------------------------------------
def shown(value: Any) -> str:
    """A value for an error message: its repr, cut short (a 401-digit number is not worth printing whole)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def require_field(path: PathLike, line: int | None, obj: dict[str, Any], name: str) -> Any:
    """obj[name], or a DataError naming the file, line and the missing field."""
    if name not in obj:
        raise data_error(path, line, f"missing field {name!r} (fields: {', '.join(map(str, obj)) or 'none'})")
    return obj[name]


def check_text(path: PathLike, line: int | None, field: str, value: Any) -> str:
    """`value` if it is a text (a str: the readers let no undecodable one through), else the DataError naming the
    file, line and field: a number, a list, bytes or null would be read as their Python repr."""
    if not isinstance(value, str):
        raise data_error(path, line, f"field {field!r} is {shown(value)}; expected a string")
    return value


def require_text(path: PathLike, line: int | None, obj: dict[str, Any], name: str) -> str:
    """obj[name] if it is a text; else the DataError naming the file, line and field."""
    return check_text(path, line, name, require_field(path, line, obj, name))


# --- Parquet ---------------------------------------------------------------------------------------------------
def parquet_file(path: PathLike, text_columns: Sequence[str] = ()) -> Any:
    """An opened `pyarrow.parquet.ParquetFile` whose schema names each column once and whose `text_columns` (those
    present) hold strings; DataError naming the file otherwise."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow: pip install 'bertkit[index]' ({e})") from None
    if not Path(path).is_file():
        raise data_error(path, None, "no such file")
    try:
        file = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own errors: not a Parquet file, a broken footer
        raise data_error(path, None, f"not a Parquet file ({e})") from None
    schema = file.schema_arrow
    check_unique_names(path, None, schema.names, "the schema")
    for name in text_columns:
        if name in schema.names:
            kind = schema.field(name).type
            value = kind.value_type if pa.types.is_dictionary(kind) else kind
            if not (pa.types.is_string(value) or pa.types.is_large_string(value)
                    or getattr(pa.types, "is_string_view", lambda _: False)(value)):
                raise data_error(path, None, f"column {name!r} holds {kind} values; a text column holds strings "
                                 "(UTF-8 text)")
    return file


def iter_parquet(file: Any, path: PathLike, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row, {column: value}) for every row of an opened Parquet file (`parquet_file`), a batch at a time."""
    import pyarrow as pa

    row = 0
    batches = file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(columns))
    while True:
        try:
            batch = next(batches, None)
            data = batch.to_pydict() if batch is not None else None
        except (OSError, pa.ArrowException, UnicodeDecodeError) as e:  # a cut-off file, a string that is not UTF-8
            raise data_error(f"{path} row", row + 1, f"cannot be read ({e})") from None
        if data is None:
            return
        for i in range(batch.num_rows):
            row += 1
            yield row, {k: data[k][i] for k in columns}


# --- records ---------------------------------------------------------------------------------------------------
def iter_records(path: PathLike, fmt: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, {field: value}) for every row of a file of named fields, streamed: a JSONL file's objects, a TSV or
    CSV file's rows under its header, a Parquet file's rows (its row number as the line). `fmt` (jsonl, csv, tsv,
    parquet) defaults to the name's suffix (`format_of`); any other file is a DataError saying what is read."""
    fmt = fmt or format_of(path)
    if fmt == "jsonl":
        yield from iter_jsonl(path)
    elif fmt in ("csv", "tsv"):
        rows = iter_table(path, header=True, delimiter="\t" if fmt == "tsv" else ",")
        _, header = next(rows, (0, None))
        yield from ((line, dict(zip(header, fields))) for line, fields in rows)  # each as long as the header
    elif fmt == "parquet":
        file = parquet_file(path)
        yield from iter_parquet(file, path, file.schema_arrow.names)
    else:
        raise data_error(path, None, "expected a file of named fields: JSON lines (.jsonl), CSV (.csv) or TSV (.tsv) "
                         "with a header, or Parquet (.parquet), by the name's suffix")


__all__ = ["check_text", "check_unique_names", "field_count_error", "first_row", "format_of", "iter_jsonl",
           "iter_lines", "iter_parquet", "iter_records", "iter_table", "parquet_file", "parse_json", "read_json",
           "read_jsonl", "read_table", "read_text", "require_field", "require_text", "shown", "table_delimiter"]
