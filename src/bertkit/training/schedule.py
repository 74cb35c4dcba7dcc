"""Learning-rate schedule: linear warm-up, then linear decay to 0 (Devlin et al. 2019, appendix A.2)."""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from bertkit.errors import ConfigError


def resolve_warmup(warmup: float, total_steps: int) -> int:
    """Warm-up steps from a step count (>= 1) or a fraction of `total_steps` (< 1)."""
    if warmup < 0:
        raise ConfigError(f"warmup = {warmup!r}: expected a step count or a fraction >= 0")
    if warmup < 1:
        return int(round(warmup * total_steps))
    return int(warmup)


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier of optimizer update `step` (0-based).

    Warm-up: (step + 1) / warmup_steps, so the first update already moves and update warmup_steps - 1 reaches
    the peak. Then (total_steps - step) / (total_steps - warmup_steps): 1 at step = warmup_steps, 0 at total_steps.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if total_steps <= warmup_steps:
        return 1.0 if step < total_steps else 0.0
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


class _WarmupDecay:
    """Picklable LR lambda (LambdaLR stores it in its state only when it is a callable object)."""

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        return linear_warmup_decay(step, self.warmup_steps, self.total_steps)


def build_scheduler(optimizer: Optimizer, warmup: float, total_steps: int) -> LambdaLR:
    """A LambdaLR giving update s the rate lr * linear_warmup_decay(s, ...); call .step() after each update."""
    return LambdaLR(optimizer, _WarmupDecay(resolve_warmup(warmup, total_steps), total_steps))
