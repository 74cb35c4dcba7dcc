"""Shared fixtures for the task tests: real data, the MiniLM folder, its tokenizer, a tiny fine-tunable folder."""

from __future__ import annotations

from pathlib import Path

import pytest





@pytest.fixture(scope="session")
def tokenizer(minilm_dir: Path):
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path, tokenizer) -> Path:
    """A tiny randomly initialised BERT (hidden 32, 2 layers, 4 heads, intermediate 37) with MiniLM's vocabulary:
    fast end-to-end runs of the real CLI where the metric does not matter."""
    from bertkit.model import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=512)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(folder)
    return folder


