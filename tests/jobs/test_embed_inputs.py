"""`bertkit embed` on a model that cannot embed, and on empty lines: a LayerNorm epsilon no checkpoint uses stops
with the field named, a model that computes NaN never writes its matrix, and an empty line is the empty text as in the
Python API, so row i stays line i. (The 2026-11-24 attack report's findings N9 and C8.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import bertkit
from bertkit.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from model_helpers import edit_config, tiny_model_folder, tiny_model_folder_str  # noqa: E402


def test_embed_refuses_a_negative_layer_norm_eps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """N9: `bertkit embed` with layer_norm_eps -1 stops with the field named instead of writing NaN with rc 0."""
    folder = tiny_model_folder(tmp_path)
    edit_config(folder, layer_norm_eps=-1.0)
    (tmp_path / "s.txt").write_text("the cat sat on the mat\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder)]) == 1
    assert "BertConfig.layer_norm_eps: expected a number > 0 and <= 0.001" in capsys.readouterr().err
    assert not (tmp_path / "e.npy").exists()


def test_embed_never_writes_non_finite_embeddings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """N9: whatever makes a model compute NaN (here a weight), embed refuses to write the matrix."""
    from safetensors.torch import load_file, save_file

    folder = tiny_model_folder(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    state["encoder.layer.1.output.dense.bias"][0] = float("nan")
    save_file(state, str(folder / "model.safetensors"))
    (tmp_path / "s.txt").write_text("the cat\nthe dog\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder),
                 "--precision", "fp32"]) == 1
    err = capsys.readouterr().err
    assert "non-finite values (NaN or infinity) for 2 of 2 lines" in err and "s.txt:1" in err
    assert not (tmp_path / "e.npy").exists()


def test_embed_keeps_empty_lines_like_the_api(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """C8: the CLI embeds an empty line as the empty text, as `encode([""])` does, so row i is line i; a warning
    names the lines (refusing them made the CLI and the API disagree, dropping them would shift every row)."""
    folder = tiny_model_folder_str(tmp_path)
    lines = ["the cat sat", "", "a good film", "   "]
    (tmp_path / "s.txt").write_text("\n".join(lines) + "\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", folder,
                 "--precision", "fp32"]) == 0
    assert "2 empty line(s) (2, 4), each kept as the empty text" in capsys.readouterr().err
    matrix = np.load(tmp_path / "e.npy")
    api = bertkit.load(folder).encode(lines, precision="fp32")
    assert matrix.shape == (4, 32)
    np.testing.assert_allclose(matrix, api, atol=1e-6)
    np.testing.assert_allclose(matrix[1], bertkit.load(folder).encode("", precision="fp32"), atol=1e-6)
