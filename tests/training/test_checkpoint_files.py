"""A training folder's files under accidents: a kill while old checkpoints are pruned leaves a folder that resumes,
and a second job cannot write into a folder a running job holds (the output lock)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from bertkit.errors import OutputError


def test_kill_during_pruning_leaves_a_resumable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bertkit.training import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        ckpt.save_training_state(ckpt.step_dir(root, step), {"x": torch.ones(3) * step}, {"step": step})
    real_rmtree = ckpt.shutil.rmtree

    def killed(path, *a, **kw):  # noqa: ANN001, ANN002, ANN003
        if not Path(path).exists():
            return
        (Path(path) / ckpt.STATE_FILE).unlink(missing_ok=True)  # part of the folder is gone...
        raise KeyboardInterrupt  # ...when the kill arrives

    monkeypatch.setattr(ckpt.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.prune_checkpoints(root, keep_last=1)
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    assert [s for s, _ in ckpt.list_checkpoints(root)] == [2, 3]  # the half-deleted one no longer looks like one
    assert ckpt.latest_checkpoint(root).name == "step-3"
    # a newest folder emptied some other way is passed over, not a failed resume
    (ckpt.step_dir(root, 3) / ckpt.STATE_FILE).unlink()
    assert ckpt.latest_checkpoint(root).name == "step-2"
    ckpt.prune_checkpoints(root, keep_last=2)
    assert sorted(p.name for p in root.iterdir()) == ["step-2", "step-3"]  # hidden leftovers cleaned up


def test_two_jobs_cannot_write_into_one_folder(tmp_path: Path) -> None:
    """The second finetune/pretrain into a busy folder stops at once, naming the holder."""
    from trainer_toy import ToyData, ToyModel

    from bertkit.io import folder_lock
    from bertkit.training import Trainer, TrainingConfig

    cfg = TrainingConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=8, progress_bar=False)
    with folder_lock(tmp_path / "run"):  # a first job, still running
        with pytest.raises(OutputError, match=rf"another job is writing into this folder \(pid {os.getpid()}"):
            Trainer(ToyModel(), cfg, ToyData()).train()
        assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert Trainer(ToyModel(), cfg, ToyData()).train().global_step == 2  # free again once it ended
