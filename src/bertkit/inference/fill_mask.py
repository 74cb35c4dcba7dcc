"""Fill-mask: the masked-LM head's top-k tokens, with probabilities, at every [MASK] of a text."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.errors import CheckpointError, ConfigError
from bertkit.model import BertPreTrainedModel
from bertkit.model.heads import base_model

MASK = "[MASK]"


@dataclass
class MaskPrediction:
    token: str
    token_id: int
    probability: float


def masked_lm_head(model: BertPreTrainedModel) -> torch.nn.Module:
    """The model's masked-LM prediction head (BertForMaskedLM / BertForPreTraining), else a clear error."""
    cls = getattr(model, "cls", None)
    head = getattr(cls, "predictions", None)
    if head is None:
        raise CheckpointError(f"this model ({type(model).__name__}) has no masked-LM head; fill-mask needs a folder "
                              "saved as BertForMaskedLM or BertForPreTraining")
    return head


def mask_ids(tokenizer: Any, text: str, max_length: int) -> list[int]:
    """[CLS] pieces [SEP] with each literal [MASK] as the mask id; the pieces between masks tokenized normally."""
    parts = text.split(MASK)
    if len(parts) == 1:
        raise ConfigError(f"no {MASK} in the text {text[:80]!r}; write {MASK} where a word should be predicted")
    ids = [tokenizer.cls_token_id]
    for i, part in enumerate(parts):
        if i:
            ids.append(tokenizer.mask_token_id)
        ids.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(part)) if part.strip() else [])
    ids.append(tokenizer.sep_token_id)
    if len(ids) > max_length:
        warnings.warn(f"text has {len(ids)} tokens; truncated to {max_length}", stacklevel=3)
        ids = ids[:max_length - 1] + [tokenizer.sep_token_id]
        if tokenizer.mask_token_id not in ids:
            raise ConfigError(f"every {MASK} lies beyond the first {max_length} tokens of the text")
    return ids


def fill_mask(model: BertPreTrainedModel, tokenizer: Any, text: str, top_k: int = 5) -> list[list[MaskPrediction]]:
    """Top-k predictions for each [MASK] of `text`, in order of the masks."""
    return fill_mask_batch(model, tokenizer, [text], top_k)[0]


def fill_mask_batch(model: BertPreTrainedModel, tokenizer: Any, texts: list[str],
                    top_k: int = 5) -> list[list[list[MaskPrediction]]]:
    """fill_mask for several texts in one padded forward pass (used by the server's batcher)."""
    if top_k < 1:
        raise ConfigError(f"top_k must be >= 1, got {top_k}")
    head = masked_lm_head(model)
    bert = base_model(model)
    rows = [mask_ids(tokenizer, t, bert.config.max_position_embeddings) for t in texts]
    width = max(len(r) for r in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for i, r in enumerate(rows):
        input_ids[i, :len(r)] = torch.tensor(r)
        attention[i, :len(r)] = 1
    device = next(model.parameters()).device
    with torch.inference_mode():
        hidden = bert(input_ids.to(device), attention.to(device)).last_hidden_state
        where = (input_ids == tokenizer.mask_token_id).to(device)
        probs = head(hidden[where]).float().softmax(-1)  # (masks, vocab): the decoder only at the masks
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    values, indices = top.values.tolist(), top.indices.tolist()
    out: list[list[list[MaskPrediction]]] = []
    k = 0
    for r in rows:
        per_text = []
        for _ in range(r.count(tokenizer.mask_token_id)):
            tokens = tokenizer.convert_ids_to_tokens(indices[k])
            per_text.append([MaskPrediction(t, i, p) for t, i, p in zip(tokens, indices[k], values[k])])
            k += 1
        out.append(per_text)
    return out
