"""Sentence embeddings: `embed_texts` runs the fast Encoder (bertkit.inference.encoder: length-sorted batches
under a token budget); `reference_embed_texts` is the simple correct path it is checked against (fixed-size
padded batches through BertModel, masked pooling), so its numbers are the model's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import ConfigError
from bertkit.inference.pooling import check_pooling, pad_batch, pool_hidden
from bertkit.model import BertModel, BertPreTrainedModel


def embed_texts(
    model: BertPreTrainedModel,
    tokenizer: Any,
    texts: Sequence[str],
    pooling: str = "mean",
    normalize: bool = False,
    batch_size: int = 32,
    max_length: int | None = None,
    precision: str = "fp32",
) -> np.ndarray:
    """One float32 vector per text, in input order: (len(texts), hidden), through the fast Encoder.

    Equal to `reference_embed_texts` within 1e-5 in float32. batch_size caps the texts per forward pass; the
    Encoder also caps the padded tokens per pass. Texts longer than max_length (default: the position table) are
    truncated with a warning.
    """
    from bertkit.inference.encoder import Encoder

    device = next(model.parameters()).device
    encoder = Encoder(model, tokenizer, device=device, max_length=max_length, precision=precision)
    return encoder.encode(list(texts), pooling=pooling, normalize=normalize, batch_size=batch_size).numpy()


def reference_embed_texts(
    model: BertPreTrainedModel,
    tokenizer: Any,
    texts: Sequence[str],
    pooling: str = "mean",
    normalize: bool = False,
    batch_size: int = 32,
    max_length: int | None = None,
) -> np.ndarray:
    """One float32 vector per text, in input order: (len(texts), hidden).

    `tokenizer` is a bertkit BertTokenizer (or anything with `encode(text, max_length=, truncation=True)` returning
    `.input_ids` / `.token_type_ids`, and `pad_token_id`). Texts longer than max_length (default: the position table)
    are truncated. Batches are sorted by length, longest first, so padding is small and memory peaks early.
    """
    check_pooling(pooling)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be positive, got {batch_size}")
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
                vectors = pool_hidden(hidden.float(), batch["attention_mask"], pooling)
                if normalize:
                    vectors = F.normalize(vectors, p=2, dim=-1)
                out[rows] = vectors.cpu().numpy()
    finally:
        bert.train(was_training)
    return out
