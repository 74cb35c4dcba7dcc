"""The `info`, `convert` and `embed` verbs through the real CLI entry point, and the bertkit.load API."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.model import BertForSequenceClassification, BertModel
from bertkit.model.folder import load_model

from model_helpers import TINY, run_cli, write_vocab



def test_verbs_and_options_are_pinned(capsys) -> None:
    for verb, options in (("info", ["--json"]), ("convert", ["--from-hf", "--to-hf", "--out", "--class", "--strict"]),
                          ("embed", ["--model", "--pooling", "--normalize", "--batch-size", "--max-length", "-o"])):
        with pytest.raises(SystemExit):
            run_cli([verb, "--help"])
        text = capsys.readouterr().out
        for option in options:  # a switch shows as --[no-]name
            assert option in text or f"--[no-]{option.removeprefix('--')}" in text, (verb, option)


def test_info_real_checkpoint(minilm_dir: Path, capsys) -> None:
    assert run_cli(["info", str(minilm_dir)]) == 0
    out = capsys.readouterr().out
    assert "class:       BertModel" in out
    assert "parameters:  22,713,216" in out
    assert "vocabulary:  30,522 tokens" in out
    assert "hidden_size: 384" in out


def test_info_json_for_a_classifier(tmp_path: Path, capsys) -> None:
    config = bertkit.BertConfig(**TINY, num_labels=2, label_names=["neg", "pos"], task="classification")
    model = BertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    write_vocab(tmp_path, 99)
    assert run_cli(["info", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["class"] == "BertForSequenceClassification" and d["task"] == "classification"
    assert d["labels"] == ["neg", "pos"] and d["vocab_size"] == 99
    assert d["parameters"] == model.num_parameters()


def test_info_missing_folder_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert run_cli(["info", str(tmp_path / "nope")]) == 1
    assert "nope: no such model folder" in capsys.readouterr().err


def test_convert_round_trip_loads_in_transformers(minilm_dir: Path, tmp_path: Path) -> None:
    """HF folder -> bertkit folder -> HF folder: transformers loads the result with identical tokens and outputs."""
    transformers = pytest.importorskip("transformers")
    bk, out = tmp_path / "bk", tmp_path / "hf"
    assert run_cli(["convert", "--from-hf", str(minilm_dir), "--out", str(bk)]) == 0
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
            "sentence_bert_config.json"} <= {p.name for p in bk.iterdir()}
    assert run_cli(["convert", "--to-hf", str(bk), "--out", str(out)]) == 0
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    text = ["Héllo, WORLD! unbelievably tokenized text.", "a second one"]
    x = tok(text, padding=True, return_tensors="pt")
    assert torch.equal(x["input_ids"], ref_tok(text, padding=True, return_tensors="pt")["input_ids"])
    with torch.no_grad():
        a = transformers.BertModel.from_pretrained(str(out))(**x).last_hidden_state
        b = transformers.BertModel.from_pretrained(str(minilm_dir))(**x).last_hidden_state
    assert torch.equal(a, b)


def test_convert_from_hf_imports_heads(tmp_path: Path, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.BertConfig(**TINY, num_labels=3)
    hf = transformers.BertForSequenceClassification(hf_config).eval()
    hf.save_pretrained(str(tmp_path / "hf"))
    write_vocab(tmp_path / "hf", 99)
    out = tmp_path / "bk"
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(out)]) == 0
    assert "wrote BertForSequenceClassification" in capsys.readouterr().out
    model = load_model(out, strict=True)
    assert isinstance(model, BertForSequenceClassification)
    assert (out / "vocab.txt").read_text() == (tmp_path / "hf" / "vocab.txt").read_text()
    x = torch.randint(5, 99, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model(x).logits, hf(input_ids=x).logits, atol=1e-6)
    # An output folder is never overwritten; --class drops the head (and says so).
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(out)]) == 1
    assert "already exists and is not empty" in capsys.readouterr().err
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "base"),
                    "--class", "BertModel"]) == 0
    assert "dropped (no place in BertModel): classifier.bias, classifier.weight" in capsys.readouterr().out
    assert isinstance(load_model(tmp_path / "base"), BertModel)
    assert run_cli(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "strict"),
                    "--class", "BertModel", "--strict"]) == 1
    assert not (tmp_path / "strict").exists()


def test_embed_empty_line_names_file_and_line(tmp_path: Path, minilm_dir: Path, capsys) -> None:
    """An empty line is embedded as the empty text (row i stays line i, as the API's encode([""])), with a
    warning naming the file and the line."""
    (tmp_path / "in.txt").write_text("first text\n\nthird\n", encoding="utf-8")
    assert run_cli(["embed", "--model", str(minilm_dir), str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy")]) == 0
    assert f"{tmp_path / 'in.txt'}: 1 empty line(s) (2)" in capsys.readouterr().err
    assert np.load(tmp_path / "o.npy").shape == (3, 384)


def test_embed_matches_sentence_transformers(tmp_path: Path, minilm_dir: Path, sentences) -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = sentences["sst2"][:12]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert run_cli(["embed", "--model", str(minilm_dir), str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy"),
                    "--batch-size", "5", "--precision", "fp32"]) == 0
    ours = np.load(tmp_path / "o.npy")
    ref = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    assert ours.shape == (12, 384) and ours.dtype == np.float32
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.99999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # the folder asks for normalisation
    assert run_cli(["embed", "--model", str(minilm_dir), str(tmp_path / "in.txt"), "-o", str(tmp_path / "c.npy"),
                    "--pooling", "cls"]) == 0
    assert not np.allclose(np.load(tmp_path / "c.npy"), ours)


def test_python_api(minilm_dir: Path, tmp_path: Path) -> None:
    bert = bertkit.load(minilm_dir)
    assert isinstance(bert.model, bertkit.BertModel)
    v = bert.encode(["a sentence", "another one"], precision="fp32")
    assert v.shape == (2, 384)
    auto = bert.encode("a sentence")  # precision "auto": bf16 on CPUs with bf16 units, else fp32
    assert auto.shape == (384,) and float(auto @ v[0]) / float(np.linalg.norm(auto) * np.linalg.norm(v[0])) > 0.999
    assert np.allclose(bert.encode("a sentence", precision="fp32"), v[0], atol=1e-6)
    bert.save(tmp_path / "copy")
    copy = bertkit.load(tmp_path / "copy").encode(["a sentence"], normalize=True, precision="fp32")
    assert np.allclose(copy, v[:1], atol=1e-6)


def test_public_names() -> None:
    for name in ("BertConfig", "BertModel", "BertForPreTraining", "BertForQuestionAnswering", "BertkitError",
                 "CheckpointError", "load", "load_model", "__version__"):
        assert hasattr(bertkit, name), name
