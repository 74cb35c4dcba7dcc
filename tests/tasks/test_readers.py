"""Readers on the real files: row counts as the data README states them, GLUE layouts, CoNLL sentences."""

from __future__ import annotations

import dataclasses

import pytest

from bertkit.tasks import get_task
from bertkit.tasks.ner import iob1_to_iob2, is_iob1, read_conll


@pytest.mark.parametrize("name, split, rows, glue", [
    ("sst2", "train", 67349, "sst2"), ("sst2", "dev", 872, "sst2"),
    ("cola", "train", 8551, "cola"), ("cola", "dev", 1043, "cola"),
    ("mrpc", "train", 3668, "mrpc"), ("mrpc", "dev", 408, "mrpc"),
    ("rte", "train", 2490, "rte"), ("rte", "dev", 277, "rte"),
    ("qnli", "dev", 5463, "qnli"),
])
def test_glue_row_counts_and_layouts(data_dir, name, split, rows, glue) -> None:
    task = get_task("classification")
    settings = task.settings({})
    examples = task.read(data_dir / name / f"{split}.tsv", settings)
    assert len(examples) == rows
    assert settings == task.settings({})  # reading never changes the settings; fitting records the layout
    assert task.fit_labels(examples, settings).glue == glue
    assert all(ex.text and ex.label is not None for ex in examples)
    pair = name in ("mrpc", "rte", "qnli")
    assert all((ex.pair is not None) == pair for ex in examples)


def test_glue_labels_and_main_metrics(data_dir) -> None:
    task = get_task("classification")
    expect = {"cola": (["0", "1"], "matthews"), "mrpc": (["0", "1"], "f1"),
              "rte": (["entailment", "not_entailment"], "accuracy"), "sst2": (["0", "1"], "accuracy")}
    for name, (labels, metric) in expect.items():
        settings = task.settings({})
        settings = task.fit_labels(task.read(data_dir / name / "dev.tsv", settings), settings)
        assert settings.label_names == labels and settings.main_metric == metric


def test_mrpc_bom_and_quotes(data_dir) -> None:
    task = get_task("classification")
    examples = task.read(data_dir / "mrpc" / "dev.tsv", task.settings({}))
    assert examples[0].pair.startswith('"The foodservice pie')  # unescaped quote kept, no CSV quoting
    assert examples[0].row[0] == "1"  # the BOM is not part of the first field


def test_unlabelled_test_file_reads_for_prediction(data_dir) -> None:
    task = get_task("classification")
    examples = task.read(data_dir / "sst2" / "test.tsv", task.settings({}), labelled=False)
    assert len(examples) == 1821 and all(ex.label is None for ex in examples)


def test_generic_csv_tsv_jsonl_columns(tmp_path) -> None:
    task = get_task("classification")
    (tmp_path / "a.csv").write_text('id,review,stars\n1,"good, really",5\n2,"bad ""very""",1\n')
    ex = task.read(tmp_path / "a.csv", task.settings({"text_column": "review", "label_column": "stars"}))
    assert [(e.text, e.label) for e in ex] == [("good, really", "5"), ('bad "very"', "1")]
    (tmp_path / "b.tsv").write_text("x\tq\t0.5\ny\tr\t4\n")
    s = task.settings({"text_column": "0", "text_pair_column": "1", "label_column": "2", "regression": True})
    ex = task.read(tmp_path / "b.tsv", s)
    assert [(e.text, e.pair, e.label) for e in ex] == [("x", "q", 0.5), ("y", "r", 4.0)]
    (tmp_path / "c.jsonl").write_text('{"text": "a", "label": ["x", "y"]}\n{"text": "b", "label": "y"}\n')
    s = task.settings({"multi_label": True})
    ex = task.read(tmp_path / "c.jsonl", s)
    assert [e.label for e in ex] == [["x", "y"], ["y"]]
    assert task.fit_labels(ex, s).label_names == ["x", "y"]
    (tmp_path / "d.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label": "0"}\n')
    ex = task.read(tmp_path / "d.jsonl", task.settings({}))
    assert [e.label for e in ex] == ["1", "0"]  # JSON 1 and "1" are one label


