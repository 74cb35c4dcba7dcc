"""A loss or weights that are not finite stop the run before anything is saved from them: the run names the step,
phase and epoch, the last checkpoint and best/ stay as they were, no final/ is written, and under DDP every rank
stops together. (The 2026-11-24 attack report's N2.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.errors import BertkitError
from bertkit.training import Trainer, TrainingConfig
from bertkit.training.checkpoint import list_checkpoints, load_training_state
from trainer_toy import ToyData, evaluate_fn, make_model

TRAINING = Path(__file__).resolve().parent


def test_a_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    """N2: the Trainer never checked that the loss is finite; a NaN made every weight NaN and best/ and final/
    were saved from them. Now the run stops before the bad update, naming the step, phase and epoch; the last
    checkpoint and best/ stay as they were, no final/ is written and the weights in memory stay finite."""
    data = ToyData(32)
    data.y[20] = float("nan")  # in order (no shuffling), item 20 is in the batch of step 6
    cfg = TrainingConfig(output_dir=str(tmp_path), lr=0.05, batch_size=4, max_steps=8, warmup=1, shuffle=False,
                         save_every=2, eval_every=2, metric_for_best="mse", progress_bar=False, log_every=1)
    model = make_model(0.0)
    with pytest.raises(BertkitError, match=r"step 6 \(phase 0 'train', epoch 0\.75\): the loss is nan") as e:
        Trainer(model, cfg, data, evaluate=evaluate_fn(ToyData(32))).train()
    assert "checkpoints/step-4, is kept" in str(e.value) and "best/ holds the model of step 4" in str(e.value)
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2, 4]
    state, meta = load_training_state(tmp_path / "checkpoints" / "step-4")  # intact: size and sha256 checked
    assert meta["step"] == 4 and all(torch.isfinite(t).all() for t in state["model"].values())
    best = torch.load(tmp_path / "best" / "model.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in best.values())
    assert not (tmp_path / "final").exists()
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN step never reached the weights
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4, 5]


def test_weights_made_infinite_are_never_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """N2: an update with finite gradients can still leave weights that are not finite (the report made them so
    with an absurd learning rate, which the options layer now refuses: here the optimizer's first step itself writes
    an infinity): best/ and the checkpoint are refused rather than written from inf/NaN weights."""
    step = torch.optim.AdamW.step

    def overflowing_step(self: torch.optim.Optimizer, *args: object, **kwargs: object) -> object:
        out = step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].view(-1)[0] = float("inf")
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", overflowing_step)
    cfg = TrainingConfig(output_dir=str(tmp_path), lr=0.01, batch_size=4, max_steps=4, warmup=1, eval_every=1,
                         metric_for_best="mse", progress_bar=False)
    with pytest.raises(BertkitError, match=r"after step 1 the weights hold inf or NaN values \(inp\.weight\); "
                                            r"best/ was not written"):
        Trainer(make_model(0.0), cfg, ToyData(16), evaluate=evaluate_fn(ToyData(16))).train()
    assert not (tmp_path / "best").exists() and not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_every_ddp_rank_stops_together(tmp_path: Path) -> None:
    """N2 under DDP (2 CPU processes, gloo): one rank's loss is NaN; both ranks stop at the same step with the
    message (no hang, no traceback of ours), nothing saved."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(Path(bertkit.__file__).parents[1]),
                                                                env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(TRAINING / "trainer_toy.py"), "--out", str(tmp_path / "run"), "--steps", "6",
                           "--nan-rank", "1"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    assert done.stderr.count("training stopped at step 1 (phase 0 'train'") == 2, done.stderr[-3000:]
    assert done.stderr.count("exitcode  : 1") == 2  # both processes ended with the message's code, not a hang
    assert "TrainingError" not in done.stderr  # the message, not a traceback (torchrun's own summary is one)
    assert not (tmp_path / "run" / "final").exists() and not (tmp_path / "run" / "checkpoints").exists()
