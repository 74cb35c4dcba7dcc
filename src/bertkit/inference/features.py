"""Contextual token features in google-research/bert's extract_features.py JSONL format.

One JSON object per input line: {"linex_index": i, "features": [{"token": "[CLS]", "layers": [{"index": -1,
"values": [...]}, ...]}, ...]}, values rounded to 6 decimals. A line "A ||| B" is encoded as a sentence pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from bertkit.dataclass_io import check_value
from bertkit.inference.options import FeatureOptions, check_window
from bertkit.errors import ConfigError
from bertkit.inference.pooling import pad_batch
from bertkit.model import BertPreTrainedModel
from bertkit.model.heads import base_model


def parse_layers(spec: str, num_layers: int) -> list[int]:
    """'-1,-2,-3,-4' -> [-1, -2, -3, -4]; indices as in the reference (-1 = last layer, 0 = first layer)."""
    try:
        layers = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--layers must be comma-separated integers, got {spec!r}") from None
    for i in layers:
        if not -num_layers <= i < num_layers:
            raise ConfigError(f"layer index {i} out of range for a {num_layers}-layer model "
                              f"(use -{num_layers}..{num_layers - 1})")
    if not layers:
        raise ConfigError("--layers names no layer")
    return layers


def split_pair(line: str) -> tuple[str, str | None]:
    """'A ||| B' -> ('A', 'B'); a line without the separator is a single text."""
    if "|||" in line:
        a, b = line.split("|||", 1)
        return a.strip(), b.strip()
    return line.strip(), None


def extract_features(
    model: BertPreTrainedModel,
    tokenizer: Any,
    lines: Sequence[str],
    layers: Sequence[int] = (-1, -2, -3, -4),
    max_length: int = 128,
    batch_size: int = 32,
) -> Iterator[dict[str, Any]]:
    """Yield one reference-format record per line, in order."""
    max_length = check_value(FeatureOptions, "max_length", max_length, "max_length")
    batch_size = check_value(FeatureOptions, "batch_size", batch_size, "batch_size")
    bert = base_model(model)
    check_window(max_length, bert.config)
    num_layers = bert.config.num_hidden_layers
    # hidden_states holds the embeddings first; the reference's all_layers starts at the first encoder layer.
    picks = [i + 1 if i >= 0 else num_layers + 1 + i for i in layers]
    device = next(model.parameters()).device
    for start in range(0, len(lines), batch_size):
        chunk = lines[start:start + batch_size]
        encodings = [tokenizer.encode(a, pair=b, max_length=max_length, truncation=True)
                     for a, b in map(split_pair, chunk)]
        batch = pad_batch([e.input_ids for e in encodings], [e.token_type_ids for e in encodings],
                          tokenizer.pad_token_id)
        with torch.inference_mode():
            out = bert(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                       batch["token_type_ids"].to(device), output_hidden_states=True)
        chosen = torch.stack([out.hidden_states[p] for p in picks], 1).float().cpu()  # (batch, layers, seq, hidden)
        for row, enc in enumerate(encodings):
            tokens = tokenizer.convert_ids_to_tokens(list(enc.input_ids))
            values = chosen[row, :, :len(tokens)].tolist()
            yield {
                "linex_index": start + row,
                "features": [
                    {"token": token,
                     "layers": [{"index": index, "values": [round(v, 6) for v in values[j][t]]}
                                for j, index in enumerate(layers)]}
                    for t, token in enumerate(tokens)
                ],
            }
