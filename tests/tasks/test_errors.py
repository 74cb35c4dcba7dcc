"""Bad input: each a clear error naming the file, line or field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.errors import CheckpointError, DataError
from bertkit.jobs import evaluate
from bertkit.jobs.finetune import FinetuneConfig, finetune
from bertkit.tasks import get_task


def finetune_config(task: str, model: Path, train: Path, dev: Path, output: Path, **options: str) -> FinetuneConfig:
    return FinetuneConfig.from_dict({"task": task, "model": str(model), "train": str(train), "dev": str(dev),
                                     "options": options, "training": {"output_dir": str(output)}})


def test_dev_label_that_train_never_had(tmp_path: Path) -> None:
    task = get_task("classification")
    (tmp_path / "train.tsv").write_text("text\tlabel\ngood\t1\nbad\t0\n")
    (tmp_path / "dev.tsv").write_text("text\tlabel\nfine\t1\nodd\t2\n")
    settings = task.settings({"text_column": "text", "label_column": "label"})
    settings = task.fit_labels(task.read(tmp_path / "train.tsv", settings), settings)
    with pytest.raises(DataError, match=r"dev\.tsv:3: label '2' never occurs in the training data"):
        task.read(tmp_path / "dev.tsv", settings)  # fitted settings: reading checks the labels


def test_ner_dev_tag_that_train_never_had(tmp_path: Path) -> None:
    task = get_task("ner")
    (tmp_path / "train.txt").write_text("John B-PER\nran O\n")
    (tmp_path / "dev.txt").write_text("-DOCSTART- O\n\nParis B-LOC\n")
    settings = task.settings({"max_length": 16})
    settings = task.fit_labels(task.read(tmp_path / "train.txt", settings), settings)
    with pytest.raises(DataError, match=r"dev\.txt:3: tag 'B-LOC' never occurs"):
        task.read(tmp_path / "dev.txt", settings)


def test_conll_wrong_column_count(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-ORG\n")
    with pytest.raises(DataError, match=r"bad\.txt:5: 3 columns, expected 4"):
        get_task("ner").read(tmp_path / "bad.txt", get_task("ner").settings())


def test_conll_bad_tag(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_text("EU ORG\n")
    with pytest.raises(DataError, match=r"bad\.txt:1: tag 'ORG' is not O, B-TYPE or I-TYPE"):
        get_task("ner").read(tmp_path / "bad.txt", get_task("ner").settings())


def test_tsv_row_with_a_stray_tab(tmp_path: Path) -> None:
    (tmp_path / "t.tsv").write_text("sentence\tlabel\nok\t1\nbroken\ttext\t0\n")
    with pytest.raises(DataError, match=r"t\.tsv:3: 3 tab-separated fields, the header has 2"):
        get_task("classification").read(tmp_path / "t.tsv", get_task("classification").settings())


def test_missing_file_and_bad_json_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.tsv: no such file"):
        get_task("classification").read(tmp_path / "nope.tsv", get_task("classification").settings())
    (tmp_path / "x.jsonl").write_text('{"text": "a", "label": 1}\n{"text": \n')
    with pytest.raises(DataError, match=r"x\.jsonl:2: not valid JSON"):
        get_task("classification").read(tmp_path / "x.jsonl", get_task("classification").settings())
    (tmp_path / "mc.jsonl").write_text('{"context": "a", "choices": ["x", "y"], "label": 2}\n')
    with pytest.raises(DataError, match=r"mc\.jsonl:1: label 2 is not a choice index 0\.\.1"):
        get_task("multiple-choice").read(tmp_path / "mc.jsonl", get_task("multiple-choice").settings())


def test_empty_dev_set(tmp_path: Path, minilm_dir: Path) -> None:
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    (tmp_path / "dev.tsv").write_text("")
    with pytest.raises(DataError, match=r"dev\.tsv: no dev examples found"):
        finetune(finetune_config("classification", minilm_dir, tmp_path / "train.tsv", tmp_path / "dev.tsv",
                                 tmp_path / "out"))


def _finetuned_folder(tmp_path: Path, tokenizer, task: str, cls_name: str, labels: list[str]) -> Path:
    """A tiny fine-tuned-looking folder: task, label names, tokenizer."""
    from bertkit.model import MODEL_CLASSES, BertConfig

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=37, num_labels=len(labels), label_names=labels, task=task,
                        task_settings={"max_length": 32, "label_names": labels})
    folder = tmp_path / f"{task}_model"
    MODEL_CLASSES[cls_name](config).save_pretrained(str(folder))
    tokenizer.save_pretrained(folder)
    return folder


def test_task_model_mismatch(tmp_path: Path, tokenizer) -> None:
    folder = _finetuned_folder(tmp_path, tokenizer, "ner", "BertForTokenClassification", ["O", "B-PER", "I-PER"])
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    with pytest.raises(CheckpointError, match=r"ner_model: a model fine-tuned for task 'ner'"):
        finetune(finetune_config("classification", folder, tmp_path / "train.tsv", tmp_path / "train.tsv",
                                 tmp_path / "out"))


def test_head_size_does_not_match_the_label_set(tmp_path: Path, tokenizer) -> None:
    folder = _finetuned_folder(tmp_path, tokenizer, "classification", "BertForSequenceClassification", ["0", "1"])
    (tmp_path / "train.tsv").write_text("text\tlabel\ngood\t1\nbad\t0\nmeh\t2\n")
    with pytest.raises(CheckpointError, match=r"the head has 2 labels \['0', '1'\], the training data has 3"):
        finetune(finetune_config("classification", folder, tmp_path / "train.tsv", tmp_path / "train.tsv",
                                 tmp_path / "out", text_column="text", label_column="label"))


def test_head_weights_that_do_not_match_config(tmp_path: Path, tokenizer) -> None:
    import json

    folder = _finetuned_folder(tmp_path, tokenizer, "classification", "BertForSequenceClassification", ["0", "1"])
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(num_labels=3, label_names=["0", "1", "2"], id2label={"0": "0", "1": "1", "2": "2"}, label2id={"0": 0, "1": 1, "2": 2})
    (folder / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngood\t1\n")
    with pytest.raises(CheckpointError, match=r"classifier\.weight.*\(2, 32\) in the file, \(3, 32\) expected"):
        evaluate.run(evaluate.EvaluateConfig(str(folder), str(tmp_path / "dev.tsv")))


def test_evaluate_needs_a_finetuned_folder(tmp_path: Path, minilm_dir: Path) -> None:
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngood\t1\n")
    with pytest.raises(CheckpointError, match=r"no bertkit task"):
        evaluate.run(evaluate.EvaluateConfig(str(minilm_dir), str(tmp_path / "dev.tsv")))


def test_cli_prints_the_error_not_a_traceback(tmp_path: Path, minilm_dir: Path, capsys) -> None:
    from bertkit.cli import main

    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    code = main(["finetune", "--task", "classification", "--model", str(minilm_dir), "--train",
                 str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "missing.tsv"), "--output", str(tmp_path / "o")])
    assert code == 1
    err = capsys.readouterr().err
    assert "missing.tsv: no such file" in err and "Traceback" not in err


@pytest.mark.parametrize("stray", ["positive", "1.5"])
def test_one_stray_label_is_an_error_not_a_new_class(tmp_path: Path, stray: str) -> None:
    rows = [f"s{i}\t{i % 2}" for i in range(40)]
    rows[17] = f"odd one\t{stray}"
    (tmp_path / "sst.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")  # the GLUE SST-2 layout
    with pytest.raises(DataError, match=rf"sst\.tsv:19: label '{stray}' is not a sst2 label \(expected one of 0, 1\)"):
        get_task("classification").read(tmp_path / "sst.tsv", get_task("classification").settings({}))
    (tmp_path / "any.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")  # no benchmark layout
    named = {"text_column": "text", "label_column": "label"}
    with pytest.raises(DataError, match=rf"any\.tsv:19: label '{stray}' occurs only on this row"):
        get_task("classification").read(tmp_path / "any.tsv", get_task("classification").settings(named))
    rows[18] = f"another\t{stray}"  # two rows: a real (small) class, unless it is a word among numbers
    (tmp_path / "any.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    task = get_task("classification")
    if stray == "positive":  # the kind rule holds whatever the counts; listing the labels accepts the class
        with pytest.raises(DataError, match=r"any\.tsv:19: label 'positive' occurs only on 2 rows .*not a number"):
            task.read(tmp_path / "any.tsv", task.settings(named))
        named["labels"] = ["0", "1", "positive"]
    assert len(task.read(tmp_path / "any.tsv", task.settings(named))) == 40
