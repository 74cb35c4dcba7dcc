"""Typed saved settings (issue 26, item 1): each task's settings are a dataclass that round-trips through config.json
as it is, folders written with older dict forms still load, reading a file never changes the settings (fitting
returns new ones), and each task declares its head (class and sizes) in one place."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from bertkit.errors import ConfigError
from bertkit.model import BertConfig
from bertkit.model import MODEL_CLASSES
from bertkit.model.folder import TASK_HEADS
from bertkit.tasks import TASKS, get_task


def fitted_settings(name: str, data_dir: Path, tmp_path: Path):  # noqa: ANN201
    """A task's settings fitted on a small real file, the file, and the settings before fitting."""
    task = get_task(name)
    if name == "classification":
        path, options = data_dir / "mrpc" / "dev.tsv", {"max_length": 64}
    elif name == "ner":
        path = tmp_path / "iob1.txt"  # IOB1 tags: the scheme is recorded by fitting, not by reading
        path.write_text("John I-PER\nSmith I-PER\nran O\n\nParis I-LOC\n", encoding="utf-8")
        options = {"max_length": 32, "frozen": True, "tagger": "linear"}
    elif name == "qa":
        path, options = f"{data_dir / 'squad_v1.1' / 'dev-v1.1.json'}#0:1", {"max_length": 128, "doc_stride": 32}
    elif name == "embedding":  # scored pairs: their gold similarities are predictions too
        path = tmp_path / "scored.tsv"
        path.write_text("text_a\ttext_b\tscore\na cat\ta kitten\t0.9\na cat\ta car\t0.1\nrain\tstorm\t0.6\n",
                        encoding="utf-8")
        options = {"loss": "cosent"}
    else:
        path = tmp_path / "mc.jsonl"
        path.write_text('{"context": "a", "choices": ["x", "y", "z"], "label": 2}\n', encoding="utf-8")
        options = {}
    settings = task.settings(options)
    return task, settings, path


@pytest.mark.parametrize("name", ["classification", "ner", "qa", "multiple-choice"])
def test_settings_round_trip_through_config_json_and_reading_changes_nothing(name: str, data_dir: Path,
                                                                             tmp_path: Path) -> None:
    task, settings, path = fitted_settings(name, data_dir, tmp_path)
    before = copy.deepcopy(settings)
    examples = task.read(path, settings)
    assert settings == before  # reading leaves the settings as they were
    fitted = task.fit_labels(examples, settings)
    assert settings == before and fitted is not settings and type(fitted) is task.settings_class
    written = json.loads(json.dumps(fitted.to_dict()))  # config.json's task_settings, as it is
    assert task.settings_of(written) == fitted
    # The head is declared once: its class and the BertConfig fields that size it, all of which BertConfig takes.
    head = task.head(fitted)
    assert head.class_name in MODEL_CLASSES and TASK_HEADS[name](written) == head.class_name
    BertConfig(**{**head.config, "task": task.name, "task_settings": written})
    if name == "classification":
        assert (fitted.glue, fitted.main_metric, fitted.label_names) == ("mrpc", "f1", ["0", "1"])
        assert head.config["problem_type"] == "single_label_classification" and head.config["num_labels"] == 2
    elif name == "ner":
        assert fitted.source_scheme == "iob1" and fitted.label_names == ["O", "B-LOC", "B-PER", "I-PER"]
        assert head.class_name == "BertForFrozenTokenClassification" and head.config["frozen_tagger"]["tagger"] == \
            "linear"
    elif name == "multiple-choice":
        assert fitted.num_choices == 3


