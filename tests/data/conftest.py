"""Fixtures for bertkit.data tests: bertkit's tokenizer over the real uncased vocabulary (MiniLM's)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vocab_folder(minilm_dir: Path) -> str:
    """The uncased BERT tokenizer folder (vocab.txt + settings)."""
    return str(minilm_dir)


@pytest.fixture(scope="session")
def tokenizer(vocab_folder: str):
    """bertkit's BertTokenizer on the uncased vocabulary."""
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(vocab_folder)