def test_gzipped_files_read_like_plain_ones(tmp_path) -> None:
    """A .gz data file reads as its decompressed text (the delimiter from the suffix before .gz); a broken one is a
    DataError naming the file."""
    import gzip

    from bertkit.errors import DataError

    task = get_task("classification")
    text = 'id,review,stars\r\n1,"good, really",5\r\n2,bad,1\r\n'
    (tmp_path / "a.csv").write_text(text)
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    settings = task.settings({"text_column": "review", "label_column": "stars"})
    plain, packed = task.read(tmp_path / "a.csv", settings), task.read(tmp_path / "a.csv.gz", settings)
    assert [(e.text, e.label) for e in packed] == [(e.text, e.label) for e in plain] == [("good, really", "5"),
                                                                                          ("bad", "1")]
    (tmp_path / "b.tsv.gz").write_bytes(gzip.compress(b"x\t1\n"))
    assert [(e.text, e.label) for e in task.read(tmp_path / "b.tsv.gz", task.settings({"text_column": "0",
                                                                                       "label_column": "1"}))] == [("x", "1")]
    (tmp_path / "broken.tsv.gz").write_bytes(gzip.compress(b"x\t1\n" * 100)[:-20])
    with pytest.raises(DataError, match="broken.tsv.gz.*gzip"):
        task.read(tmp_path / "broken.tsv.gz", settings)


def test_conll_counts(data_dir) -> None:
    train = read_conll(data_dir / "conll2003" / "train.txt")
    valid = read_conll(data_dir / "conll2003" / "valid.txt")
    assert len(train) == 14041 and len(valid) == 3250
    assert sum(len(s.words) for s in valid) == 51362
    assert sum(len(s.words) for s in train) == 203621
    assert not is_iob1([s.tags for s in train])  # the shared copy is IOB2
    assert sum(t == "B-PER" for s in train for t in s.tags) == 6600


def test_iob1_is_converted() -> None:
    assert iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]) == \
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG"]
    assert is_iob1([["I-PER"]]) and not is_iob1([["B-PER", "I-PER"]])


def test_ner_features_label_first_piece_only(tokenizer) -> None:
    from bertkit.tasks.ner import TaggedSentence

    task = get_task("ner")
    s = TaggedSentence(1, ["Johanson", "visited", "Zurich"], ["B-PER", "O", "B-LOC"])
    settings = task.fit_labels([s], task.settings({"max_length": 128}))
    (f,) = task.features([s], tokenizer, settings, training=True)
    names = settings.label_names
    labelled = [(i, names[lab]) for i, lab in enumerate(f["labels"]) if lab != -100]
    assert [lab for _, lab in labelled] == ["B-PER", "O", "B-LOC"]
    assert [i for i, _ in labelled] == f["word_starts"]
    # "johanson" splits into two pieces; only the first is labelled
    assert tokenizer.convert_ids_to_tokens(f["input_ids"]) == ["[CLS]", "johan", "##son", "visited", "zurich", "[SEP]"]
    assert f["word_starts"] == [1, 3, 4]
    # Truncation: words that do not fit are predicted O, whatever the logits of the pieces that did fit say.
    settings = dataclasses.replace(settings, max_length=4)
    (f,) = task.features([s], tokenizer, settings, training=False)
    assert f["word_starts"] == [1, None, None]  # [CLS] johan ##son [SEP]
    import numpy as np
    logits = np.zeros((len(f["input_ids"]), len(names)))
    logits[:, names.index("B-PER")] = 1.0  # every piece says B-PER
    assert task.decode([s], [f], [{"logits": logits}], settings) == [["B-PER", "O", "O"]]


def test_one_reading_of_classifier_logits() -> None:
    """read_logits is what evaluation, predict and the server all use: softmax, per-label sigmoid, or the value."""
    import numpy as np

    from bertkit.tasks.classification import read_logits

    single = read_logits(np.array([0.0, 2.0, 1.0]), "single_label_classification", ["a", "b", "c"])
    e = np.exp([0.0, 2.0, 1.0])
    assert single["label"] == "b" and single["probability"] == pytest.approx(e[1] / e.sum())
    assert sum(single["probabilities"].values()) == pytest.approx(1.0)
    multi = read_logits(np.array([1.0, -1.0, 0.5]), "multi_label_classification", ["a", "b", "c"])
    assert multi["labels"] == ["a", "c"] and multi["probabilities"]["b"] == pytest.approx(1 / (1 + np.e))
    assert read_logits(np.array([3.25]), "regression", [])["value"] == 3.25
    assert read_logits(np.array([3.25]), None, [])["value"] == 3.25  # one output, no problem type: regression
