"""A tiny regression model and dataset for trainer tests, also runnable as a script (DDP and signal tests)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.training import Trainer, TrainingConfig


class ToyModel(nn.Module):
    """Linear -> LayerNorm -> dropout -> linear; forward(x, y) returns {'loss': mse}."""

    def __init__(self, dropout: float = 0.2) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.LayerNorm = nn.LayerNorm(16)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        pred = self.out(self.drop(torch.tanh(self.LayerNorm(self.inp(x))))).squeeze(-1)
        return {"loss": ((pred - y) ** 2).mean()}


class ToyData(torch.utils.data.Dataset):
    """n fixed random (x, y) pairs; `delay` seconds per item slows a run down for the signal test."""

    def __init__(self, n: int = 64, delay: float = 0.0) -> None:
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 6, generator=g)
        self.y = self.x.sum(-1).sin() + 0.1 * torch.randn(n, generator=g)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return {"x": self.x[i], "y": self.y[i]}


def make_model(dropout: float = 0.2) -> ToyModel:
    """The same initial weights every time."""
    torch.manual_seed(0)
    return ToyModel(dropout)


def evaluate_fn(data: ToyData):
    """An evaluate callback: mse over the whole dataset."""
    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"mse": float(model(data.x, data.y)["loss"])}
    return evaluate


def signal_at_first_eval(evaluate):
    """Wrap an evaluate callback so its first call sends this process SIGTERM (an interruption mid-run)."""
    calls = []

    def wrapped(model: nn.Module) -> dict[str, float]:
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(model)

    return wrapped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--save-every", type=int, default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--nan-rank", type=int, default=None, help="this DDP rank's targets are all NaN")
    p.add_argument("--bf16-weights", action="store_true", help="precision bf16 with bf16 weights")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    data = ToyData(64, a.delay)
    if a.nan_rank is not None and int(os.environ.get("RANK", "0")) == a.nan_rank:
        data.y[:] = float("nan")
    cfg = TrainingConfig(output_dir=a.out, lr=0.05, batch_size=a.batch_size, max_steps=a.steps, warmup=2,
                         progress_bar=False, log_every=1, save_every=a.save_every, metric_for_best=None,
                         **(dict(precision="bf16", bf16_weights=True) if a.bf16_weights else {}))
    try:
        result = Trainer(make_model(a.dropout), cfg, data).train(resume=a.resume)
    except BertkitError as e:  # as the CLI does: the message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    if result.interrupted:
        return 128 + int(result.signal)
    return 0


if __name__ == "__main__":
    sys.exit(main())
