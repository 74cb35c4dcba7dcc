"""One reader for every verb that reads rows (`bertkit.data.tables`): field counts, header names, encodings, JSON
objects and text types are checked once, so every caller (the classification, NER, QA and multiple-choice readers of
fine-tuning, evaluate and predict; `bertkit embed`'s read_texts and count_rows) refuses the same defect with the same
DataError naming the file and line (and column where one is at fault): never a traceback, never a silent accept.

The 2026-11-28 attack report's S5 (an unquoted comma cut an embed CSV text), S6 and N8 (a duplicated header name, the
last column embedded), C2 (short and long rows), T5 (a JSON lone surrogate failed after the work; a Parquet binary
column crashed the error message). The inputs are generated: every format times every defect, random tables with a
defect at a random row, random texts written validly and read back."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bertkit.cli import main
from bertkit.data.texts import count_rows, read_texts
from bertkit.errors import DataError
from bertkit.jobs import embed as embed_job
from bertkit.tasks import get_task

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # a test extra; without it the generated-table tests skip, the exhaustive loops still run
    st = None

CLASSIFY = get_task("classification")
NAMED = {"text_column": "text", "label_column": "label"}
Reader = Callable[[Path], Any]


def classification(path: Path) -> Any:
    return CLASSIFY.read(path, CLASSIFY.settings(NAMED))


def embed_rows(path: Path) -> Any:
    return [(row.id, row.text) for row in read_texts(str(path))]


def embed_count(path: Path) -> Any:
    return count_rows(str(path))


def multiple_choice(path: Path) -> Any:
    task = get_task("multiple-choice")
    return task.read(path, task.settings())


def qa(path: Path) -> Any:
    task = get_task("qa")
    return task.read(path, task.settings())


def ner(path: Path) -> Any:
    task = get_task("ner")
    return task.read(path, task.settings())


TABLE_READERS: dict[str, Reader] = {"classification": classification, "embed": embed_rows, "embed count": embed_count}
# JSONL readers, each with a record maker: (row number, text) -> the object, and the field the text goes in
JSONL_READERS: dict[str, tuple[Reader, Callable[[int, Any], dict[str, Any]], str]] = {
    "classification": (classification, lambda i, t: {"text": t, "label": i % 2}, "text"),
    "multiple-choice": (multiple_choice, lambda i, t: {"context": t, "choices": ["yes.", "no."], "label": i % 2},
                        "context"),
    "embed": (embed_rows, lambda i, t: {"text": t}, "text"),
    "embed count": (embed_count, lambda i, t: {"text": t}, "text"),
}


def outcome(read: Reader, path: Path, pattern: str) -> str | None:
    """None if reading `path` raises a DataError whose message matches `pattern`; else what happened instead."""
    try:
        result = read(path)
    except DataError as e:
        return None if re.search(pattern, str(e)) else f"DataError {str(e)[:300]!r} does not match {pattern!r}"
    except Exception as e:  # noqa: BLE001 (a traceback is the finding)
        return f"{type(e).__name__}: {str(e)[:200]} (a traceback, not a DataError)"
    return f"accepted silently: {str(result)[:200]}"


def check_all(cases: list[tuple[str, Reader, Path, str]]) -> None:
    """Every (label, reader, file, pattern) refused as the pattern says; the failures listed together."""
    failures = [f"{label}: {problem}" for label, read, path, pattern in cases
                if (problem := outcome(read, path, pattern)) is not None]
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures)


def write(path: Path, text: str | bytes, bom: bool = False) -> Path:
    """`text` as UTF-8 (with a byte-order mark if `bom`), gzip-compressed when the name ends in .gz."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    data = (b"\xef\xbb\xbf" if bom else b"") + data
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def where(path: Path, line: int) -> str:
    return re.escape(f"{path}:{line}:")


# --- tables: field counts and header names (S5, S6, N8, C2) ---------------------------------------------------------
GOOD = [["text", "label", "note"], ["a fine film", "1", "x"], ["a dull film", "0", "y"], ["quite good", "1", "z"]]


def table_text(rows: list[list[str]], sep: str) -> str:
    return "".join(sep.join(row) + "\n" for row in rows)


