"""The precision of the training steps: `Precision` resolves what a run computes in and is what the trainer's
step calls (autocast around the forward, backward, unscale before clipping, the optimizer step).

- 'auto' is bf16 on a CUDA GPU that supports it, fp16 on older GPUs, fp32 on a CPU (`resolve_precision`): a run's
  numbers do not depend on which CPU it lands on.
- fp16 scales the loss (torch.amp.GradScaler): an inf/NaN gradient is then the scaler's overflow signal, and the
  step is skipped and the scale lowered, so only a non-finite unscaled loss stops the run (`scales_loss`).
- bf16 on a CPU without bf16 matrix units (AVX512-BF16, AMX) is emulated by PyTorch, many times slower than fp32:
  `warning` says so at the start of the run.
- bf16 weights (TrainingConfig.bf16_weights; `Bf16Weights`): mixed precision with master weights (Micikevicius
  et al. 2018; NVIDIA's BERT, Megatron). Under autocast every forward casts each float32 weight to bf16 again (13%
  of a BERT-base step's CUDA time on an H100, docs/results/gpu-suite-h100-2026-11-24.md); instead the steps run a
  bf16 copy of the model, whose gradients add up in float32 in the float32 model the optimizer updates, and which
  takes the new weights after each step. The float32 model is what checkpoints, evaluation, best/ and final/ read.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from bertkit.errors import ConfigError
from bertkit.runtime import cpu_has_native_bf16
from bertkit.training.config import check_bf16_weights


def resolve_precision(precision: str, device: torch.device) -> str:
    """'auto' -> bf16 on a CUDA GPU that supports it, fp16 on older GPUs, fp32 on CPU; checks the others."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("TrainingConfig.precision = 'fp16' needs a CUDA GPU (use 'bf16' or 'fp32' on CPU)")
    return precision


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


class Precision:
    """How a run's steps compute: `name` ('fp32', 'bf16' or 'fp16', resolved on `device`), the autocast around
    forwards, fp16's loss scaler and, with bf16 weights, the bf16 working copy the steps run (`steps_module`)."""

    def __init__(self, precision: str, device: torch.device, bf16_weights: bool = False) -> None:
        self.name = resolve_precision(precision, device)
        if bf16_weights:
            check_bf16_weights(precision, self.name, str(device))
        self.device = device
        self.bf16_weights = bf16_weights
        self.scaler = torch.amp.GradScaler(device.type) if self.name == "fp16" else None
        self.bf16: Bf16Weights | None = None  # the working copy, made by steps_module

    @property
    def scales_loss(self) -> bool:
        """Whether the loss is scaled (fp16): an inf/NaN gradient is then an overflow the step skips, not an error."""
        return self.scaler is not None

    def warning(self) -> str | None:
        """What a run should hear at its start: bf16 emulated on a CPU without bf16 matrix units."""
        if self.name == "bf16" and self.device.type == "cpu" and not cpu_has_native_bf16():
            return ("warning: TrainingConfig.precision is 'bf16' but this CPU has no bf16 matrix units (no "
                    "avx512_bf16 or amx_bf16 in /proc/cpuinfo): PyTorch emulates bf16 here, and a training step runs "
                    "many times slower than in fp32 (benchmarks/bench_pretrain_step.py --bf16 measures it); use "
                    "precision 'fp32' or 'auto' on this machine")
        return None

    def steps_module(self, model: nn.Module) -> nn.Module:
        """The module the training steps run: `model`, or with bf16 weights its bf16 working copy (made here: call
        it once the weights are final, after a resume has loaded them)."""
        self.bf16 = Bf16Weights(model) if self.bf16_weights else None
        return self.bf16.working if self.bf16 is not None else model

    def autocast(self) -> contextlib.AbstractContextManager:
        """Around a forward: bf16 or fp16 autocast, nothing in fp32."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if self.name == "bf16" else torch.float16)

    def backward(self, loss: Tensor, reduced: bool = True) -> None:
        """Backward of a micro-batch's loss (scaled in fp16). With bf16 weights, the working copy's gradients go to
        the float32 weights when `reduced` (no DDP, or DDP's last micro-batch of a step, where it reduces them)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.bf16 is not None and reduced:
            self.bf16.take_gradients()

    def unscale(self, optimizer: Optimizer) -> None:
        """Before clipping: the gradients at their true size (fp16 divides the loss scale out)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: Optimizer) -> None:
        """The optimizer step (fp16: skipped when a gradient overflowed, and the scale updated); with bf16 weights the
        working copy then takes the new weights."""
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        if self.bf16 is not None:
            self.bf16.refresh()

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps: the loss scaler's state (None without fp16)."""
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore `state_dict`'s state (a checkpoint of another precision has none to restore)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
