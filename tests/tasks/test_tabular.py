"""Classification with non-text columns: the template, the numeric and categorical transforms fitted on train and
saved in the model folder, named errors for bad rows, and evaluate/predict applying the saved statistics."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.errors import ConfigError, DataError
from bertkit.tasks.classification import ClassificationTask
from bertkit.tasks.columns import UNKNOWN_CATEGORY, category_ids, numeric_vector, render_template, template_columns

if TYPE_CHECKING:
    from bertkit.tasks.classification import ClassificationSettings

HEADER = ["Age", "Department Name", "Title", "Review Text", "Rating", "Recommended IND"]
ROWS = [  # multi-line quoted texts, commas, quotes and empty fields, as in the clothing reviews
    ["33", "Tops", "", "Absolutely wonderful, silky", "4", "1"],
    ["60", "Dresses", "Some major design flaws", 'I had such "high" hopes.\nIt did not fit.', "2", "0"],
    ["", "Bottoms", "Love it", "Fun and flirty", "5", "1"],
    ["47", "", "Meh", "Too small\nand thin", "3", "0"],
    ["25", "Tops", "Great", "Perfect fit", "5", "1"],
    ["52", "Dresses", "Returned", "Cheap fabric", "1", "0"],
]
OPTIONS = ["--numeric-columns", "[Age, Rating]", "--categorical-columns", "Department Name"]


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def settings(**options: object) -> ClassificationSettings:
    return ClassificationTask().settings({"label_column": "Recommended IND", **options})


# --- the template ------------------------------------------------------------------------------------------------
def test_template_renders_exactly_with_unknown_for_empty_fields(tmp_path: Path) -> None:
    s = settings(template="Age: {Age}. Department: {Department Name}. {Title}. {Review Text}")
    ex = ClassificationTask().read(write_csv(tmp_path / "t.csv", ROWS), s)
    assert ex[0].text == "Age: 33. Department: Tops. unknown. Absolutely wonderful, silky"
    assert ex[1].text == ('Age: 60. Department: Dresses. Some major design flaws. I had such "high" hopes.\n'
                          'It did not fit.')
    assert ex[2].text.startswith("Age: unknown. Department: Bottoms.")
    assert render_template("{a} {{literal}} {b}", {"a": " x ", "b": None}, empty="n/a") == "x {literal} n/a"
    assert template_columns("Age: {Age}. {Review Text}") == ["Age", "Review Text"]
    for bad in ("{}", "{Age:.1f}", "{Age", "{Age!r}"):
        with pytest.raises(ConfigError, match="template"):
            template_columns(bad)
    with pytest.raises(ConfigError, match="not both"):
        settings(template="{Title}", text_column="Title")


def test_a_template_column_missing_from_the_file_is_named(tmp_path: Path) -> None:
    s = settings(template="Size: {Size}. {Review Text}")
    with pytest.raises(DataError, match=r"t\.csv:1: no column 'Size'"):
        ClassificationTask().read(write_csv(tmp_path / "t.csv", ROWS), s)


# --- numeric and categorical transforms --------------------------------------------------------------------------
def fitted(tmp_path: Path) -> tuple[ClassificationTask, ClassificationSettings, list]:
    task = ClassificationTask()
    s = settings(text_column="Review Text", numeric_columns=["Age", "Rating"], categorical_columns=["Department Name"])
    examples = task.read(write_csv(tmp_path / "train.csv", ROWS), s)
    return task, task.fit_labels(examples, s), examples


def test_numbers_are_standardised_with_the_training_stats_and_empty_is_mean_plus_flag(tmp_path: Path) -> None:
    task, s, examples = fitted(tmp_path)
    ages = np.array([33, 60, 47, 25, 52], dtype=float)  # the empty field is left out of the statistics
    assert s.numeric_stats["Age"] == pytest.approx([ages.mean(), ages.std()])
    features = task.features(examples, _Tok(), s, training=True)
    rating_mean, rating_std = s.numeric_stats["Rating"]
    assert features[0]["numeric_features"] == pytest.approx(
        [(33 - ages.mean()) / ages.std(), (4 - rating_mean) / rating_std, 0.0, 0.0])
    assert features[2]["numeric_features"][0] == 0.0 and features[2]["numeric_features"][2:] == [1.0, 0.0]


def test_categories_get_ids_from_the_training_vocabulary_and_unseen_ones_the_unknown_bucket(tmp_path: Path) -> None:
    task, s, examples = fitted(tmp_path)
    assert s.category_vocab == {"Department Name": ["Bottoms", "Dresses", "Tops"]}
    ids = [f["categorical_ids"] for f in task.features(examples, _Tok(), s, training=True)]
    assert ids == [[3], [2], [1], [UNKNOWN_CATEGORY], [3], [2]]  # row 4's department is empty
    assert category_ids(["Swim", None, "Tops"], [["Tops"]] * 3) == [UNKNOWN_CATEGORY, UNKNOWN_CATEGORY, 1]
    assert task.head(s).config["tabular_inputs"] == {"numeric": 4, "categories": [4], "embedding_size": 16}


def test_a_non_number_in_a_numeric_column_names_file_line_and_column(tmp_path: Path) -> None:
    rows = [*ROWS[:2], ["forty", "Tops", "", "x", "4", "1"]]  # header line 1; row 2 spans lines 3-4
    s = settings(text_column="Review Text", numeric_columns=["Age"])
    with pytest.raises(DataError, match=r"bad\.csv:5: column 'Age': 'forty' is not a number"):
        ClassificationTask().read(write_csv(tmp_path / "bad.csv", rows), s)


def test_a_missing_numeric_or_categorical_column_is_named(tmp_path: Path) -> None:
    for option in ({"numeric_columns": ["Height"]}, {"categorical_columns": ["Height"]}):
        with pytest.raises(DataError, match=r"t\.csv:1: no column 'Height'"):
            ClassificationTask().read(write_csv(tmp_path / "t.csv", ROWS), settings(text_column="Title", **option))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps({"text": "a", "Age": 3, "label": "1"}) + "\n" + json.dumps({"text": "b", "label": "0"}))
    with pytest.raises(DataError, match=r"t\.jsonl:2: missing field 'Age'"):
        ClassificationTask().read(jsonl, ClassificationTask().settings({"numeric_columns": ["Age"]}))


def test_numeric_vector_is_pure() -> None:
    assert numeric_vector([3.0, None], [[1.0, 2.0], [5.0, 1.0]]) == [1.0, 0.0, 0.0, 1.0]


class _Tok:
    """Enough of a tokenizer for features(): one id per character."""

    def encode(self, text: str, pair: str | None = None, **_: object) -> object:
        ids = [2] + [ord(c) % 90 + 5 for c in text][:20] + [3]
        return type("Enc", (), {"input_ids": ids, "token_type_ids": [0] * len(ids)})


# --- through finetune, a saved folder, evaluate and predict --------------------------------------------------------
@pytest.fixture(scope="module")
def tabular_run(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> Path:
    tmp = tmp_path_factory.mktemp("tabular")
    train = write_csv(tmp / "train.csv", ROWS * 3)
    dev = write_csv(tmp / "dev.csv", ROWS)
    code = main(["finetune", "--model", str(tiny_dir), "--output", str(tmp / "run"), "--no-progress", "--epochs", "1",
                 "--batch-size", "8", "--task", "classification", "--train", str(train), "--dev", str(dev),
                 "--template", "{Title}. {Review Text}", "--label-column", "Recommended IND", "--max-length", "32",
                 "--head-lr-scale", "10", *OPTIONS])
    assert code == 0
    return tmp


def test_the_transforms_round_trip_through_the_model_folder(tabular_run: Path) -> None:
    from bertkit.jobs.finetune import _load_finetuned

    task, saved, model, tokenizer = _load_finetuned(str(tabular_run / "run" / "best"))
    fresh = settings(template="{Title}. {Review Text}", numeric_columns=["Age", "Rating"],
                     categorical_columns=["Department Name"], max_length=32)
    fresh = task.fit_labels(task.read(tabular_run / "train.csv", fresh), fresh)
    assert saved.numeric_stats.keys() == fresh.numeric_stats.keys()
    for column, stats in fresh.numeric_stats.items():  # pytest.approx takes no dict of lists (pytest >= 9.2)
        assert saved.numeric_stats[column] == pytest.approx(stats)
    assert saved.category_vocab == fresh.category_vocab
    examples = task.read(tabular_run / "dev.csv", saved)
    for a, b in zip(task.features(examples, tokenizer, saved, False), task.features(examples, tokenizer, fresh, False)):
        assert a["numeric_features"] == pytest.approx(b["numeric_features"])
        assert a["categorical_ids"] == b["categorical_ids"]
    assert model.config.tabular_inputs == {"numeric": 4, "categories": [4], "embedding_size": 16}


def test_predict_applies_the_saved_statistics_not_the_files(tabular_run: Path, monkeypatch) -> None:
    """predict's logits are the model's on the row standardised with the training statistics saved in the folder,
    and measurably not those a refit on the file would give (the label alone is the same either way most runs)."""
    from bertkit.jobs.finetune import _load_finetuned

    best = tabular_run / "run" / "best"
    _, saved, model, tokenizer = _load_finetuned(str(best))
    # One row, age far from training's and a department training never saw: refitting on this file would
    # standardise Age and Rating to 0 and give 'Swim' a category id of its own (1).
    rows = [["90", "Swim", "New", "Odd one", "1", ""]]
    path = write_csv(tabular_run / "new.csv", rows)
    computed: list[np.ndarray] = []
    decode = ClassificationTask.decode

    def keep_logits(self, examples, features, outputs, settings):  # noqa: ANN001, ANN202
        computed.extend(out["logits"] for out in outputs)  # predict's logits, on their way to decode()
        return decode(self, examples, features, outputs, settings)

    monkeypatch.setattr(ClassificationTask, "decode", keep_logits)
    assert main(["predict", "--model", str(best), "--input", str(path), "--output", str(tabular_run / "p.tsv")]) == 0
    monkeypatch.undo()
    predicted = (tabular_run / "p.tsv").read_text().splitlines()[1].split("\t")[-1]
    mean, std = saved.numeric_stats["Age"]
    r_mean, r_std = saved.numeric_stats["Rating"]
    assert abs((saved.numeric_range['Age'][1] - mean) / std) > 1.0  # far from the file's own mean (0)
    x = tokenizer.encode("New. Odd one", max_length=32)

    def logits(numeric: list[float], category: int) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([x.input_ids]), torch.tensor([[1] * len(x.input_ids)]),
                         numeric_features=torch.tensor([numeric]),
                         categorical_ids=torch.tensor([[category]])).logits[0]

    # Values outside the training range are read as its nearest end (issue 24, N3): Age 90 as the oldest age seen.
    (age_low, age_high), (r_low, r_high) = saved.numeric_range["Age"], saved.numeric_range["Rating"]
    age, rating = min(max(90.0, age_low), age_high), min(max(1.0, r_low), r_high)
    assert age < 90
    with_saved = logits([(age - mean) / std, (rating - r_mean) / r_std, 0.0, 0.0], UNKNOWN_CATEGORY)
    with_files = logits([0.0, 0.0, 0.0, 0.0], 1)  # what fitting on new.csv would give
    (got,) = computed
    torch.testing.assert_close(torch.from_numpy(np.asarray(got, dtype=np.float32)), with_saved, rtol=0, atol=1e-5)
    assert (with_saved.softmax(-1) - with_files.softmax(-1)).abs().max() > 1e-3  # the check tells the two apart
    assert predicted == model.config.label_names[int(with_saved.argmax())]
    # A CSV prediction file keeps multi-line texts as quoted fields; a TSV one writes them on one line.
    assert main(["predict", "--model", str(best), "--input", str(tabular_run / "dev.csv"),
                 "--output", str(tabular_run / "p.csv")]) == 0
    with open(tabular_run / "p.csv", newline="", encoding="utf-8") as f:
        written = list(csv.reader(f))
    assert written[0] == [*HEADER, "prediction"] and [r[:-1] for r in written[1:]] == ROWS
    assert main(["predict", "--model", str(best), "--input", str(tabular_run / "dev.csv"),
                 "--output", str(tabular_run / "p.tsv")]) == 0
    lines = (tabular_run / "p.tsv").read_text().splitlines()
    assert len(lines) == len(ROWS) + 1 and lines[2].split("\t")[3] == 'I had such "high" hopes. It did not fit.'
    assert main(["evaluate", "--model", str(best), "--input", str(tabular_run / "dev.csv"),
                 "--output", str(tabular_run / "m.json")]) == 0
    assert json.loads((tabular_run / "m.json").read_text())["examples"] == len(ROWS)