def test_short_and_long_rows_and_duplicate_headers_are_named_by_every_table_reader(tmp_path: Path) -> None:
    """Every table format (TSV, CSV, each also gzipped) x every defect x every reader: a short row, a long row (a tab
    in a TSV text, an unquoted comma in a CSV text: S5), a header name given twice, whether or not the reader uses
    the column (S6, N8), a quote left open."""
    cases = []
    for suffix in (".tsv", ".csv", ".tsv.gz", ".csv.gz"):
        sep = "," if ".csv" in suffix else "\t"
        kind = "comma-separated" if sep == "," else "tab-separated"
        defects = {
            "short row": ([*GOOD[:2], ["a dull film", "0"], GOOD[3]], rf"3: 2 {kind} fields, the header has 3"),
            "long row": ([*GOOD[:2], ["hello", " world and more", "0", "y"], GOOD[3]],
                         rf"3: 4 {kind} fields, the header has 3 \((an unquoted comma|a tab) inside a text"),
            "duplicate text": ([["text", "label", "text"], *GOOD[1:]],
                               r"1: column 'text' appears 2 times in the header \(fields 1, 3\)"),
            "duplicate unread": ([["text", "label", "note", "note"], *[[*r, "w"] for r in GOOD[1:]]],
                                 r"1: column 'note' appears 2 times in the header \(fields 3, 4\)"),
        }
        for defect, (rows, pattern) in defects.items():
            path = write(tmp_path / f"{defect.replace(' ', '_')}{suffix}", table_text(rows, sep))
            cases += [(f"{suffix} {defect} via {name}", read, path, re.escape(str(path)) + ":" + pattern)
                      for name, read in TABLE_READERS.items()]
        if sep == ",":
            path = write(tmp_path / f"open_quote{suffix}", 'text,label,note\nfine,1,x\n"never closed,0,y\nmore,1,z\n')
            cases += [(f"{suffix} open quote via {name}", read, path,
                       where(path, 3) + " a quoted field opened in this row is never closed")
                      for name, read in TABLE_READERS.items()]
    check_all(cases)


