"""The folder door (`bertkit.model.folder`): every way bertkit opens a model folder parses its config.json exactly
once (issue 26: up to 3 parses per opening, 5 in distill), and a config read once is handed down, not read again."""

from __future__ import annotations

import contextlib
import io
import pathlib
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

import bertkit
from bertkit.cli import main
from bertkit.model.folder import FolderConfig, load_model, open_folder, read_folder


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path, Callable[[], object]], int]:
    """How many times running `fn` (which must succeed) parses `folder`/config.json. Every JSON file bertkit reads
    goes through `Path.read_text` (`bertkit.io.read_json_object`), so counting those reads of the file counts its
    parses, whoever does them (hashing a folder for provenance reads bytes, not text, and is no parse)."""
    reads: Counter[str] = Counter()
    read_text = pathlib.Path.read_text

    def counting(self: pathlib.Path, *args: object, **kwargs: object) -> str:
        reads[str(self.resolve())] += 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", counting)

    def count(folder: Path, fn: Callable[[], object]) -> int:
        reads.clear()
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            result = fn()
        assert not isinstance(result, int) or result == 0, err.getvalue()  # a CLI verb's exit status
        return reads[str((folder / "config.json").resolve())]

    return count


def test_every_opening_parses_config_json_once(finetuned_dir: Path, tiny_dir: Path, data_dir: Path, tmp_path: Path,
                                                parses: Callable[[Path, Callable[[], object]], int]) -> None:
    """bertkit.load, Encoder(folder), the server's Predictor, `bertkit evaluate` / `predict` / `info` and a whole
    task distillation (the teacher's folder) each parse config.json once; before the door they took 6, 6, 6, 8, 8,
    8 and 18 reads (3 or 4 openings of 2 parses each, 9 in distill)."""
    from bertkit.inference.encoder import Encoder
    from bertkit.serve.app import Predictor

    rows = (data_dir / "sst2/dev.tsv").read_text(encoding="utf-8").splitlines()[:5]
    (tmp_path / "in.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    openings: dict[str, tuple[Path, Callable[[], object]]] = {
        "bertkit.load": (finetuned_dir, lambda: bertkit.load(finetuned_dir)),
        "Encoder(folder)": (tiny_dir, lambda: Encoder(tiny_dir, precision="fp32")),
        "serve Predictor": (finetuned_dir, lambda: Predictor(finetuned_dir, precision="fp32")),
        "bertkit evaluate": (finetuned_dir, lambda: main(["evaluate", "--model", str(finetuned_dir), "--input",
                                                          str(tmp_path / "in.tsv")])),
        "bertkit predict": (finetuned_dir, lambda: main(["predict", "--model", str(finetuned_dir), "--input",
                                                         str(tmp_path / "in.tsv"), "--output",
                                                         str(tmp_path / "p.tsv")])),
        "bertkit info": (finetuned_dir, lambda: main(["info", str(finetuned_dir)])),
        "bertkit distill": (finetuned_dir, lambda: main([
            "distill", "--teacher", str(finetuned_dir), "--student-layers", "1", "--train", str(tmp_path / "in.tsv"),
            "--dev", str(tmp_path / "in.tsv"), "--epochs", "1", "--batch-size", "4", "--output",
            str(tmp_path / "student"), "--no-progress"])),
    }
    counts = {name: parses(folder, fn) for name, (folder, fn) in openings.items()}
    assert counts == {name: 1 for name in openings}
    assert (tmp_path / "p.tsv").is_file() and (tmp_path / "student" / "best" / "config.json").is_file()


def test_a_folder_read_once_is_handed_down(tiny_dir: Path,
                                           parses: Callable[[Path, Callable[[], object]], int]) -> None:
    """read_folder parses config.json once; load_model and open_folder given its result build from it and read the
    file no more (what the jobs do: check the config, then build the model)."""
    folder: list[FolderConfig] = []
    assert parses(tiny_dir, lambda: folder.append(read_folder(tiny_dir))) == 1
    (read,) = folder
    assert read.path == tiny_dir and read.config.hidden_size == 32 and read.raw["architectures"] == ["BertModel"]
    assert read_folder(read) is read
    assert parses(tiny_dir, lambda: load_model(read, num_labels=3)) == 0
    assert parses(tiny_dir, lambda: open_folder(read, "BertForSequenceClassification", num_labels=3)) == 0
    opened = open_folder(read, "BertForSequenceClassification", num_labels=3)
    assert opened.path == tiny_dir and opened.config.num_labels == 3 and opened.tokenizer.vocab_size == 30522
