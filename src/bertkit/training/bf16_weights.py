"""bf16 weights for the training steps, with the float32 weights kept as the optimizer's master copy.

Under bf16 autocast the model's weights stay float32: every forward pass casts each weight to bf16 again, and the
activations go back and forth between the two types (LayerNorm and the residual stream in float32, matrix products
in bf16). The H100 profile of issue 29 found 13% of CUDA time in copies. (On an AMX CPU the copies are mostly of
activations, which this does not remove: 12.9% of the step under autocast, 12.4% on bf16 weights, and the step is
level with autocast's there: docs/results/pretrain-bf16-weights-cpu-xeon-amx-2026-11-27.md.) Mixed precision with master weights (Micikevicius et al. 2018; NVIDIA's BERT, Megatron) runs the steps on a bf16
model instead and keeps the float32 weights for the update, where bf16's 8-bit mantissa would lose small updates:

- the steps run `working`, a bf16 copy of the model (weights, activations, LayerNorms and residual stream in bf16;
  the heads still compute their losses in float32);
- `take_gradients` moves its gradients into the float32 model's `.grad`, in float32, so that the micro-batches of
  one step add up in float32;
- the optimizer updates the float32 model as it would without this (the same AdamW, clipping and schedule);
  `refresh` then rounds the new weights into `working`.

The float32 model stays what checkpoints, evaluation, best/ and final/ read: a run resumes bit for bit, and its
saved model is the float32 one.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class Bf16Weights:
    """A bf16 working copy of `master` for the training steps; the float32 `master` is what the optimizer updates."""

    def __init__(self, master: nn.Module) -> None:
        self.master = master
        self.working = copy.deepcopy(master).to(torch.bfloat16)  # floating-point parameters and buffers only
        pairs = zip(master.named_parameters(), self.working.named_parameters())  # tied weights listed once, alike
        self._pairs = [(m, w) for (_, m), (_, w) in pairs if m.requires_grad]

    def take_gradients(self) -> None:
        """Add the working copy's gradients (bf16) to the master weights' `.grad` in float32, and clear them."""
        for m, w in self._pairs:
            if w.grad is None:
                continue
            if m.grad is None:
                m.grad = w.grad.float()
            else:
                m.grad.add_(w.grad)
            w.grad = None

    @torch.no_grad()
    def refresh(self) -> None:
        """Round the master weights into the working copy (after each optimizer step, and after a resume)."""
        for m, w in self._pairs:
            w.copy_(m)