def test_embed_refuses_a_cut_csv_text_before_loading_the_model(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    """S5 and S6 as the report ran them, through the CLI: rc 1 and the message, before the model is even looked for
    (so no shard of a half-read file is ever computed)."""
    comma = write(tmp_path / "comma.csv", 'id,text\n1,hello, world and more\n2,"quoted, fine"\n')
    dup = write(tmp_path / "dup.csv", "text,id,text\nfirst text,1,second text\n")
    for path, message in ((comma, "comma.csv:2: 3 comma-separated fields, the header has 2"),
                          (dup, "dup.csv:1: column 'text' appears 2 times in the header (fields 1, 3)")):
        code = main(["embed", str(path), "-o", str(tmp_path / "out"), "--model", str(tmp_path / "nowhere"),
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 1 and message in err and "Traceback" not in err, err
        assert not (tmp_path / "out").exists()


# --- encodings: bad UTF-8, byte-order mark, gzip ----------------------------------------------------------------------
def encoded_sources(text: str) -> dict[str, tuple[dict[str, Reader], bytes]]:
    """One small file per format and reader, `text` on line 3 (QA: in the context), as UTF-8 bytes with `text` as
    the placeholder XXX replaced: {name: (readers, bytes)}."""
    sources = {
        ".tsv": (TABLE_READERS, table_text([*GOOD[:2], ["XXX", "0", "y"], GOOD[3]], "\t").encode()),
        ".csv": (TABLE_READERS, table_text([*GOOD[:2], ["XXX", "0", "y"], GOOD[3]], ",").encode()),
        ".txt": ({"embed": embed_rows, "embed count": embed_count}, b"a fine film\na dull film\nXXX\n"),
        ".conll": ({"ner": ner}, b"-DOCSTART- O\n\nXXX O\nParis B-LOC\n"),
        ".json": ({"qa": qa}, json.dumps({"data": [{"paragraphs": [{"context": "XXX", "qas": [
            {"id": "q", "question": "Who?", "answers": [{"text": "caf", "answer_start": 0}]}]}]}]}, indent=1).encode()),
    }
    for name, (read, record, _) in JSONL_READERS.items():
        lines = [json.dumps(record(i, t)) for i, t in enumerate(["a fine film", "a dull film", "XXX", "good"])]
        sources[f".jsonl {name}"] = ({name: read}, "".join(line + "\n" for line in lines).encode())
    return {name: (readers, data.replace(b"XXX", text.encode("latin-1"))) for name, (readers, data) in sources.items()}


def test_bad_utf8_is_named_by_line_and_column_in_every_format(tmp_path: Path) -> None:
    """A byte that is not UTF-8 in a text, in every format (each also gzipped) x every reader: the file, the line and
    the column (the old readers said only the file, or raised a UnicodeDecodeError)."""
    cases = []
    for gz in ("", ".gz"):
        for k, (name, (readers, data)) in enumerate(encoded_sources("caf\xe9").items()):
            path = write(tmp_path / f"bad{k}{name.split()[0]}{gz}", data)
            line = next(i for i, raw in enumerate(data.split(b"\n"), 1) if b"\xe9" in raw)
            column = data.split(b"\n")[line - 1].index(b"\xe9") + 1
            cases += [(f"{name}{gz} via {reader}", read, path,
                       where(path, line) + f" not UTF-8 text: byte 0xe9 at column {column} ")
                      for reader, read in readers.items()]
    check_all(cases)


def test_a_byte_order_mark_and_gzip_read_as_the_plain_file(tmp_path: Path) -> None:
    """UTF-8 with a byte-order mark, gzip, and both, read exactly as the plain file by every reader of every format
    (embed read a BOM into the first text or header name, and a .gz file as bytes)."""
    failures = []
    for k, (name, (readers, data)) in enumerate(encoded_sources("caf\xe9").items()):
        data = data.replace(b"\xe9", "\xe9".encode("utf-8"))
        suffix = name.split()[0]
        for reader, read in readers.items():
            plain = read(write(tmp_path / f"plain{k}{suffix}", data))
            for variant, bom, gz in (("bom", True, ""), ("gz", False, ".gz"), ("bom-gz", True, ".gz")):
                path = write(tmp_path / f"{variant}{k}{suffix}{gz}", data, bom)
                try:
                    got = read(path)
                except Exception as e:  # noqa: BLE001 (a traceback or a DataError is the finding)
                    failures.append(f"{name} {variant} via {reader}: {type(e).__name__}: {e}")
                    continue
                if repr(got) != repr(plain):
                    failures.append(f"{name} {variant} via {reader}: {str(got)[:150]} != {str(plain)[:150]}")
    assert not failures, "\n".join(failures)


# --- JSON: lone surrogates, duplicate keys, non-objects, non-string texts (T5) ----------------------------------------
NOT_TEXTS = [3, 1.5, True, None, ["a", "b"], {"a": 1}]


def test_json_defects_are_named_by_every_jsonl_reader(tmp_path: Path) -> None:
    """Every JSONL reader x every defect on line 2: a lone surrogate escape (high or low, T5: embed failed with a
    UnicodeEncodeError after computing the shard; classification wrote it into predictions), a key given twice (the
    last one was kept), a line that is no object, a text that is not a string (classification read 3 as "3" and
    null as "None")."""
    cases = []
    for name, (read, record, key) in JSONL_READERS.items():
        first = json.dumps(record(0, "fine")) + "\n"
        for k, surrogate in enumerate(("\ud800", "\udfff", "\udbff")):
            text = f"lone {surrogate} surrogate"
            path = write(tmp_path / f"sur{k}-{name}.jsonl", first + json.dumps(record(1, text)) + "\n")
            cases.append((f"{name} surrogate {surrogate!r}", read, path,
                          where(path, 2) + rf" field '{key}' holds \\u{ord(surrogate):04x} at character 6: half of "
                          r"a UTF-16 surrogate pair .*\(the object at column 1\)"))
        for dup in record(1, "x"):
            line = json.dumps(record(1, "x"))[:-1] + f", {json.dumps(dup)}: 0}}"
            path = write(tmp_path / f"dup-{dup}-{name}.jsonl", first + line + "\n")
            cases.append((f"{name} key {dup!r} twice", read, path,
                          where(path, 2) + rf" the key '{dup}' is given twice in one object"))
        for k, other in enumerate(("[1, 2]", '"text"', "3", "null")):
            path = write(tmp_path / f"nonobj{k}-{name}.jsonl", first + other + "\n")
            cases.append((f"{name} line {other}", read, path, where(path, 2) + " expected a JSON object, found"))
        for k, value in enumerate(NOT_TEXTS):
            if name == "multiple-choice" and value is None:
                continue  # a null context is a missing one: its own message
            path = write(tmp_path / f"type{k}-{name}.jsonl", first + json.dumps(record(1, value)) + "\n")
            cases.append((f"{name} text {value!r}", read, path,
                          where(path, 2) + rf" field '{key}' is {re.escape(repr(value))}; expected a string"))
    check_all(cases)


def test_json_document_defects_are_named_by_the_qa_reader(tmp_path: Path) -> None:
    """A SQuAD file (one JSON document): a lone surrogate, a key given twice, a question that is not a string; each
    named by file, line and column (the old reader accepted all three)."""
    qas = [{"id": "q1", "question": "What is fine?", "answers": [{"text": "Paris", "answer_start": 0}]}]
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Paris is fine.", "qas": qas}]}]}
    text = json.dumps(doc, indent=1)

    def opening(key: str) -> tuple[str, str]:  # "line:" and "(the object at column c)" of the object holding key
        offset = text.rfind("{", 0, text.index(f'"{key}"'))
        line_start = text.rfind("\n", 0, offset) + 1
        return f"{text.count(chr(10), 0, offset) + 1}:", f"(the object at column {offset - line_start + 1})"

    cases = []
    path = write(tmp_path / "sur.json", text.replace("What is fine?", "What \\ud800 is fine?"))
    line, column = opening("question")
    cases.append(("surrogate", qa, path, re.escape(f"{path}:{line} field 'question' holds \\ud800 at character 6: ")
                  + ".*" + re.escape(column)))
    path = write(tmp_path / "dup.json", text.replace('"title": "t",', '"title": "t", "title": "u",'))
    line, column = opening("title")
    cases.append(("key twice", qa, path, re.escape(f"{path}:{line} the key 'title' is given twice in one object "
                                                   f"{column}")))
    for k, value in enumerate(NOT_TEXTS):
        path = write(tmp_path / f"q{k}.json", text.replace('"What is fine?"', json.dumps(value)))
        cases.append((f"question {value!r}", qa, path, re.escape(f"{path}: field 'data[0].paragraphs[0].qas[0]."
                                                                 f"question' is {value!r}; expected a string")))
    check_all(cases)


def test_embed_refuses_a_lone_surrogate_or_a_binary_column_before_computing_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """T5 as the report ran it: a JSONL lone surrogate (a UnicodeEncodeError traceback from write_shard after the
    shard was computed) and a Parquet binary text column (a TypeError raised while the message was built). Now rc 1
    with the message, before the model is even looked for."""
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow (pip install 'bertkit[index]')")
    import pyarrow.parquet as pq

    sur = write(tmp_path / "sur.jsonl", '{"text": "ok"}\n{"text": "lone \\ud800 surrogate"}\n')
    binary = tmp_path / "bin.parquet"
    pq.write_table(pa.table({"text": pa.array([b"a", b"\xff"], pa.binary())}), binary)
    for path, message in ((sur, r"sur\.jsonl:2: field 'text' holds \\ud800 at character 6"),
                          (binary, r"bin\.parquet: column 'text' holds binary values; a text column holds strings")):
        code = main(["embed", str(path), "-o", str(tmp_path / "out"), "--model", str(tmp_path / "nowhere"),
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 1 and re.search(message, err) and "Traceback" not in err, err
        assert not (tmp_path / "out").exists()
        with pytest.raises(DataError, match=message):  # the job itself, as torchrun's ranks call it
            embed_job.run(embed_job.EmbedConfig(input=str(path), output=str(tmp_path / "o2"), model="nowhere",
                                                progress=False))


def test_parquet_defects_are_named_and_string_columns_of_every_kind_read(tmp_path: Path) -> None:
    """Parquet through embed's reader and count: a column name given twice (the last was read), a text column of
    bytes or numbers, a string column holding bytes that are not UTF-8 (a UnicodeDecodeError traceback); while
    large and dictionary-encoded string columns read as plain ones."""
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow (pip install 'bertkit[index]')")
    import pyarrow.parquet as pq

    def table(path: Path, t: Any) -> Path:
        pq.write_table(t, path)
        return path

    bad_utf8 = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00\x03\x00"
                                                                         b"\x00\x00"), pa.py_buffer(b"ok\xff")])
    defects = {
        "dup": (pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["c", "d"])], names=["text", "text"]),
                r"dup\.parquet: column 'text' appears 2 times in the schema \(fields 1, 2\)"),
        "binary": (pa.table({"text": pa.array([b"a", b"b"], pa.binary())}), r"binary\.parquet: column 'text' holds "
                   r"binary values"),
        "numbers": (pa.table({"text": pa.array([1, 2])}), r"numbers\.parquet: column 'text' holds int64 values"),
        "utf8": (pa.table({"text": bad_utf8}), r"utf8\.parquet row:1: cannot be read \(.*utf-8"),
    }
    cases = []
    for name, (t, pattern) in defects.items():
        path = table(tmp_path / f"{name}.parquet", t)
        readers = {"embed": embed_rows} if name == "utf8" else {"embed": embed_rows, "embed count": embed_count}
        cases += [(f"{name} via {reader}", read, path, pattern) for reader, read in readers.items()]
    check_all(cases)
    for kind in (pa.large_string(), pa.dictionary(pa.int32(), pa.string())):
        path = table(tmp_path / "ok.parquet", pa.table({"text": pa.array(["a b", "c"]).cast(kind)}))
        assert embed_rows(path) == [(1, "a b"), (2, "c")] and embed_count(path) == 2


