"""ONNX export of any bertkit head with dynamic batch and sequence axes (torch.onnx, TorchScript exporter).

BertModel packs real tokens with a data-dependent `nonzero`, which a traced graph would freeze to the example's
padding. While `torch.onnx.is_in_onnx_export()` holds, BertModel computes every position instead (padded ones too)
and zeroes the masked positions where it would unpack, so every output equals the packed model's.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit.errors import ConfigError
from bertkit.io import make_dir
from bertkit.model import BertForMultipleChoice, BertForPreTraining, BertForQuestionAnswering, BertModel, \
    BertPreTrainedModel

OPSET = 17


def output_names(model: BertPreTrainedModel) -> list[str]:
    """Names of the exported graph's outputs for this head."""
    if isinstance(model, BertModel):
        return ["last_hidden_state"] + (["pooler_output"] if model.pooler is not None else [])
    if isinstance(model, BertForPreTraining):
        return ["prediction_logits", "seq_relationship_logits"]
    if isinstance(model, BertForQuestionAnswering):
        return ["start_logits", "end_logits"]
    return ["logits"]


class ExportWrapper(nn.Module):
    """forward(input_ids, attention_mask, token_type_ids) -> the head's output tensors as a tuple."""

    def __init__(self, model: BertPreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.names = output_names(model)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> tuple[Tensor, ...]:
        out = self.model(input_ids, attention_mask, token_type_ids)
        return tuple(getattr(out, name) for name in self.names)


def example_inputs(model: BertPreTrainedModel, batch: int = 2, seq: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """Small inputs to trace with (a padded row so masking is traced); (batch, choices, seq) for multiple choice."""
    shape = (batch, 2, seq) if isinstance(model, BertForMultipleChoice) else (batch, seq)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, shape, generator=generator)
    mask = torch.ones(shape, dtype=torch.long)
    mask[0, ..., seq // 2:] = 0
    return ids, mask, torch.zeros(shape, dtype=torch.long)


def export_onnx(model: BertPreTrainedModel, path: str | Path, opset: int = OPSET) -> list[str]:
    """Write `model` as ONNX with dynamic axes; returns the output names. Inputs: input_ids, attention_mask,
    token_type_ids (int64), shaped (batch, seq), or (batch, choices, seq) for multiple choice."""
    try:
        import onnx  # noqa: F401  (torch.onnx needs it)
    except ImportError:
        raise ConfigError("ONNX export needs the 'onnx' package: pip install 'bertkit[onnx]'") from None
    model = model.eval()
    wrapper = ExportWrapper(model).eval()  # export restores this mode on the whole tree afterwards
    axes = {0: "batch", 1: "choices", 2: "sequence"} if isinstance(model, BertForMultipleChoice) \
        else {0: "batch", 1: "sequence"}
    dynamic_axes = {name: axes for name in ("input_ids", "attention_mask", "token_type_ids")}
    per_token = isinstance(model, (BertModel, BertForPreTraining, BertForQuestionAnswering)) or \
        type(model).__name__ in ("BertForMaskedLM", "BertForTokenClassification")
    for name in wrapper.names:
        sequence_level = name in ("pooler_output", "seq_relationship_logits") or not per_token
        dynamic_axes[name] = {0: "batch"} if sequence_level else {0: "batch", 1: "sequence"}
    make_dir(Path(path).parent)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape checks that hold for every input
        torch.onnx.export(wrapper, example_inputs(model), str(path), input_names=["input_ids", "attention_mask",
                          "token_type_ids"], output_names=wrapper.names, dynamic_axes=dynamic_axes,
                          opset_version=opset, dynamo=False)
    return wrapper.names
