"""How BERT computes a forward pass, never what it computes: the execution plan.

A plan is a frozen value: a model gets one at construction (the plan of a forward that names none) and a forward can
take another (`model(..., execution=plan)`), as transformers picks `attn_implementation` and torchtitan applies
compile from outside the model; nothing sets it on a built model. Every plan gives the same loss and gradients as
the plain path (every position, MLM logits over the whole vocabulary everywhere: what transformers computes), within
float32's rounding: tests/model/test_execution.py and tests/model/test_packing.py. None of it is in config.json.

`Execution.for_step` holds the hardware policy of a pre-training step: which plan pays on which device and precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.dataclass_io import check_fields, spec
from bertkit.errors import ConfigError

MAX_MLM_SLOTS = 65535


def check_mlm_slots(sparse_mlm: bool, mlm_slots: int | None, where: str) -> None:
    """ConfigError naming `where` when fixed MLM slots are asked for without sparse MLM (they are its block)."""
    if mlm_slots and not sparse_mlm:
        raise ConfigError(f"{where} = {mlm_slots}: expected 0, or a count > 0 with sparse_mlm: true (a fixed block "
                          "of the masked positions)")


@dataclass(frozen=True)
class Execution:
    """The levers of a forward pass. BertModel reads `unpadded`; the MLM heads read the others, in a forward with
    labels (without labels they compute every position, as transformers does)."""

    sparse_mlm: bool = True
    """The MLM transform and vocabulary decoder at the labelled positions only (NVIDIA's BERT, MosaicBERT); the
    output's `mlm_positions` says which rows the logits are. False: at every position."""
    sparse_last_layer: bool = True
    """With sparse_mlm: the last encoder layer's queries, output projections and feed-forward block only where the
    heads read it (the labelled positions and [CLS]); every token stays a key and value of its attention."""
    mlm_slots: int = spec(0, ge=0, le=MAX_MLM_SLOTS)
    """With sparse_mlm, in training mode: a fixed block of this many places per sequence, the labelled positions
    first, so that every step has the same shapes (torch.compile's CUDA graphs, oneDNN's bf16 kernels); a sequence
    with more labels is an error. 0: the labelled positions as they come."""
    unpadded: bool = True
    """Linear layers, LayerNorm and GELU on the real tokens only (`bertkit.model.kernels.Packing`). False: at every
    position, the padded ones zeroed on the way out (fixed shapes)."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_mlm_slots(self.sparse_mlm, self.mlm_slots, "Execution.mlm_slots")

    @classmethod
    def for_step(cls, device: Any, precision: str, max_predictions: int, *, sparse_mlm: bool = True,
                 sparse_last_layer: bool = True, unpadded: bool | None = None,
                 mlm_slots: int | None = None) -> tuple[Execution, str | None]:
        """The plan of a training step on `device` (a torch.device or its name) in `precision` ('fp32', 'bf16',
        'fp16'), `max_predictions` the data's max_predictions_per_seq; `unpadded` and `mlm_slots` None leave the
        choice to this policy. Returns the plan and a note to print when the policy departs from the defaults.

        Under bf16 autocast on a CPU, PyTorch multiplies bf16 matrices with oneDNN, which builds (JIT-compiles) a
        kernel for each new matrix shape: with the real tokens packed and the labelled positions taken as they come,
        nearly every step brings new shapes, and building their kernels costs more than bf16 saves
        (docs/results/pretrain-bf16-cpu-xeon-amx-2026-11-27.md). There the step keeps fixed shapes: padded batches
        (lengths a multiple of pad_to_multiple_of) and the MLM head in `max_predictions` slots per sequence. float32
        on a CPU (MKL) and every precision on a GPU have no such cost and keep the defaults."""
        kind = getattr(device, "type", str(device).split(":")[0])
        fixed = kind == "cpu" and precision == "bf16"
        chosen_unpadded = unpadded if unpadded is not None else not fixed
        slots = mlm_slots if mlm_slots is not None else (max_predictions if fixed and sparse_mlm else 0)
        chosen = ["unpadded: false"] if unpadded is None and not chosen_unpadded else []
        chosen += [f"mlm_slots: {slots}"] if mlm_slots is None and slots else []
        note = None
        if chosen:
            note = (f"note: bf16 on a CPU: the step keeps fixed shapes ({', '.join(chosen)}), since oneDNN builds a "
                    "bf16 kernel for every new matrix shape; set execution.unpadded / execution.mlm_slots to choose "
                    "yourself")
        plan = cls(sparse_mlm=sparse_mlm, sparse_last_layer=sparse_last_layer, mlm_slots=slots,
                   unpadded=chosen_unpadded)
        return plan, note


PLAIN = Execution(sparse_mlm=False, sparse_last_layer=False, unpadded=False)
"""Every position, MLM logits over the whole vocabulary everywhere: what transformers computes (the parity tests'
and the benchmarks' reference)."""
