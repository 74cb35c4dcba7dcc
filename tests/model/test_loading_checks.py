"""What loading a model folder checks before it builds the model: sizes in config.json against the weights' headers
(every layout: safetensors, shards, pytorch_model.bin), numeric config values that make no sense, a tensor of an
integer type for a float parameter, config keys of architectures bertkit does not compute, and unknown keys (one
warning). Each a named error, never a model built on a lie. (The 2026-11-24 attack report's findings H4, N9, C8.)"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import torch

from bertkit.dataclass_io import field_spec
from bertkit.errors import CheckpointError, ConfigError
from bertkit.model import BertConfig, BertModel
from model_helpers import TINY, edit_config, tiny_model_folder


# --- sizes in config.json against the weights, before the model is built ----------------------------------------
def _forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on fail if anything constructs an embedding table: the check must come before the model is built."""

    class Built(torch.nn.Embedding):
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError(f"a model was built (nn.Embedding{args}) before the config was checked")

    monkeypatch.setattr(torch.nn, "Embedding", Built)


def _as_shards(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(folder / shard))
    index = {"weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()


def _as_bin(folder: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize("field, value, shape", [
    ("vocab_size", 3_000_000, "(99, 32)"),
    ("num_hidden_layers", 10_000, "2 encoder layers"),
    ("intermediate_size", 100_000_000, "(37, 32)"),
    ("max_position_embeddings", 100_000_000, "(512, 32)"),
    ("type_vocab_size", 100_000_000, "(2, 32)"),
])
def test_config_sizes_are_checked_against_the_header_before_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: int, shape: str) -> None:
    """H4: a size in config.json that the weights contradict fails at once, naming the field, the config's value
    and the weights' shape, without building (allocating) the model first."""
    folder = tiny_model_folder(tmp_path)
    edit_config(folder, **{field: value})
    _forbid_building(monkeypatch)
    started = time.perf_counter()
    with pytest.raises((CheckpointError, ConfigError)) as e:
        BertModel.from_pretrained(str(folder))
    assert time.perf_counter() - started < 1.0
    message = str(e.value)
    if "expected an integer" in message:  # beyond the field's declared range: refused before the weights are read
        lower = int(field_spec(BertConfig, field).ge)  # the field's declared range (0 segments is DistilBERT's)
        assert f"{folder / 'config.json'}: BertConfig.{field}: expected an integer >= {lower} and <= " in message
        assert message.endswith(f"found {value}")
        return
    assert f"{folder / 'config.json'}: {field} is {value}" in message
    assert shape in message and "model.safetensors" in message


@pytest.mark.parametrize("layout", [_as_shards, _as_bin])
def test_sharded_and_bin_folders_are_checked_before_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout) -> None:  # noqa: ANN001
    """H4: the same for a sharded safetensors folder (every shard's header) and a pytorch_model.bin (its tensors,
    memory-mapped, give the shapes)."""
    folder = tiny_model_folder(tmp_path)
    layout(folder)
    edit_config(folder, vocab_size=3_000_000)
    _forbid_building(monkeypatch)
    with pytest.raises(CheckpointError, match=r"vocab_size is 3000000, which does not match .*'embeddings\."
                                              r"word_embeddings\.weight': shape \(99, 32\) in the file"):
        BertModel.from_pretrained(str(folder))


def test_a_good_folder_still_loads_in_every_layout(tmp_path: Path) -> None:
    """H4: the check refuses nothing that matches, in any of the three layouts."""
    reference = BertModel.from_pretrained(str(tiny_model_folder(tmp_path, "a")))
    for name, layout in (("b", _as_shards), ("c", _as_bin)):
        folder = tiny_model_folder(tmp_path, name)
        layout(folder)
        model = BertModel.from_pretrained(str(folder))
        assert model.load_report.complete
        for (k, v), (_, w) in zip(model.state_dict().items(), reference.state_dict().items()):
            assert torch.equal(v, w), k


# --- numeric config fields that make no sense are refused, naming the field ------------------------------------
@pytest.mark.parametrize("field, value", [
    ("layer_norm_eps", -1.0), ("layer_norm_eps", 0), ("layer_norm_eps", float("nan")),
    ("hidden_dropout_prob", "0.1"), ("attention_probs_dropout_prob", None), ("classifier_dropout", 1.5),
    ("initializer_range", -0.02), ("initializer_range", float("nan")), ("num_labels", 0), ("vocab_size", True),
    ("pad_token_id", 500), ("alibi", "false"),
])
def test_config_values_that_make_no_sense_name_the_field(field: str, value: object) -> None:
    """N9: every numeric field is checked for range and finiteness (and a bool for its type)."""
    with pytest.raises(ConfigError, match=rf"m/config\.json: BertConfig\.{field}: expected"):
        BertConfig.from_dict({**TINY, field: value}, "m/config.json")


# --- an integer tensor for a float parameter; config keys bertkit cannot honour ---------------------------------
def _relabel_dtype(path: Path, tensor: str, dtype: str) -> None:
    """Change one tensor's dtype in a safetensors header (same item size, so the byte ranges stay valid)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header[tensor]["dtype"] = dtype
    new = json.dumps(header, separators=(",", ":")).encode()
    assert len(new) <= n
    path.write_bytes(data[:8] + new + b" " * (n - len(new)) + data[8 + n:])


def test_an_integer_tensor_for_a_float_parameter_is_refused(tmp_path: Path) -> None:
    """C8: a tensor relabelled I32 in the header was converted value by value into a float parameter."""
    folder = tiny_model_folder(tmp_path)
    _relabel_dtype(folder / "model.safetensors", "embeddings.word_embeddings.weight", "I32")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: 'embeddings\.word_embeddings\.weight' is stored "
                                              r"as torch\.int32: expected a floating-point type"):
        BertModel.from_pretrained(str(folder))


def test_config_keys_for_architectures_bertkit_lacks_are_refused(tmp_path: Path) -> None:
    """C8: rotary embeddings, relative positions or a decoder would compute something else: refused, named."""
    folder = tiny_model_folder(tmp_path)
    for key, value in (("rotary_embeddings", True), ("rotary_emb_base", 10000), ("rope_theta", 10000.0),
                       ("position_embedding_type", "relative_key"), ("is_decoder", True)):
        edit_config(folder, **{key: value})
        with pytest.raises(CheckpointError, match=rf"config\.json: {key}"):
            BertModel.from_pretrained(str(folder))
        d = json.loads((folder / "config.json").read_text())
        del d[key]
        (folder / "config.json").write_text(json.dumps(d))
    BertModel.from_pretrained(str(folder))


def test_unknown_keys_warn_once_in_a_bertkit_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """C8: an unknown key in a folder bertkit wrote (bertkit_version: "99.0") is named in one warning; the
    harmless extras of a Hugging Face config (use_cache, transformers_version, ...) pass quietly."""
    folder = tiny_model_folder(tmp_path)
    edit_config(folder, bertkit_version="99.0")
    with caplog.at_level(logging.WARNING):
        BertModel.from_pretrained(str(folder))
        BertModel.from_pretrained(str(folder))
    warnings = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(warnings) == 1 and "bertkit_version" in warnings[0] and str(folder / "config.json") in warnings[0]
    caplog.clear()
    hf = {"architectures": ["BertModel"], "model_type": "bert", "use_cache": True, "gradient_checkpointing": False,
          "transformers_version": "4.40.0", "torch_dtype": "float32", "rope_scaling": None, **TINY}
    with caplog.at_level(logging.WARNING):
        config = BertConfig.from_dict(hf, "hf/config.json")
    assert config.hidden_size == 32 and "does not know" not in caplog.text