# --- generated tables: a defect at a random row, and valid files read back exactly --------------------------------------
def _property(max_examples: int, **strategies: Any) -> Callable:
    if st is None:
        return pytest.mark.skip(reason="hypothesis is not installed (pip install 'bertkit[test]')")
    run = settings(max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    return lambda test: run(given(**strategies)(test))


WORD = (st.text(st.sampled_from("abcxyz ÉéüÜ中文.'!?"), min_size=1, max_size=10).filter(str.strip)
        if st is not None else None)


@_property(60, rows=st.lists(WORD, min_size=1, max_size=8) if st else None,
           columns=st.integers(2, 5) if st else None, at=st.integers(0, 7) if st else None,
           delta=st.sampled_from([-3, -2, -1, 1, 2, 3]) if st else None,
           suffix=st.sampled_from([".tsv", ".csv", ".tsv.gz", ".csv.gz"]) if st else None)
def test_random_tables_with_a_row_of_another_length(rows: list[str], columns: int, at: int, delta: int,
                                                    suffix: str) -> None:
    """Random tables (1-8 rows, 2-5 columns) with one row given `delta` fields more or fewer: every table reader
    names its line and both counts (embed's CSV reader ignored extra fields and, unless the text was cut off,
    missing ones)."""
    sep = "," if ".csv" in suffix else "\t"
    header = ["text", "label", *(f"c{i}" for i in range(columns - 2))]
    body = [[text, str(i % 2), *(f"v{j}" for j in range(columns - 2))] for i, text in enumerate(rows)]
    at = at % len(body)
    found = max(columns + delta, 1)
    body[at] = (body[at] + [f"extra{j}" for j in range(delta)])[:found]
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder) / f"t{suffix}", table_text([header, *body], sep))
        kind = "comma" if sep == "," else "tab"
        check_all([(name, read, path, where(path, at + 2) + f" {found} {kind}-separated fields, the header has "
                    f"{columns}") for name, read in TABLE_READERS.items()])


