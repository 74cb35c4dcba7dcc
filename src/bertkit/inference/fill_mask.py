"""Fill-mask: the masked-LM head's top-k tokens, with probabilities, at every mask token ([MASK], <mask>) of a
text."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.dataclass_io import check_value
from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference.options import FillMaskOptions
from bertkit.inference.pooling import pad_batch
from bertkit.model import BertPreTrainedModel
from bertkit.model.heads import base_model

MASK = "[MASK]"  # BERT's; a tokenizer names its own (`mask_token`)
MASK_CHUNK = 256  # masks per decoder call: bounds the (masks, vocabulary) probabilities held at once


@dataclass
class MaskPrediction:
    token: str
    token_id: int
    probability: float


def masked_lm_head(model: BertPreTrainedModel) -> torch.nn.Module:
    """The model's masked-LM prediction head (BertForMaskedLM / BertForPreTraining), else a clear error."""
    head = getattr(getattr(model, "cls", None), "predictions", None)
    if head is None:
        raise CheckpointError(f"this model ({type(model).__name__}) has no masked-LM head; fill-mask needs a folder "
                              "saved as BertForMaskedLM or BertForPreTraining")
    return head


def mask_ids(tokenizer: Any, text: str, max_length: int) -> list[int]:
    """The text's ids with the model's special tokens, each literal mask token (the tokenizer's: BERT's [MASK],
    RoBERTa's <mask>) as the mask id; the rest tokenized as the tokenizer tokenizes the whole text.

    A text longer than `max_length` pieces is cut after its last mask (with a warning); a mask beyond the first
    `max_length` pieces is refused with a ConfigError naming it, since its prediction could not be given."""
    mask = getattr(tokenizer, "mask_token", MASK)
    if mask not in text:
        raise ConfigError(f"no {mask} in the text {text[:80]!r}; write {mask} where a word should be predicted")
    enc = tokenizer.encode(text, truncation=False)
    ids, end = enc.input_ids, len(enc.input_ids) - 1  # the last id closes the text ([SEP], </s>)
    masks = [i for i, t in enumerate(ids) if t == tokenizer.mask_token_id]
    for n, i in enumerate(masks, 1):
        if i >= max_length - 1:  # no room left for it and the closing token after it
            raise ConfigError(
                f"{mask} #{n} (at character {enc.offsets[i][0]}) is word piece {i} of the text, beyond the "
                f"{max_length - 2} the model reads besides its two special tokens; move it nearer the start or "
                "shorten the text")
    if len(ids) > max_length:
        warnings.warn(f"text has {len(ids)} tokens; truncated to {max_length} after its last {mask}", stacklevel=3)
        ids = ids[:max_length - 1] + ids[end:]
    return ids


def fill_mask(model: BertPreTrainedModel, tokenizer: Any, text: str, top_k: int = 5) -> list[list[MaskPrediction]]:
    """Top-k predictions for each mask token of `text`, in order of the masks."""
    return fill_mask_batch(model, tokenizer, [text], top_k)[0]


def fill_mask_batch(model: BertPreTrainedModel, tokenizer: Any, texts: list[str],
                    top_k: int = 5) -> list[list[list[MaskPrediction]]]:
    """fill_mask for several texts in one padded forward pass."""
    rows = [mask_ids(tokenizer, t, base_model(model).config.max_sequence_length) for t in texts]
    return predict_masks(model, tokenizer, rows, top_k)


def predict_masks(model: BertPreTrainedModel, tokenizer: Any, rows: list[list[int]],
                  top_k: int = 5) -> list[list[list[MaskPrediction]]]:
    """Top-k predictions at every mask id of each row of ids (as `mask_ids` makes them), in one forward pass; the
    decoder's softmax over the vocabulary runs MASK_CHUNK masks at a time, so many masks never hold many
    (masks x vocabulary) matrices at once."""
    top_k = check_value(FillMaskOptions, "top_k", top_k, "top_k")
    head = masked_lm_head(model)
    bert = base_model(model)
    batch = pad_batch(rows, [[] for _ in rows], 0)
    input_ids = batch["input_ids"]
    device = next(model.parameters()).device
    values: list[list[float]] = []
    indices: list[list[int]] = []
    with torch.inference_mode():
        hidden = bert(input_ids.to(device), batch["attention_mask"].to(device)).last_hidden_state
        where = (input_ids == tokenizer.mask_token_id).to(device)
        for chunk in hidden[where].split(MASK_CHUNK):
            probs = head(chunk).float().softmax(-1)  # (masks, vocab): the decoder only at the masks
            top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            values += top.values.tolist()
            indices += top.indices.tolist()
    predictions = iter([MaskPrediction(t, i, p) for t, i, p in zip(tokenizer.convert_ids_to_tokens(ids), ids, probs)]
                       for probs, ids in zip(values, indices))  # one list per mask, in order
    return [[next(predictions) for _ in range(r.count(tokenizer.mask_token_id))] for r in rows]
