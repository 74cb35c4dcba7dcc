"""ONNX export of any bertkit head with dynamic batch and sequence axes (torch.onnx, TorchScript exporter).

A folder whose head a task serves is traced on the batch the task's endpoint makes of its example requests
(`export_folder`), so every input its head reads is a graph input under its feature name (a classifier's
`numeric_features` and `categorical_ids`) and its outputs are the head's (`Head.outputs`). Other folders (BertModel,
the pre-training heads) take input_ids, attention_mask and token_type_ids.

BertModel packs real tokens with a data-dependent `nonzero`, which a traced graph would freeze to the example's
padding; while `torch.onnx.is_in_onnx_export()` holds it computes every position instead, with the same outputs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from bertkit.dataclass_io import check_value
from bertkit.inference.options import OPSET, ExportOptions
from bertkit.errors import ConfigError
from bertkit.io import make_dir
from bertkit.model import BertForMultipleChoice, BertForPreTraining, BertForQuestionAnswering, BertModel, \
    BertPreTrainedModel
from bertkit.model.heads import BertForEmbedding

if TYPE_CHECKING:
    from bertkit.tasks.base import Task, TaskSettings

BASE_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def output_names(model: BertPreTrainedModel) -> list[str]:
    """Names of the exported graph's outputs for a head no task serves."""
    if isinstance(model, BertModel):
        return ["last_hidden_state"] + (["pooler_output"] if model.pooler is not None else [])
    if isinstance(model, BertForPreTraining):
        return ["prediction_logits", "seq_relationship_logits"]
    if isinstance(model, BertForQuestionAnswering):
        return ["start_logits", "end_logits"]
    if isinstance(model, BertForEmbedding):
        return ["embeddings"]  # pooled (and normalised) sentence vectors, (batch, hidden)
    return ["logits"]


class ExportWrapper(nn.Module):
    """forward(*inputs, in `input_names` order) -> the head's outputs `names` as a tuple."""

    def __init__(self, model: BertPreTrainedModel, input_names: Sequence[str], names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.input_names, self.names = list(input_names), list(names)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        out = self.model(**dict(zip(self.input_names, inputs)))
        return tuple(getattr(out, name) for name in self.names)


def example_inputs(model: BertPreTrainedModel, batch: int = 2, seq: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """Small inputs to trace with (a padded row so masking is traced); (batch, choices, seq) for multiple choice."""
    shape = (batch, 2, seq) if isinstance(model, BertForMultipleChoice) else (batch, seq)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, shape, generator=generator)
    mask = torch.ones(shape, dtype=torch.long)
    mask[0, ..., seq // 2:] = 0
    return ids, mask, torch.zeros(shape, dtype=torch.long)


def export_onnx(model: BertPreTrainedModel, path: str | Path, opset: int = OPSET,
                inputs: dict[str, Tensor] | None = None, outputs: Sequence[str] | None = None,
                per_token: bool | None = None) -> list[str]:
    """Write `model` as ONNX with dynamic axes; returns the output names.

    `inputs`: the batch to trace, by the names the head's forward takes (`task_inputs`); by default input_ids,
    attention_mask, token_type_ids (int64) of random ids, shaped (batch, seq), or (batch, choices, seq) for
    multiple choice. An input shaped like input_ids in front (a per-token input) gets its axes, any other only a
    dynamic batch. `outputs` (default `output_names(model)`) and `per_token` (whether outputs have a sequence
    axis; default from the head) name and shape the graph's outputs."""
    opset = check_value(ExportOptions, "opset", opset, "opset")
    try:
        import onnx  # noqa: F401  (torch.onnx needs it)
    except ImportError:
        raise ConfigError("ONNX export needs the 'onnx' package: pip install 'bertkit[onnx]'") from None
    model = model.eval()
    if inputs is None:
        inputs = dict(zip(BASE_INPUTS, example_inputs(model)))
    names = list(outputs or output_names(model))
    wrapper = ExportWrapper(model, list(inputs), names).eval()  # export restores this mode on the whole tree afterwards
    ids = inputs["input_ids"]
    axes = {0: "batch", 1: "choices", 2: "sequence"} if ids.dim() == 3 else {0: "batch", 1: "sequence"}
    dynamic_axes = {name: axes if tuple(x.shape[:ids.dim()]) == tuple(ids.shape) else {0: "batch"}
                    for name, x in inputs.items()}
    if per_token is None:
        per_token = isinstance(model, (BertModel, BertForPreTraining, BertForQuestionAnswering)) or \
            type(model).__name__ in ("BertForMaskedLM", "BertForTokenClassification")
    for name in names:
        sequence_level = name in ("pooler_output", "seq_relationship_logits") or not per_token
        dynamic_axes[name] = ({0: "batch", 1: "choices"} if ids.dim() == 3 else {0: "batch"}) if sequence_level \
            else {0: "batch", 1: "sequence"}
    make_dir(Path(path).parent)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape checks that hold for every input
        torch.onnx.export(wrapper, tuple(inputs.values()), str(path), input_names=list(inputs), output_names=names,
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)
    return names


def task_inputs(task: Task, settings: TaskSettings, tokenizer: Any) -> dict[str, Tensor]:
    """The batch a task's endpoint makes of its example requests for a model with these settings (examples,
    features, the task's collator): every input its head reads, by name, input_ids, attention_mask and
    token_type_ids first. What `export_folder` traces the model on."""
    from bertkit.tasks.base import collator

    assert task.serving is not None
    serving = task.serving(task, settings, tokenizer)
    features = []
    for body in serving.example_requests():
        for example in serving.request_examples(serving.request(**body)):
            features += serving.serve_features(example)
    head = task.head(settings)
    batch = collator(head, tokenizer)(features)
    keep = [*BASE_INPUTS, *(k for k in head.inputs if k not in BASE_INPUTS)]
    return {k: batch[k] for k in keep if k in batch}


def export_folder(folder: str | Path, path: str | Path, opset: int = OPSET) -> tuple[BertPreTrainedModel, list[str]]:
    """Export a model folder to ONNX: with its task's inputs and outputs when a task serves its head (a fine-tuned
    folder, or a head a task fine-tunes), else as `export_onnx` exports a bare model. Returns the model and the
    graph's output names."""
    from bertkit.model.folder import open_folder
    from bertkit.tasks import serving_task

    opened = open_folder(folder)
    model = opened.model
    task = serving_task(model.config, type(model).__name__)
    if task is None:
        return model, export_onnx(model, path, opset)
    settings = task.settings_of(model.config)
    head = task.head(settings)
    return model, export_onnx(model, path, opset, task_inputs(task, settings, opened.tokenizer), head.outputs,
                              head.per_token)