@_property(60, texts=st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                                      max_size=20), min_size=1, max_size=6) if st else None,
           suffix=st.sampled_from([".tsv", ".csv", ".jsonl", ".tsv.gz", ".csv.gz", ".jsonl.gz"]) if st else None,
           bom=st.booleans() if st else None, ascii_json=st.booleans() if st else None)
def test_random_texts_written_validly_read_back_exactly(texts: list[str], suffix: str, bom: bool,
                                                        ascii_json: bool) -> None:
    """Any texts, written as the format allows (CSV quoted by csv.writer, any character; TSV without tabs and line
    breaks, quotes kept as text; JSONL with or without \\u escapes, astral characters as surrogate pairs), with or
    without a BOM and gzip: embed reads back every text exactly, and classification every text (a table's stripped)
    on the line its row starts (embed's TSV reader applied CSV quoting, and neither reader took a BOM or gzip in
    every format)."""
    if ".tsv" in suffix:
        texts = [re.sub(r"[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", " ", t) for t in texts]
    buffer = io.StringIO()
    writer = csv.writer(buffer)  # RFC 4180's CRLF line ends: a CR inside a text is quoted too
    lines = []
    if ".jsonl" not in suffix:
        writer.writerow(["id", "text", "label"]) if ".csv" in suffix else buffer.write("id\ttext\tlabel\n")
    for i, t in enumerate(texts):
        lines.append(buffer.getvalue().count("\n") + 1)
        if ".jsonl" in suffix:
            buffer.write(json.dumps({"text": t, "label": i % 2}, ensure_ascii=ascii_json) + "\n")
        elif ".csv" in suffix:
            writer.writerow([str(i), t, str(i % 2)])
        else:
            buffer.write(f"{i}\t{t}\t{i % 2}\n")
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder) / f"t{suffix}", buffer.getvalue(), bom)
        assert embed_rows(path) == list(zip(lines, texts))  # without --id-field a row's id is its first line
        assert embed_count(path) == len(texts)
        examples = classification(path)
        assert [ex.text for ex in examples] == [t if ".jsonl" in suffix else t.strip() for t in texts]
        assert [ex.line for ex in examples] == lines
