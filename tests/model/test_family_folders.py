"""The BERT family's folders through bertkit: written back in the family's own layout (transformers reads the same
weights under the same names), a head fine-tuned in bertkit saved as the family's class, bertkit-only options kept in
bertkit's layout, every tensor of the encoder checked (missing, left over, outside the layout: a CheckpointError
naming it), the configurations bertkit refuses named, and `bertkit convert` both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.errors import CheckpointError, ConfigError
from bertkit.model import BertConfig
from bertkit.model.folder import load_model
from family_models import FAMILIES, hf_config, heads, max_diffs, padded_batch, write_folder
from model_helpers import run_cli

transformers = pytest.importorskip("transformers", reason="the family tests need it (pip install 'bertkit[test]')")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("family", FAMILIES)
def test_saved_folder_is_the_family_folder(family: str, tmp_path: Path) -> None:
    """bertkit's save of a family folder holds every tensor transformers wrote, under its names (plus the tied
    decoder copies transformers 4 wrote), with the family's model_type and class; transformers reads it back to the
    same weights."""
    for name, theirs_name in heads(family).items():
        theirs = write_folder(family, name, tmp_path / theirs_name / "hf")
        load_model(tmp_path / theirs_name / "hf").save_pretrained(str(tmp_path / theirs_name / "bertkit"))
        written = load_file(tmp_path / theirs_name / "bertkit" / "model.safetensors")
        original = load_file(tmp_path / theirs_name / "hf" / "model.safetensors")
        assert set(original) <= set(written), sorted(set(original) - set(written))
        tied = {"vocab_projector.weight", "lm_head.decoder.weight", "lm_head.decoder.bias", "predictions.decoder.weight",
                "predictions.decoder.bias", "generator_lm_head.weight"}
        assert set(written) - set(original) <= tied, sorted(set(written) - set(original))
        config = read_json(tmp_path / theirs_name / "bertkit" / "config.json")
        assert (config["model_type"], config["architectures"]) == (family, [theirs_name])
        back = getattr(transformers, theirs_name).from_pretrained(tmp_path / theirs_name / "bertkit")
        for key, value in theirs.state_dict().items():
            assert torch.equal(back.state_dict()[key], value), (theirs_name, key)


@pytest.mark.parametrize("family", ["roberta", "distilbert", "electra"])
def test_a_head_trained_in_bertkit_is_saved_as_the_family_class(family: str, tmp_path: Path) -> None:
    """A sequence classifier built on a family's base folder (what finetune does) is written as the family's own
    classifier, whose head layout differs from BERT's (classifier.dense/out_proj, pre_classifier): transformers loads
    every tensor and computes bertkit's logits; the labels come along."""
    write_folder(family, "BertModel", tmp_path / "base")
    model = load_model(tmp_path / "base", "BertForSequenceClassification", num_labels=3,
                       label_names=["a", "b", "c"])
    assert model.load_report.missing == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias",
                                         "classifier.weight"] or family == "roberta"  # RoBERTa's base has a pooler
    model.save_pretrained(str(tmp_path / "clf"))
    config = read_json(tmp_path / "clf" / "config.json")
    assert config["architectures"] == [heads(family)["BertForSequenceClassification"]]
    assert config["id2label"] == {"0": "a", "1": "b", "2": "c"}
    theirs, info = getattr(transformers, config["architectures"][0]).from_pretrained(tmp_path / "clf",
                                                                                     output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    diffs = max_diffs(load_model(tmp_path / "clf"), theirs.eval(), padded_batch(hf_config(family)))
    assert max(diffs.values()) <= 1e-5, diffs


def test_a_base_without_a_pooler_loads_and_saves_without_one(tmp_path: Path) -> None:
    """DistilBERT's and ELECTRA's base models have no pooler: bertkit's BertModel of their folder has none either,
    so nothing is initialised freshly and nothing extra is written."""
    write_folder("distilbert", "BertModel", tmp_path / "hf")
    model = load_model(tmp_path / "hf")
    assert model.pooler is None and model.load_report.complete
    model.save_pretrained(str(tmp_path / "out"))
    assert set(load_file(tmp_path / "out" / "model.safetensors")) == set(load_file(tmp_path / "hf" / "model.safetensors"))


def test_a_bertkit_option_keeps_the_family_in_bertkit_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Mean pooling is no RoBERTa class's: the folder is written as model_type 'bertkit' (transformers would compute
    something else), reads back equal, still a RoBERTa (positions and all), and convert --to-hf refuses it by name."""
    write_folder("roberta", "BertModel", tmp_path / "hf")
    model = load_model(tmp_path / "hf", "BertForSequenceClassification", pooling="mean")
    model.save_pretrained(str(tmp_path / "mean"))
    config = read_json(tmp_path / "mean" / "config.json")
    assert (config["model_type"], config["family"], config["padding_aware_positions"]) == ("bertkit", "roberta", True)
    again = load_model(tmp_path / "mean")
    batch = padded_batch(hf_config("roberta"))
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, again(**batch).logits)
    (tmp_path / "mean" / "vocab.json").write_text("{}")
    assert run_cli(["convert", "--to-hf", str(tmp_path / "mean"), "--out", str(tmp_path / "hf-out")]) != 0
    assert "this roberta model has pooling 'mean'" in capsys.readouterr().err


def test_sinusoidal_distilbert_positions_are_read_from_the_weights(tmp_path: Path) -> None:
    """sinusoidal_pos_embds: transformers keeps the sine table in the weights file, so bertkit reads it as it reads
    learned positions and computes the same."""
    theirs = write_folder("distilbert", "BertModel", tmp_path / "m", sinusoidal_pos_embds=True)
    diffs = max_diffs(load_model(tmp_path / "m"), theirs, padded_batch(hf_config("distilbert")))
    assert max(diffs.values()) <= 1e-5


def test_a_pytorch_bin_family_folder_loads(tmp_path: Path) -> None:
    theirs = write_folder("albert", "BertForMaskedLM", tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    torch.save(load_file(weights), tmp_path / "m" / "pytorch_model.bin")
    weights.unlink()
    diffs = max_diffs(load_model(tmp_path / "m"), theirs, padded_batch(hf_config("albert")))
    assert max(diffs.values()) <= 1e-5


# ----------------------------------------------------------------------------------------------------------------
# What does not fit is named.
# ----------------------------------------------------------------------------------------------------------------


def edit_weights(folder: Path, change) -> None:  # noqa: ANN001 (a function of the state dict)
    path = folder / "model.safetensors"
    state = load_file(path)
    change(state)
    save_file(state, path)


def test_an_encoder_tensor_missing_from_the_file_is_named(tmp_path: Path) -> None:
    write_folder("distilbert", "BertForSequenceClassification", tmp_path / "m")
    edit_weights(tmp_path / "m", lambda s: s.pop("distilbert.transformer.layer.1.ffn.lin2.weight"))
    with pytest.raises(CheckpointError, match=r"missing from the file: bert\.encoder\.layer\.1\.output\.dense\.weight"):
        load_model(tmp_path / "m")


def test_an_encoder_tensor_left_over_in_the_file_is_named(tmp_path: Path) -> None:
    """A third layer where config.json says two, or segment embeddings in a DistilBERT (which has none)."""
    write_folder("roberta", "BertModel", tmp_path / "m")
    edit_weights(tmp_path / "m", lambda s: s.update({"encoder.layer.2.output.dense.bias": torch.zeros(32)}))
    with pytest.raises(CheckpointError, match=r"left over in the file: encoder\.layer\.2\.output\.dense\.bias"):
        load_model(tmp_path / "m")
    write_folder("distilbert", "BertModel", tmp_path / "d")
    edit_weights(tmp_path / "d", lambda s: s.update({"embeddings.token_type_embeddings.weight": torch.zeros(2, 32)}))
    with pytest.raises(CheckpointError, match=r"left over in the file: embeddings\.token_type_embeddings\.weight"):
        load_model(tmp_path / "d")


def test_a_tensor_outside_the_family_layout_is_named(tmp_path: Path) -> None:
    """A BERT tensor name in an ELECTRA file, or a head ELECTRA does not have: the message names each and asks
    whether model_type is the one the weights were saved with."""
    write_folder("electra", "BertModel", tmp_path / "m")
    edit_weights(tmp_path / "m", lambda s: s.update({"bert.pooler.dense.weight": torch.zeros(32, 32),
                                                     "cls.seq_relationship.bias": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match=r"2 tensor\(s\) that are not part of a Electra model's layout: "
                                              r"bert\.pooler\.dense\.weight, cls\.seq_relationship\.bias"):
        load_model(tmp_path / "m")


def test_two_tensors_for_one_place_are_refused(tmp_path: Path) -> None:
    """A RoBERTa classifier's classifier.dense is bertkit's pooler: a file with a pooler too has two of it."""
    write_folder("roberta", "BertForSequenceClassification", tmp_path / "m")
    edit_weights(tmp_path / "m", lambda s: s.update({"roberta.pooler.dense.weight": torch.zeros(32, 32)}))
    with pytest.raises(CheckpointError, match="'classifier.dense.weight' and 'roberta.pooler.dense.weight' are both"):
        load_model(tmp_path / "m")


@pytest.mark.parametrize("overrides, message", [
    (dict(model_type="albert", num_hidden_layers=4, num_hidden_groups=2), "num_hidden_groups 2, inner_group_num 1"),
    (dict(model_type="albert", inner_group_num=2), "num_hidden_groups 1, inner_group_num 2"),
    (dict(model_type="albert", embedding_size=32), "embedding_size equals hidden_size"),
    (dict(model_type="electra", summary_type="mean"), "summary_type 'mean'"),
    (dict(model_type="roberta", position_embedding_type="relative_key"), "position_embedding_type 'relative_key'"),
    (dict(model_type="deberta-v2"), "expected 'bert', 'distilbert', 'roberta', 'xlm-roberta', 'albert', 'electra'"),
])
def test_what_the_one_model_cannot_compute_is_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BertConfig.from_dict({"hidden_size": 32, "num_attention_heads": 4, **overrides}, source="config.json")


def test_albert_layers_are_shared_or_separate() -> None:
    shared = BertConfig.from_dict({"model_type": "albert", "num_hidden_layers": 4, "num_hidden_groups": 1})
    separate = BertConfig.from_dict({"model_type": "albert", "num_hidden_layers": 4, "num_hidden_groups": 4})
    assert (shared.share_layers, separate.share_layers) == (True, False)
    assert (shared.embedding_size, shared.hidden_act, shared.family) == (128, "gelu", "albert")


def test_separate_albert_layers_match_transformers(tmp_path: Path) -> None:
    theirs = write_folder("albert", "BertModel", tmp_path / "m", num_hidden_groups=2)
    ours = load_model(tmp_path / "m")
    assert not ours.config.share_layers and len(ours.encoder.layer) == 2
    assert max(max_diffs(ours, theirs, padded_batch(hf_config("albert"))).values()) <= 1e-5


# ----------------------------------------------------------------------------------------------------------------
# bertkit convert
# ----------------------------------------------------------------------------------------------------------------


def test_convert_both_ways_keeps_the_family_folder(tmp_path: Path) -> None:
    """--from-hf then --to-hf: the family's layout, its tokenizer files as they were, and the model transformers
    reads computes what the first folder did."""
    theirs = write_folder("xlm-roberta", "BertForTokenClassification", tmp_path / "hf")
    for name in ("tokenizer.json", "sentencepiece.bpe.model", "special_tokens_map.json"):
        (tmp_path / "hf" / name).write_bytes(name.encode())  # copied as they are: any bytes do
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "bk")]) == 0
    assert run_cli(["convert", "--to-hf", str(tmp_path / "bk"), "--out", str(tmp_path / "back")]) == 0
    for name in ("tokenizer.json", "sentencepiece.bpe.model", "special_tokens_map.json"):
        assert (tmp_path / "back" / name).read_bytes() == name.encode()
    assert read_json(tmp_path / "back" / "config.json")["architectures"] == ["XLMRobertaForTokenClassification"]
    back = transformers.XLMRobertaForTokenClassification.from_pretrained(tmp_path / "back").eval()
    batch = padded_batch(hf_config("xlm-roberta"))
    with torch.no_grad():
        assert torch.equal(back(**batch).logits, theirs(**batch).logits)


def test_convert_refuses_a_folder_without_a_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_folder("electra", "BertModel", tmp_path / "hf")
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "bk")]) != 0
    assert "no tokenizer (expected one of vocab.txt, tokenizer.json" in capsys.readouterr().err
