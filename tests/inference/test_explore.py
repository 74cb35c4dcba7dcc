"""fill-mask vs transformers, extract-features format, ONNX parity for every head, attention pictures, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from inference_helpers import minilm_folder, tiny_folder, tokenizer_for

from bertkit.cli import main
from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference.fill_mask import fill_mask
from bertkit.model import MODEL_CLASSES, BertForMaskedLM, BertModel



@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory) -> Path:  # noqa: ANN001
    return tiny_folder(tmp_path_factory.mktemp("mlm"), "BertForMaskedLM")


def test_fill_mask_matches_transformers_per_mask(mlm_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    ours = BertForMaskedLM.from_pretrained(mlm_dir)
    theirs = transformers.BertForMaskedLM.from_pretrained(str(mlm_dir)).eval()
    tok = tokenizer_for(mlm_dir)
    text = "The man went to the [MASK] to buy [MASK] milk."
    got = fill_mask(ours, tok, text, top_k=5)
    assert len(got) == 2
    hf_tok = transformers.BertTokenizerFast.from_pretrained(str(mlm_dir))
    batch = hf_tok(text, return_tensors="pt")
    with torch.no_grad():
        probs = theirs(**batch).logits.softmax(-1)[batch["input_ids"] == hf_tok.mask_token_id]
    for predictions, row in zip(got, probs):
        top = row.topk(5)
        assert [p.token_id for p in predictions] == top.indices.tolist()
        assert np.allclose([p.probability for p in predictions], top.values.numpy(), atol=1e-6)


def test_fill_mask_errors(mlm_dir: Path, tmp_path: Path) -> None:
    tok = tokenizer_for(mlm_dir)
    with pytest.raises(ConfigError, match=r"no \[MASK\]"):
        fill_mask(BertForMaskedLM.from_pretrained(mlm_dir), tok, "nothing to fill")
    with pytest.raises(CheckpointError, match="no masked-LM head"):
        fill_mask(BertModel.from_pretrained(minilm_folder()), tok, "a [MASK] b")


def test_fill_mask_cli(mlm_dir: Path, capsys) -> None:  # noqa: ANN001
    text = "Paris is the [MASK] of France."
    assert main(["fill-mask", "--model", str(mlm_dir), text, "--top-k", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    (top,) = fill_mask(BertForMaskedLM.from_pretrained(mlm_dir), tokenizer_for(mlm_dir), text, top_k=3)
    assert out[0] == "[MASK] #1:" and [line.split() for line in out[1:]] == [
        [p.token, f"{p.probability:.4f}"] for p in top]  # the library's top 3, in order
    assert main(["fill-mask", "--model", str(mlm_dir), "no mask here"]) == 1
    assert "no [MASK]" in capsys.readouterr().err
    assert main(["fill-mask", "--model", minilm_folder(), "a [MASK]"]) == 1
    assert "no masked-LM head" in capsys.readouterr().err


def test_extract_features_reference_format(mlm_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("Hello world.\nThe first part ||| the second part\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["extract-features", "--model", str(mlm_dir), str(src), "-o", str(out), "--layers=-1,-2",
                 "--max-length", "16"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["linex_index"] for r in records] == [0, 1]
    first = records[0]["features"]
    assert first[0]["token"] == "[CLS]" and first[-1]["token"] == "[SEP]"
    assert [layer["index"] for layer in first[0]["layers"]] == [-1, -2]
    assert len(first[0]["layers"][0]["values"]) == 32
    assert sum(f["token"] == "[SEP]" for f in records[1]["features"]) == 2  # a pair
    # Values are the last layer's hidden states, rounded to 6 decimals.
    tok = tokenizer_for(mlm_dir)
    model = BertForMaskedLM.from_pretrained(mlm_dir)
    ids = torch.tensor([tok.encode("Hello world.").input_ids])
    with torch.no_grad():
        hidden = model.bert(ids).last_hidden_state[0]
    assert np.allclose([f["layers"][0]["values"] for f in first], hidden.numpy(), atol=1e-6)


def test_extract_features_empty_line_names_file_and_line(mlm_dir: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = tmp_path / "in.txt"
    src.write_text("ok\n\nthird\n", encoding="utf-8")  # kept as the empty text, one record per line (as the reference)
    assert main(["extract-features", "--model", str(mlm_dir), "--layers=-1", str(src),
                 "-o", str(tmp_path / "o.jsonl")]) == 0
    assert f"{src}: 1 empty line(s) (2)" in capsys.readouterr().err
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 3
    src.write_text("ok\nthird\n", encoding="utf-8")  # a good file: the layer index is what is wrong
    assert main(["extract-features", "--model", str(mlm_dir), "--layers=-9", str(src),
                 "-o", str(tmp_path / "bad.jsonl")]) == 1
    assert "layer index -9 out of range for a 2-layer model (use -2..1)" in capsys.readouterr().err
    assert not (tmp_path / "bad.jsonl").exists()


@pytest.mark.parametrize("class_name", list(MODEL_CLASSES))
def test_onnx_matches_pytorch_for_every_head(class_name: str, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    folder = tiny_folder(tmp_path, class_name)
    path = tmp_path / "m.onnx"
    assert main(["export-onnx", str(folder), "-o", str(path)]) == 0
    check_onnx(MODEL_CLASSES[class_name].from_pretrained(folder), path, ort)


def check_onnx(model, path: Path, ort) -> float:  # noqa: ANN001
    from bertkit.inference.onnx_export import example_inputs, output_names

    session = ort.InferenceSession(str(path))
    worst = 0.0
    for batch, seq in ((3, 11), (1, 5)):  # shapes unlike the traced example: the axes are dynamic
        ids, mask, types = example_inputs(model, batch, seq)
        mask[-1, ..., 2:] = 0
        with torch.no_grad():
            out = model(ids, mask, types)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                 "token_type_ids": types.numpy()})
        for name, value in zip(output_names(model), got):
            diff = float(np.abs(getattr(out, name).numpy() - value).max())
            assert diff <= 1e-4, (name, diff)
            worst = max(worst, diff)
    return worst


def test_onnx_matches_pytorch_on_minilm(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "minilm.onnx"
    assert main(["export-onnx", minilm_folder(), "-o", str(path)]) == 0
    print("MiniLM ONNX max diff", check_onnx(BertModel.from_pretrained(minilm_folder()), path, ort))


def test_attention_png_and_html(mlm_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "att.png"
    assert main(["attention", "--model", str(mlm_dir), "The cat sat.", "--pair", "It was happy.", "-o",
                 str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = out.with_suffix(".html").read_text()
    assert "data:image/png;base64," in page and "[CLS]" in page
