"""Model folders: round trips for every class, HF-style names, imports of old/foreign layouts, and bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.errors import CheckpointError
from bertkit.model import MODEL_CLASSES, BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel
from bertkit.model.checkpoint import save_pretrained
from bertkit.model.folder import TASK_HEADS, load_model
from model_helpers import TINY, write_vocab

def tiny_config(**overrides) -> BertConfig:
    return BertConfig(**{**TINY, **overrides})


def inputs(batch: int = 2, seq: int = 7, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, -2:] = 0
    return {"input_ids": torch.randint(5, 99, (batch, seq), generator=g), "attention_mask": mask}


def outputs(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every tensor field of a model's output, for comparing two models."""
    if type(model).__name__ == "BertForMultipleChoice":
        x = {k: v.unsqueeze(1).expand(-1, 2, -1) for k, v in x.items()}
    with torch.no_grad():
        out = model(**x)
    return [v for v in vars(out).values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("name", list(MODEL_CLASSES))
def test_round_trip_every_class(name: str, tmp_path: Path) -> None:
    cls = MODEL_CLASSES[name]
    model = cls(tiny_config()).eval()
    model.save_pretrained(tmp_path / "m")
    # An embedding head writes sentence-transformers' files beside its own (tests/model/test_pooling.py).
    sentence = ["1_Pooling", "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json"]
    expected = ["config.json", "model.safetensors", *(sentence if name == "BertForEmbedding" else [])]
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == sorted(expected)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "bert"
    loaded = cls.from_pretrained(tmp_path / "m")
    assert loaded.load_report.complete, str(loaded.load_report)
    assert not loaded.training
    before, after = outputs(model, inputs()), outputs(loaded, inputs())
    assert len(before) == len(after) > 0
    for a, b in zip(before, after):
        assert torch.equal(a, b)
    assert type(load_model(tmp_path / "m")) is cls


def test_saved_names_are_transformers_names(tmp_path: Path) -> None:
    model = BertForPreTraining(tiny_config())
    model.save_pretrained(tmp_path)
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.predictions.bias",
            "bert.embeddings.word_embeddings.weight", "bert.pooler.dense.weight",
            "bert.encoder.layer.1.attention.self.query.weight", "cls.seq_relationship.weight"} <= keys
    assert not any(k.startswith(("embeddings.", "encoder.")) for k in keys)
    state = load_file(tmp_path / "model.safetensors")
    assert torch.equal(state["cls.predictions.decoder.weight"], state["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(state["cls.predictions.decoder.bias"], state["cls.predictions.bias"])
    loaded = BertForPreTraining.from_pretrained(tmp_path)
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight


def test_base_checkpoint_into_head_initialises_and_reports(tmp_path: Path, caplog) -> None:
    base = BertModel(tiny_config())
    base.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="bertkit.model.checkpoint"):
        clf = BertForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert clf.load_report.missing == ["classifier.bias", "classifier.weight"]
    assert clf.load_report.unexpected == []
    assert "initialised freshly" in caplog.text and "classifier.weight" in caplog.text
    assert clf.classifier.out_features == 3
    assert torch.equal(clf.bert.encoder.layer[0].output.dense.weight, base.encoder.layer[0].output.dense.weight)
    with pytest.raises(CheckpointError, match="classifier.weight"):
        BertForSequenceClassification.from_pretrained(tmp_path, strict=True)


def test_pretraining_checkpoint_into_base_drops_heads(tmp_path: Path) -> None:
    pt = BertForPreTraining(tiny_config())
    pt.save_pretrained(tmp_path)
    base = BertModel.from_pretrained(tmp_path)
    report = base.load_report
    assert report.missing == []
    assert {"cls.predictions.bias", "cls.seq_relationship.weight", "cls.predictions.transform.dense.weight"} \
        <= set(report.unexpected)
    assert "dropped" in str(report)
    assert torch.equal(base.embeddings.word_embeddings.weight, pt.bert.embeddings.word_embeddings.weight)
    with pytest.raises(CheckpointError, match="cls.seq_relationship"):
        BertModel.from_pretrained(tmp_path, strict=True)


def test_old_names_prefixless_heads_position_ids_and_bin(tmp_path: Path) -> None:
    """TF-era gamma/beta, no `bert.` prefix, a position_ids buffer, decoder bias only, pytorch_model.bin."""
    model = BertForPreTraining(tiny_config()).eval()
    model.save_pretrained(tmp_path / "new")
    state = load_file(tmp_path / "new" / "model.safetensors")
    old = {}
    for key, value in state.items():
        key = key.removeprefix("bert.").replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        old[key] = value
    del old["cls.predictions.bias"]  # only the decoder's copy left
    old["embeddings.position_ids"] = torch.arange(512)[None]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text((tmp_path / "new" / "config.json").read_text())
    torch.save(old, tmp_path / "old" / "pytorch_model.bin")
    loaded = BertForPreTraining.from_pretrained(tmp_path / "old", strict=True)
    assert "embeddings.position_ids" in loaded.load_report.ignored
    assert "embeddings.LayerNorm.gamma" in loaded.load_report.renamed
    before, after = outputs(model, inputs()), outputs(loaded, inputs())
    assert len(before) == len(after) == 2  # prediction and next-sentence logits
    for a, b in zip(before, after):
        assert torch.equal(a, b)


def test_sharded_safetensors(tmp_path: Path) -> None:
    model = BertModel(tiny_config()).eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    keys = sorted(state)
    half = len(keys) // 2
    save_file({k: state[k] for k in keys[:half]}, tmp_path / "a.safetensors")
    save_file({k: state[k] for k in keys[half:]}, tmp_path / "b.safetensors")
    index = {"weight_map": {k: "a.safetensors" if i < half else "b.safetensors" for i, k in enumerate(keys)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    model.config.save(tmp_path / "config.json")
    loaded = BertModel.from_pretrained(tmp_path, strict=True)
    assert torch.equal(outputs(model, inputs())[0], outputs(loaded, inputs())[0])


def test_load_model_reads_architectures_else_the_task_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class comes from `architectures`; a config.json naming only a task gets the head its task declared in
    `TASK_HEADS` (given the folder's task settings; the task registry fills it: tests/tasks/test_registry.py); an
    unregistered task and a foreign class are refused, naming the fix."""
    BertModel(tiny_config()).save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d["architectures"] = ["BertForTokenClassification"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert type(load_model(tmp_path)).__name__ == "BertForTokenClassification"
    del d["architectures"]
    d.update(task="toy", task_settings={"spans": True})
    (tmp_path / "config.json").write_text(json.dumps(d))
    monkeypatch.setitem(TASK_HEADS, "toy", lambda settings: "BertForQuestionAnswering" if settings.get("spans")
                        else "BertForSequenceClassification")
    assert type(load_model(tmp_path)).__name__ == "BertForQuestionAnswering"
    assert type(load_model(tmp_path, "BertModel")).__name__ == "BertModel"  # the class asked for comes first
    d["task"] = "sentiment"
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(CheckpointError, match=r"config.json: names task 'sentiment' but no `architectures`, and no "
                                              r"registered task has that name \(registered: .*toy.*\); add"):
        load_model(tmp_path)
    d["architectures"] = ["RobertaModel"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(CheckpointError, match="names no BERT class bertkit has"):
        load_model(tmp_path)


def test_save_is_atomic_for_a_new_folder(tmp_path: Path) -> None:
    model = BertModel(tiny_config())

    def fail(folder: Path) -> None:
        assert (folder / "model.safetensors").is_file()
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_pretrained(model, tmp_path / "out", extra=fail)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a temporary one
    save_pretrained(model, tmp_path / "out", extra=lambda f: write_vocab(f, 99))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
    # An existing folder is updated file by file, keeping its other files.
    model.save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "vocab.txt").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# ----------------------------------------------------------------------------------------------------------------
# Bad input: each a CheckpointError naming the file and what is wrong.
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture
def good_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "good"
    BertModel(tiny_config()).save_pretrained(folder)
    write_vocab(folder, 99)
    return folder


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"nothere: no such model folder"):
        BertModel.from_pretrained(tmp_path / "nothere")


def test_missing_config(good_folder: Path) -> None:
    (good_folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        BertModel.from_pretrained(good_folder)


def test_config_not_json(good_folder: Path) -> None:
    (good_folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON"):
        BertModel.from_pretrained(good_folder)


def test_missing_weights(good_folder: Path) -> None:
    (good_folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"good: no weights file \(expected model.safetensors"):
        BertModel.from_pretrained(good_folder)


def test_truncated_safetensors(good_folder: Path) -> None:
    path = good_folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"model.safetensors: not a readable safetensors file"):
        BertModel.from_pretrained(good_folder)


def test_not_a_safetensors_file(good_folder: Path) -> None:
    (good_folder / "model.safetensors").write_text("this is a text file, not weights\n")
    with pytest.raises(CheckpointError, match=r"model.safetensors: not a readable safetensors file"):
        BertModel.from_pretrained(good_folder)


def test_bad_pytorch_bin(good_folder: Path) -> None:
    (good_folder / "model.safetensors").unlink()
    (good_folder / "pytorch_model.bin").write_bytes(b"not a pickle or a zip file")
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: not a readable PyTorch weights file"):
        BertModel.from_pretrained(good_folder)


def test_config_shapes_do_not_match_weights(good_folder: Path) -> None:
    d = json.loads((good_folder / "config.json").read_text())
    d["intermediate_size"] = 40
    (good_folder / "config.json").write_text(json.dumps(d))
    with pytest.raises(CheckpointError) as e:
        BertModel.from_pretrained(good_folder)
    msg = str(e.value)
    assert "model.safetensors" in msg
    assert "'encoder.layer.0.intermediate.dense.weight': shape (37, 32) in the file, (40, 32) expected" in msg


def test_vocab_larger_than_config_is_an_error(good_folder: Path) -> None:
    write_vocab(good_folder, 100)
    with pytest.raises(CheckpointError, match=r"vocab.txt: the vocabulary has 100 tokens but .*config.json says "
                                              r"vocab_size 99"):
        BertModel.from_pretrained(good_folder)


def test_vocab_smaller_than_padded_vocab_size_loads(good_folder: Path) -> None:
    write_vocab(good_folder, 98)  # e.g. a checkpoint whose vocab_size was padded past its vocab.txt
    assert BertModel.from_pretrained(good_folder).config.vocab_size == 99


def test_unknown_override(good_folder: Path) -> None:
    with pytest.raises(CheckpointError, match="hiden_size"):
        BertModel.from_pretrained(good_folder, hiden_size=3)


def test_half_precision_file_and_dtype_option(tmp_path: Path) -> None:
    """A float16 file loads into a float32 model; dtype= converts after loading; an empty target folder is filled."""
    model = BertModel(tiny_config()).half()
    (tmp_path / "empty").mkdir()
    model.save_pretrained(tmp_path / "empty")
    loaded = BertModel.from_pretrained(tmp_path / "empty")
    assert loaded.embeddings.word_embeddings.weight.dtype == torch.float32
    assert torch.equal(loaded.embeddings.word_embeddings.weight.half(), model.embeddings.word_embeddings.weight)
    assert BertModel.from_pretrained(tmp_path / "empty", dtype=torch.bfloat16).pooler.dense.weight.dtype == torch.bfloat16
