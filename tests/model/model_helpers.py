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
