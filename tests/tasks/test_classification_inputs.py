"""Text with columns and the classification reader: numbers that overflow the fit or the logits, duplicate headers,
/classify parsing, misleading field-count hints and inputs accepted without a word. Each a named error or a finite
answer, never a traceback or a silent wrong result. (The 2026-11-24 attack report's findings N2, N3, T2, N8, N13, C2
and C8; its stray labels, N6, are tests/tasks/test_stray_labels.py.)"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import CheckpointError, ConfigError, DataError
import bertkit.tasks.base as task_base
from bertkit.tasks.classification import ClassificationTask, read_logits, request_example
from bertkit.tasks.columns import fit_numeric
from test_tabular import HEADER, OPTIONS, settings, write_csv  # the tabular tests' file helpers

ROWS = [
    ["33", "Tops", "Nice", "Absolutely wonderful, silky", "4", "1"],
    ["60", "Dresses", "Flaws", "I had such high hopes.\nIt did not fit.", "2", "0"],
    ["41", "Bottoms", "Love it", "Fun and flirty", "5", "1"],
    ["47", "Tops", "Meh", "Too small and thin", "3", "0"],
    ["25", "Tops", "Great", "Perfect fit", "5", "1"],
    ["52", "Dresses", "Returned", "Cheap fabric", "1", "0"],
]
TEMPLATE = "{Title}. {Review Text}"
COLUMNS = {"Age": 41, "Department Name": "Tops", "Title": "Nice", "Review Text": "Soft and warm", "Rating": 4}


def read(path: Path, s: dict, labelled: bool = True) -> list:
    return ClassificationTask().read(path, s, labelled)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    """A tiny BERT fine-tuned for one epoch with a template and numeric/categorical columns (Age 25..60)."""
    from bertkit.model import BertConfig, BertModel
    from bertkit.tokenizer import BertTokenizer

    tmp = tmp_path_factory.mktemp("classification_inputs")
    tiny = tmp / "tiny"
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=37)).save_pretrained(str(tiny))
    BertTokenizer.from_pretrained(minilm_dir).save_pretrained(tiny)
    train = write_csv(tmp / "train.csv", ROWS * 3)
    assert main(["finetune", "--model", str(tiny), "--output", str(tmp / "run"), "--no-progress", "--epochs", "1",
                 "--task", "classification", "--train", str(train), "--dev", str(train), "--max-length", "24",
                 "--template", TEMPLATE, "--label-column", "Recommended IND", *OPTIONS]) == 0
    return tmp / "run" / "best"


# --- the numeric fit ---------------------------------------------------------------------------------------------
def test_numeric_fit_cannot_overflow_and_huge_training_values_are_named(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """N2: 1.5e308 made std inf (every weight NaN later, `Infinity` in config.json); 1e200 made std inf so every
    Age standardised to 0. The fit is finite for any finite input, and a value no real column holds is refused
    with file:line:column."""
    mean, std = fit_numeric([1.5e308, 1.5e308, 41.0, 30.0])
    assert math.isfinite(mean) and math.isfinite(std) and std > 0
    assert fit_numeric([33.0, 60.0, None, 47.0]) == [float(np.mean([33, 60, 47])), float(np.std([33, 60, 47]))]

    s = lambda: settings(template=TEMPLATE, numeric_columns=["Age", "Rating"])  # noqa: E731
    for bad, message in (("1.5e308", r"'1\.5e308' is beyond \+-1e\+100"), ("1e200", r"'1e200' is beyond"),
                         ("1e30", r"1e\+30 lies outside .* almost certainly a data error")):
        rows = [list(r) for r in ROWS * 5]
        rows[7][0] = bad  # header line 1, rows 1-7 take lines 2-9: row 8's text spans lines 10-11 (C2: its first)
        with pytest.raises(DataError, match=rf"t\.csv:10: column 'Age': {message}"):
            read(write_csv(tmp_path / "t.csv", rows), s())

    # A legitimate large-scale column still fits: prices from 10 to 1e12, and mostly 0 with a few of 1e12.
    for prices in ([10.0 ** (k % 12 + 1) for k in range(30)], [0.0] * 27 + [1e12, 2e12, 5e11]):
        rows = [[f"{p:g}", *r[1:]] for p, r in zip(prices, ROWS * 5)]
        fitted = settings(template=TEMPLATE, numeric_columns=["Age"])
        fitted = ClassificationTask().fit_labels(read(write_csv(tmp_path / "p.csv", rows), fitted), fitted)
        assert fitted.numeric_stats["Age"] == pytest.approx([np.mean(prices), np.std(prices)])
        json.dumps(fitted.to_dict(), allow_nan=False)  # nothing that config.json could not hold

    # Through the CLI: rc 1, the message, no traceback, no folder of NaN weights.
    rows = [list(r) for r in ROWS * 3]
    rows[0][0] = "1e200"
    train = write_csv(tmp_path / "huge.csv", rows)
    code = main(["finetune", "--model", "bertkit-mini", "--output", str(tmp_path / "out"), "--task",
                 "classification", "--train", str(train), "--dev", str(train), "--template", TEMPLATE,
                 "--label-column", "Recommended IND", "--numeric-columns", "[Age]"])
    err = capsys.readouterr().err
    assert code == 1 and "huge.csv:2: column 'Age': '1e200' is beyond" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "best").exists()


# --- huge values at predict and serve time --------------------------------------------------------------------
def test_huge_values_at_predict_time_are_refused_or_clipped_never_nan(run: Path, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """N3: Age 1e300 at predict time gave logits [-inf, +inf], a NaN softmax and label "0" for every row; 1e30
    gave probability 1.0 without a word. Values no column takes are refused naming file:line:column; values
    beyond the training range (ages 25..60) are read as its nearest end, with a warning."""
    from bertkit.jobs import predict
    from bertkit.jobs.finetune import _load_finetuned

    for age, message in (("1e300", r"'1e300' is beyond \+-1e\+100"), ("1e30", r"1e\+30 lies outside")):
        rows = [list(r) for r in ROWS]
        rows[2][0] = age
        with pytest.raises(DataError, match=rf"p\.csv:5: column 'Age': {message}"):
            predict.run(predict.PredictConfig(str(run), str(write_csv(tmp_path / "p.csv", rows)),
                                              str(tmp_path / "pred.csv")))
    config = json.loads((run / "config.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert config["task_settings"]["numeric_range"]["Age"] == [25.0, 60.0]

    task, s, model, tokenizer = _load_finetuned(str(run))
    rows = [list(r) for r in ROWS]
    rows[0][0], rows[3][0], rows[4][0] = "200", "60", "-5"  # beyond the oldest, the oldest, below the youngest
    with caplog.at_level(logging.WARNING, logger="bertkit.tasks.classification"):
        features = task.features(read(write_csv(tmp_path / "q.csv", rows), s, False), tokenizer, s, False)
    mean, std = s.numeric_stats["Age"]
    assert features[0]["numeric_features"][0] == features[3]["numeric_features"][0] == (60 - mean) / std
    assert features[4]["numeric_features"][0] == (25 - mean) / std
    assert "column 'Age': 2 value(s) outside the training data's range 25 .. 60" in caplog.text
    assert "200 (line 2)" in caplog.text

    # A folder fitted before the range was stored: the standardised value is clipped to +-100 std, never NaN.
    legacy_dict = s.to_dict()  # as such a folder's config.json holds them
    del legacy_dict["numeric_range"], legacy_dict["numeric_limits"]
    legacy = task.settings_of(legacy_dict)
    rows[0][0] = "1e30"
    features = task.features(read(write_csv(tmp_path / "r.csv", rows), legacy, False), tokenizer, legacy, False)
    assert features[0]["numeric_features"][0] == 100.0
    predictions = task_base.predict(task, model, [], features, dataclasses.replace(legacy, problem="single_label"), 8)
    assert predictions and all(p in ("0", "1") for p in predictions)
    # Logits that are not finite (a folder whose weights hold NaN) are an error, never a label with probability NaN.
    with pytest.raises(CheckpointError, match=r"logits are not finite"):
        read_logits(np.array([-np.inf, np.inf]), "single_label_classification", ["0", "1"])


def test_classify_never_answers_null(run: Path) -> None:
    """N3 through /classify: Age 1e300 was a 200 with probability null. Now a 400 naming the example and column;
    an age beyond the training range answers as the oldest training age does, with finite probabilities."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve import ServeSettings, create_app

    with TestClient(create_app(run, ServeSettings(precision="fp32"))) as client:
        for age in (1e300, 1e30):
            r = client.post("/classify", json={"columns": [{**COLUMNS, "Age": age}]})
            assert r.status_code == 400 and "columns[0]" in r.text and "'Age'" in r.text, r.text
        r = client.post("/classify", json={"columns": [{**COLUMNS, "Age": 2e9}, {**COLUMNS, "Age": 60}]})
        assert r.status_code == 200, r.text
        far, oldest = r.json()["results"]
        assert all(math.isfinite(p) for p in far["probabilities"].values())
        assert far["probabilities"] == pytest.approx(oldest["probabilities"], abs=1e-6)


