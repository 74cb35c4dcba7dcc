"""TrainingConfig.precision: the trainer's steps really run in the precision asked for. A bf16 run's forward computes
its matrix products in bf16 (autocast) and its first loss is the one a hand-made bf16 autocast forward gives, not
float32's; an fp32 run stays in float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_toy import ToyData, make_model

from bertkit.training import Trainer, TrainingConfig


def _run(out: Path, precision: str, data: ToyData) -> tuple[list[torch.dtype], float]:
    """Four steps of two micro-batches (no dropout, no shuffling): the dtype of the first linear layer's output in
    every forward the trainer ran, and the loss it logged at step 1."""
    model = make_model(dropout=0.0)
    seen: list[torch.dtype] = []
    model.inp.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    config = TrainingConfig(output_dir=str(out), precision=precision, lr=0.05, batch_size=4, grad_accum_steps=2,
                            max_steps=4, warmup=0, shuffle=False, log_every=1, progress_bar=False,
                            device="cpu")
    result = Trainer(model, config, data).train()
    return seen, next(r["loss"] for r in result.history if r["split"] == "train" and r["step"] == 1)


def _first_step_loss(data: ToyData, autocast: bool) -> float:
    """By hand: step 1's loss, the mean over its two micro-batches (items 0-3 and 4-7) of the starting model."""
    model = make_model(dropout=0.0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        losses = [model(data.x[i : i + 4], data.y[i : i + 4])["loss"].float() for i in (0, 4)]
    return float(sum(losses) / 2)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_training_steps_run_in_the_precision_asked_for(tmp_path: Path, precision: str) -> None:
    data = ToyData(32)
    seen, loss = _run(tmp_path, precision, data)
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert seen == [want] * 8  # 4 steps x 2 micro-batches, every one in the precision asked for
    bf16, fp32 = _first_step_loss(data, autocast=True), _first_step_loss(data, autocast=False)
    assert abs(bf16 - fp32) > 1e-5 * abs(fp32)  # apart by far more than the tolerance below (here 1.5e-4)
    assert loss == pytest.approx(bf16 if precision == "bf16" else fp32, rel=1e-6, abs=0)
