"""A bad model input through the CLI: a misspelt model override, a truncated weight file, a weight map pointing
outside the folder, `bertkit info` into a closed pipe. Each a named error (or silence), never a traceback or a silent
wrong result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli import main
from bertkit.model import BertConfig, BertModel


TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "m"
    BertModel(BertConfig(**TINY)).save_pretrained(str(folder))
    (folder / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    return folder


def test_a_typo_in_model_overrides_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for extra in ([], ["--print-config"]):
        code = main(["pretrain", "--model", "tiny", "--train_data", str(tmp_path), "--model_overrides",
                     "{hidden_sizee: 3}", *extra])
        err = capsys.readouterr().err
        assert code == 1 and "unknown BertConfig field(s) hidden_sizee" in err and "Traceback" not in err


def test_info_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    # `true` exits without reading, so every write of ours meets a closed pipe
    done = subprocess.run(f"{sys.executable} -m bertkit info {folder} | true", shell=True, capture_output=True,
                          text=True)
    assert done.stderr == ""


def test_info_reads_the_weights(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = _folder(tmp_path)
    assert main(["info", str(folder)]) == 0
    assert "every tensor present" in capsys.readouterr().out
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    assert main(["info", str(folder)]) == 1
    assert "model.safetensors" in capsys.readouterr().err


def test_weight_map_cannot_point_outside_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = _folder(tmp_path)
    outside = tmp_path / "elsewhere.safetensors"
    (folder / "model.safetensors").rename(outside)
    index = {"weight_map": {"embeddings.word_embeddings.weight": "../elsewhere.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert main(["info", str(folder)]) == 1
    assert "not a file of this folder" in capsys.readouterr().err
