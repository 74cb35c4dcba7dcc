"""Helpers shared by the model tests (importable because pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

# google-research/bert modeling_test.py's tiny config.
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


def write_vocab(folder: Path, size: int) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def run_cli(argv: list[str]) -> int:
    """The real `bertkit` entry point."""
    from bertkit.cli import main

    return main(argv)


SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the cat dog sat on mat is was good bad film movie very not and of to it this".split()


def word_vocab() -> str:
    """vocab.txt of TINY's 99 entries: the special tokens, a few English words, the letters and their ## pieces."""
    tokens = SPECIAL + WORDS + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"w{i}" for i in range(TINY["vocab_size"] - len(tokens))]
    return "".join(t + "\n" for t in tokens)


def tiny_model_folder(tmp_path: Path, name: str = "m") -> Path:
    """A tiny BertModel folder (seed 0) with `word_vocab`, as `save_pretrained` writes it (model.safetensors)."""
    import torch

    from bertkit.model import BertConfig, BertModel

    folder = tmp_path / name
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY)).save_pretrained(str(folder))
    (folder / "vocab.txt").write_text(word_vocab())
    return folder


def tiny_model_folder_str(tmp_path: Path) -> str:
    """tmp_path/m, made by `tiny_model_folder` on first use."""
    folder = tmp_path / "m"
    return str(folder if folder.is_dir() else tiny_model_folder(tmp_path))


def edit_config(folder: Path, **changes: object) -> None:
    """config.json of `folder` with `changes` applied."""
    import json

    d = json.loads((folder / "config.json").read_text())
    d.update(changes)
    (folder / "config.json").write_text(json.dumps(d))
