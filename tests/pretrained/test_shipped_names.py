"""Every verb that takes a model folder takes a shipped model's name (the 2026-11-24 attack report's C4), and a name
that names nothing says what it could have been."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli import main


def test_every_verb_resolves_shipped_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """C4: `info`, `tokenize`, `convert --from-hf` accept bertkit-mini as embed and finetune do; a name that names
    nothing says what it could have been (tests/pretrained/test_hub_names.py: Hub ids)."""
    (tmp_path / "in.txt").write_text("the cat sat\n")
    assert main(["info", "bertkit-mini"]) == 0
    assert "class:       BertForPreTraining" in capsys.readouterr().out
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", "bertkit-mini", "-o", str(tmp_path / "t.jsonl")]) == 0
    assert json.loads((tmp_path / "t.jsonl").read_text())["input_ids"][0] == 2
    assert main(["convert", "--from-hf", "bertkit-mini", "--out", str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "vocab.txt").is_file()
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", "bertkit-maxi"]) == 1
    assert ("bertkit-maxi: no such model folder, nor a shipped model's name (bertkit-mini), nor a Hugging Face Hub "
            "model in the cache") in capsys.readouterr().err