# --- a 401-digit integer -------------------------------------------------------------------------------------------
def test_a_huge_json_integer_is_a_named_error(tmp_path: Path, run: Path) -> None:
    """T2: "Age": 10**400 raised OverflowError (a traceback from a JSONL file, a 500 from /classify)."""
    rows = [{"Title": "a", "Review Text": "b", "Age": 30 + i, "Recommended IND": i % 2} for i in range(4)]
    rows[2]["Age"] = 10 ** 400
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"t\.jsonl:3: column 'Age': 10{20,}\.\.\. \(401 characters\) is not a "
                                        r"finite number"):
        read(path, settings(template=TEMPLATE, numeric_columns=["Age"]))
    path.write_text('{"Title": "a", "Review Text": "b", "Age": ' + "9" * 5000 + ', "Recommended IND": 1}\n')
    with pytest.raises(DataError, match=r"t\.jsonl:1: not valid JSON \(Exceeds the limit"):
        read(path, settings(template=TEMPLATE, numeric_columns=["Age"]))

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve import ServeSettings, create_app

    with TestClient(create_app(run, ServeSettings(precision="fp32"))) as client:
        body = '{"columns": [{"Age": ' + "1" + "0" * 400 + ', "Department Name": "Tops", "Title": "x", ' \
               '"Review Text": "y", "Rating": 4}]}'
        r = client.post("/classify", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "columns[0]: column 'Age'" in r.text and "not a finite number" in r.text


# --- duplicate header names ----------------------------------------------------------------------------------------
def test_duplicate_header_names_are_an_error(tmp_path: Path) -> None:
    """N8: a second `Age` column fed the numeric input silently (dict(zip(header, row)): the last one won)."""
    header = [*HEADER, "Age"]
    rows = [[*r, "900"] for r in ROWS]
    with pytest.raises(DataError, match=r"dup\.csv:1: column 'Age' appears 2 times in the header \(fields 1, 7\)"):
        read(write_csv(tmp_path / "dup.csv", rows, header), settings(template=TEMPLATE, numeric_columns=["Age"]))
    tsv = tmp_path / "dup.tsv"
    tsv.write_text("text\tlabel\ttext\nfine\t1\tother\n")
    with pytest.raises(DataError, match=r"dup\.tsv:1: column 'text' appears 2 times"):
        read(tsv, ClassificationTask().settings({"text_column": "text", "label_column": "label"}))
    # A duplicated column the model does not read is refused too (the 2026-11-28 report's S6): one rule for every
    # header and every verb, so that no reader has to know which columns matter (embed read the last of two 'text'
    # columns).
    header = [*HEADER, "Notes", "Notes"]
    with pytest.raises(DataError, match=r"notes\.csv:1: column 'Notes' appears 2 times in the header \(fields 7, 8\)"):
        read(write_csv(tmp_path / "notes.csv", [[*r, "a", "b"] for r in ROWS], header),
             settings(template=TEMPLATE, numeric_columns=["Age"]))


# --- field-count hints ---------------------------------------------------------------------------------------------
def test_the_field_count_hint_fits_the_format(tmp_path: Path) -> None:
    """C2: a CSV row with a field too many or too few was told about a tab inside a TSV text; a TSV with a quoted
    multi-line text got the same tab hint."""
    s = settings(template=TEMPLATE)
    path = tmp_path / "t.csv"
    path.write_text(",".join(HEADER) + "\n33,Tops,Nice,Soft, warm,4,1\n")
    with pytest.raises(DataError, match=r"t\.csv:2: 7 comma-separated fields, the header has 6 \(an unquoted comma"):
        read(path, s)
    path.write_text(",".join(HEADER) + "\n33,Tops,Nice,Soft,4\n")
    with pytest.raises(DataError, match=r"t\.csv:2: 5 comma-separated fields, the header has 6 \(a missing field"):
        read(path, s)
    path = tmp_path / "t.tsv"
    path.write_text("\t".join(HEADER) + '\n33\tTops\tNice\t"Soft and\nwarm"\t4\t1\n')
    with pytest.raises(DataError, match=r"t\.tsv:2: 4 tab-separated fields, the header has 6 \(a line break inside a "
                                        r"text\? .*needs a CSV file"):
        read(path, s)


# --- inputs accepted without a word --------------------------------------------------------------------------------
def test_underscored_numbers_objects_as_values_and_the_label_as_input_are_errors(tmp_path: Path) -> None:
    """C8: `1_000` was read as 1000 (Python's float() digit grouping), a JSON object was stored as a category (its
    Python repr), and the label column was accepted as a numeric or template input (predict then demanded it)."""
    rows = [list(r) for r in ROWS]
    rows[3][0] = "1_000"
    with pytest.raises(DataError, match=r"u\.csv:6: column 'Age': '1_000' is not a number \(write digits without "
                                        r"separators"):
        read(write_csv(tmp_path / "u.csv", rows), settings(template=TEMPLATE, numeric_columns=["Age"]))

    lines = [{"text": "a", "Department Name": "Tops", "label": "1"},
             {"text": "b", "Department Name": {"name": "Tops"}, "label": "0"}]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(DataError, match=r"c\.jsonl:2: column 'Department Name': \{'name': 'Tops'\} is an object"):
        read(path, ClassificationTask().settings({"categorical_columns": ["Department Name"]}))
    lines[1]["Department Name"] = ["Tops", "Dresses"]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(DataError, match=r"c\.jsonl:2: column 'Department Name': .* is a list"):
        read(path, ClassificationTask().settings({"template": "{Department Name}: {text}"}))

    for options, role in (({"numeric_columns": ["Recommended IND"], "template": TEMPLATE}, "numeric_columns"),
                          ({"template": "{Recommended IND}. {Review Text}"}, "the template")):
        with pytest.raises(ConfigError, match=rf"the label column 'Recommended IND' is also an input \({role}\)"):
            settings(**options)
    # The label by its default name (JSONL "label"), not named by an option: refused when the file is read.
    path.write_text(json.dumps({"text": "a", "label": 1}) + "\n")
    with pytest.raises(ConfigError, match=r"the label column 'label' is also an input \(numeric_columns\)"):
        read(path, ClassificationTask().settings({"numeric_columns": ["label"]}))


# --- /classify parsing ---------------------------------------------------------------------------------------------
def test_classify_refuses_pairs_booleans_and_unknown_columns(run: Path) -> None:
    """N13: on a template model, `pairs` were used as a second segment though it was trained without pairs,
    "Age": true was read as 1, and an extra key ("age" beside "Age") was ignored. Each is a 400 naming the field."""
    from bertkit.jobs.finetune import _load_finetuned

    _, s, _, _ = _load_finetuned(str(run))
    with pytest.raises(DataError, match=r"columns\[0\]: a pair \(second text\) was sent, but this model was trained "
                                        r"on single texts"):
        request_example(None, "x", COLUMNS, s, "columns[0]")
    assert s.pairs is False  # recorded from the training file
    with pytest.raises(DataError, match=r"columns\[0\]: unknown column 'age' \(did you mean 'Age'\?\)"):
        request_example(None, None, {**COLUMNS, "age": 41}, s, "columns[0]")

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve import ServeSettings, create_app

    with TestClient(create_app(run, ServeSettings(precision="fp32"))) as client:
        assert client.post("/classify", json={"columns": [COLUMNS]}).status_code == 200
        r = client.post("/classify", json={"columns": [COLUMNS], "pairs": ["x"]})
        assert r.status_code == 400 and "trained on single texts" in r.text, r.text
        r = client.post("/classify", json={"columns": [{**COLUMNS, "Age": True}]})
        assert r.status_code == 400 and "columns[0]: column 'Age': True is not a number" in r.text, r.text
        r = client.post("/classify", json={"columns": [{**COLUMNS, "Age": None, "age": 41}]})
        assert r.status_code == 400 and "unknown column 'age'" in r.text, r.text
