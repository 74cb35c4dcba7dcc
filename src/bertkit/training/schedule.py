"""Learning-rate schedules (TrainingConfig.schedule): linear warm-up, then

- 'linear': linear decay to 0 (Devlin et al. 2019, appendix A.2; the default);
- 'cosine': half a cosine down to 0 (Loshchilov and Hutter 2017, without restarts);
- 'constant': the peak to the end;
- 'warmup-stable-decay': the peak until the last `decay` steps, then linear to 0 (Hu et al. 2024, MiniCPM; Hägele
  et al. 2024): the stable stretch can be extended or cut without restarting the schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from bertkit.errors import ConfigError


def resolve_warmup(warmup: float, total_steps: int) -> int:
    """Steps from a step count (>= 1) or a fraction of `total_steps` (< 1): the warm-up's, and the final decay's."""
    if warmup < 0:
        raise ConfigError(f"warmup = {warmup!r}: expected a step count or a fraction >= 0")
    if warmup < 1:
        return int(round(warmup * total_steps))
    return int(warmup)


def lr_factor(schedule: str, step: int, warmup_steps: int, total_steps: int, decay_steps: int = 0) -> float:
    """LR multiplier of optimizer update `step` (0-based) under `schedule`. The warm-up's first update already
    moves, and update warmup_steps - 1 reaches the peak; the decay starts at the warm-up's end (warmup-stable-decay:
    `decay_steps` before the end, not before the warm-up's end) and reaches 0 at total_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    start = max(warmup_steps, total_steps - decay_steps) if schedule == "warmup-stable-decay" else warmup_steps
    if step < start:
        return 1.0
    if step >= total_steps:
        return 0.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * (step - start) / (total_steps - start)))
    return (total_steps - step) / (total_steps - start)


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier of update `step` under the paper's schedule: `lr_factor('linear', ...)`."""
    return lr_factor("linear", step, warmup_steps, total_steps)


@dataclass
class _Schedule:
    """Picklable LR lambda (LambdaLR stores it in its state only when it is a callable object)."""

    schedule: str
    warmup_steps: int
    total_steps: int
    decay_steps: int

    def __call__(self, step: int) -> float:
        return lr_factor(self.schedule, step, self.warmup_steps, self.total_steps, self.decay_steps)


def build_scheduler(optimizer: Optimizer, warmup: float, total_steps: int, schedule: str = "linear",
                    decay: float = 0.1) -> LambdaLR:
    """A LambdaLR giving update s the rate lr * lr_factor(schedule, s, ...); call .step() after each update."""
    return LambdaLR(optimizer, _Schedule(schedule, resolve_warmup(warmup, total_steps), total_steps,
                                         resolve_warmup(decay, total_steps)))