def test_old_dict_forms_load_and_bad_values_are_named(caplog: pytest.LogCaptureFixture) -> None:
    """Folders written before the settings were typed: their task_settings dicts load (keys they lacked take the
    defaults); a key this version does not know is left out with a warning naming it; a value of the wrong type is
    a ConfigError naming the field."""
    old_frozen = {"max_length": 64, "label_names": ["O", "B-X"], "frozen": True, "frozen_features": "last",
                  "tagger": "bilstm", "tagger_hidden": 8, "tagger_dropout": 0.1, "encoder": "/some/folder"}
    ner = get_task("ner").settings_of(old_frozen)
    assert ner.frozen and ner.tagger_hidden == 8 and ner.encoder == "/some/folder"
    old_tabular = {"max_length": 32, "template": "{Title}", "numeric_columns": ["Age"],
                   "numeric_stats": {"Age": [40.0, 9.0]}, "label_names": ["0", "1"]}  # before numeric_range
    cls = get_task("classification").settings_of(old_tabular)
    assert cls.numeric_range is None and cls.pairs is None and cls.numeric_stats == {"Age": [40.0, 9.0]}
    qa = get_task("qa").settings_of({"max_length": 384, "doc_stride": 128, "n_best": 20, "max_answer_length": 30,
                                       "version_2": False, "null_threshold": 0.0, "main_metric": "f1"})
    assert qa.doc_stride == 128
    with caplog.at_level("WARNING"):
        assert get_task("multiple-choice").settings_of({"max_length": 64, "shiny_new_option": 1}).max_length == 64
    assert "shiny_new_option" in caplog.text
    with pytest.raises(ConfigError, match=r"max_length.*expected an integer"):
        get_task("qa").settings_of({"max_length": "long"})


def test_a_frozen_folder_written_before_frozen_tagger_opens_with_its_tagger(tmp_path: Path) -> None:
    """The frozen tagger is sized by BertConfig.frozen_tagger now; a folder written before (its sizes in
    task_settings only) opens with the same tagger."""
    from bertkit.model.heads import BertForFrozenTokenClassification

    sizes = {"frozen_features": "last", "tagger": "bilstm", "tagger_hidden": 6, "tagger_dropout": 0.0}
    tiny = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                num_labels=3)
    new = BertForFrozenTokenClassification(BertConfig(**tiny, frozen_tagger=sizes))
    old = BertForFrozenTokenClassification(BertConfig(**tiny, task_settings=sizes))
    assert new.lstm.hidden_size == old.lstm.hidden_size == 6
    with pytest.raises(ConfigError, match="frozen_tagger"):
        BertForFrozenTokenClassification(BertConfig(**tiny, frozen_tagger={**sizes, "taggr": "linear"}))


def test_every_registered_task_declares_its_contract() -> None:
    """Each task: typed options and settings, a head, and a serving class whose example requests make
    examples."""
    for cls in TASKS.values():
        task = cls()
        # The embedding task has no endpoint of its own: the server's /embed and /search serve its folders.
        assert (task.serving is not None or task.name == "embedding") and task.settings_class is not None
        settings = task.settings({})
        assert task.head(settings).class_name == TASK_HEADS[task.name]({})


GOLD = {"classification": lambda examples: [ex.label for ex in examples],
        "ner": lambda examples: [s.tags for s in examples],
        "qa": lambda examples: [ex.answers[0][0] if ex.answers else "" for ex in examples],
        "multiple-choice": lambda examples: [ex.label for ex in examples],
        "embedding": lambda examples: [ex.score for ex in examples]}
"""Each task's reference predictions of its examples."""


@pytest.mark.parametrize("name", list(TASKS))
def test_score_takes_settings_typed_or_as_a_mapping(name: str, data_dir: Path, tmp_path: Path) -> None:
    """Task.score with a plain dict of settings (config.json's form, and the form `score` was documented with until
    2026-11-25) scores as with the typed settings, read through settings_of (a wrong value named there); any
    other value is a ConfigError saying what score expects."""
    assert set(GOLD) == set(TASKS)  # a newly registered task is tested here too
    task, settings, path = fitted_settings(name, data_dir, tmp_path)
    examples = task.read(path, settings)
    fitted = task.fit_labels(examples, settings)
    predictions = GOLD[name](examples)
    saved = json.loads(json.dumps(dataclasses.asdict(fitted)))
    assert task.score(examples, predictions, saved) == task.score(examples, predictions, fitted)
    assert task.score(examples, predictions, settings=saved) == task.score(examples, predictions, fitted)
    with pytest.raises(ConfigError, match=r"max_length.*expected an integer"):
        task.score(examples, predictions, {**saved, "max_length": "long"})
    expected = f"expected {task.settings_class.__name__} or a mapping of its fields, found list"
    with pytest.raises(ConfigError, match=f"task {name}.*{expected}"):
        task.score(examples, predictions, [saved])
