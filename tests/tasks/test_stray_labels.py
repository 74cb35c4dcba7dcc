"""Stray labels: a label that looks like a typo (a word among numbers, a number among words, a label on a few rows
below frequent classes) would silently add a class, so the classification reader refuses it naming its row, in a
file of any size and every format; `--labels` accepts a rare class that is real, and is a finetune option.

The 2026-11-28 attack report's S10: a 0/1 file whose minority class had 9 rows, plus one 'l' row, made a 3-class
model, because the check needed two classes of 10 rows (the fix of the 2026-11-24 report's N6 held only for large
files)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertkit.errors import ConfigError, DataError
from bertkit.tasks import get_task
from bertkit.tasks.classification import ClassificationTask

CLASSIFY = get_task("classification")
NAMED = {"text_column": "text", "label_column": "label"}


def labelled(path: Path, labels: list[str]) -> Path:
    """A TSV, CSV or JSONL file of one review per label."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": f"review {i}", "label": lab}) + "\n"
                                for i, lab in enumerate(labels)))
    else:
        sep = "," if path.suffix == ".csv" else "\t"
        path.write_text(f"text{sep}label\n" + "".join(f"review {i}{sep}{lab}\n" for i, lab in enumerate(labels)))
    return path


def read(path: Path, **options: object) -> list:
    return CLASSIFY.read(path, CLASSIFY.settings({**NAMED, **options}))


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".jsonl"])
def test_a_word_among_numbers_is_a_stray_whatever_the_counts(tmp_path: Path, suffix: str) -> None:
    """The kind rule holds whatever the class counts: every mix of 0/1 counts from the report's (30 and 9) down to a
    handful of rows, and up to 40/40, with a stray word at the start, the middle or the end, is refused naming the
    stray's line; and a number among words too."""
    first_line = 1 if suffix == ".jsonl" else 2
    failures = []
    for zeros, ones in ((30, 9), (9, 30), (3, 3), (5, 1), (12, 0), (40, 40)):
        for stray in ("l", "O", "positive", "x"):
            for at in (0, (zeros + ones) // 2, zeros + ones):
                labels = ["0"] * zeros + ["1"] * ones
                labels.insert(at, stray)
                path = labelled(tmp_path / f"s{suffix}", labels)
                try:
                    read(path)
                    failures.append(f"{zeros}/{ones} + {stray!r} at row {at}: accepted")
                except DataError as e:
                    pattern = (rf"{re.escape(str(path))}:{at + first_line}: label '{stray}' occurs only on this row and "
                               r"is not a number, unlike the others.* --labels '\[0, ")
                    if not re.search(pattern, str(e)):
                        failures.append(f"{zeros}/{ones} + {stray!r} at row {at}: {e}")
    words = ["neg"] * 20 + ["pos"] * 7
    words.insert(11, "1")
    with pytest.raises(DataError, match=rf":{11 + first_line}: label '1' occurs only on this row and is a number "
                                        r"among words, while 'neg', 'pos' occur at least 7 times each"):
        read(labelled(tmp_path / f"w{suffix}", words))
    assert not failures, "\n".join(failures)


def test_the_report_file_is_refused_and_real_rare_classes_still_read(tmp_path: Path) -> None:
    """S10 as reported (30 zeros, 9 ones, one 'l'); listing the labels accepts the class; a rare class of the labels'
    own kind in a small file, or a word class on as many rows as its numbers' tenth, passes as it is."""
    path = labelled(tmp_path / "stray_small.tsv", ["0"] * 30 + ["1"] * 9 + ["l"])
    with pytest.raises(DataError, match=r"stray_small\.tsv:41: label 'l' occurs only on this row and is not a "
                                        r"number, unlike the others, while '0', '1' occur at least 9 times each: a "
                                        r"typo\? It would make a class of its own \(3 classes\)"):
        read(path)
    accepted = CLASSIFY.settings({**NAMED, "labels": ["0", "1", "l"]})
    assert CLASSIFY.fit_labels(CLASSIFY.read(path, accepted), accepted).label_names == ["0", "1", "l"]
    for labels in (["0"] * 30 + ["1"] * 9 + ["2"], ["0"] * 5 + ["1"] * 5 + ["2"] * 2,
                   ["neg"] * 9 + ["pos"] * 2 + ["neutral"], ["0"] * 19 + ["1"] * 19 + ["1.5"] * 2,
                   ["0"] * 20 + ["1"] * 20 + ["unsure"] * 5):
        assert len(read(labelled(tmp_path / "rare.tsv", labels))) == len(labels), labels


def test_typo_labels_are_caught_and_rare_real_classes_are_accepted(tmp_path: Path) -> None:
    """N6: only exactly one singleton label was caught; two typo rows (`l` twice, or `l` and `O`) in a 400-row 0/1
    file made a 3- or 4-class model. A genuine rare class is accepted by listing the labels."""
    task = ClassificationTask()
    named = {"text_column": "text", "label_column": "label"}
    binary = ["1" if i % 5 else "0" for i in range(400)]  # 80 zeros, 320 ones
    for typos, message in ((("l", "l"), r"t\.tsv:13: label 'l' occurs only on 2 rows \(lines 13, 23\) and is not a "
                                        r"number, unlike the others, while '0', '1' occur at least 80 times each"),
                           (("l", "O"), r"t\.tsv:13: label 'l' occurs only on this row .*also 'O' on line 23"),
                           (("2", "2"), r"t\.tsv:13: label '2' occurs only on 2 rows")):
        labels = list(binary)
        labels[11], labels[21] = typos
        with pytest.raises(DataError, match=message):
            task.read(labelled(tmp_path / "t.tsv", labels), task.settings(named))
    # A word among numbers on more rows (20 of 2,000) is caught too; the message offers the way to accept it.
    labels = ["1" if i % 2 else "0" for i in range(2000)]
    for i in range(0, 2000, 100):
        labels[i] = "x"
    with pytest.raises(DataError, match=r"label 'x' occurs only on 20 rows .* --labels '\[0, 1, x\]'"):
        task.read(labelled(tmp_path / "t.tsv", labels), task.settings(named))
    accepted = task.settings({**named, "labels": ["0", "1", "x"]})
    fitted = task.fit_labels(task.read(tmp_path / "t.tsv", accepted), accepted)
    assert fitted.label_names == ["0", "1", "x"]

    # 5-way sentiment: a rare class of 5 rows passes as it is; one of 3 rows needs --labels.
    five = [str(i % 4) for i in range(400)] + ["4"] * 5
    assert len(task.read(labelled(tmp_path / "s.tsv", five), task.settings(named))) == 405
    with pytest.raises(DataError, match=r"s\.tsv:402: label '4' occurs only on 3 rows"):
        task.read(labelled(tmp_path / "s.tsv", five[:-2]), task.settings(named))
    five_labels = task.settings({**named, "labels": ["0", "1", "2", "3", "4"]})
    assert len(task.read(tmp_path / "s.tsv", five_labels)) == 403
    # With --labels, a label outside the list is an error naming its line; a listed label never seen is refused.
    with pytest.raises(DataError, match=r"t\.tsv:3: label '1' is not one of the labels given by --labels"):
        task.read(labelled(tmp_path / "t.tsv", ["0", "1"]), task.settings({**named, "labels": ["0", "2"]}))
    two = task.settings({**named, "labels": ["0", "1", "2"]})
    with pytest.raises(ConfigError, match=r"labels \['2'\] never occur in the training examples"):
        task.fit_labels(task.read(labelled(tmp_path / "t.tsv", binary), two), two)


def test_labels_is_a_finetune_flag() -> None:
    """N6: the way to accept a rare class is a command-line option, `--labels '[a, b, c]'`."""
    from bertkit.cli import build_parser
    from bertkit.cli.finetune import resolve_finetune_config

    args = build_parser().parse_args(["finetune", "--task", "classification", "--model", "m", "--train", "t.tsv",
                                      "--dev", "d.tsv", "--output", "o", "--labels", "[neg, neutral, pos]"])
    config = resolve_finetune_config(args)
    assert ClassificationTask().settings(config.options).labels == ["neg", "neutral", "pos"]
