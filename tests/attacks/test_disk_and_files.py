"""Attacks on outputs: a full disk, file permissions, a kill during pruning. Every output stays whole or absent,
and the error names the file and says what happened."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from bertkit.errors import OutputError
from bertkit.model import BertConfig, BertForPreTraining

TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


@pytest.fixture()
def small_disk(tmp_path: Path):
    """A 2 MiB tmpfs (root only; skipped with the reason elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: even if a test left a file open


def test_full_disk_gives_a_named_error_and_keeps_the_previous_model(small_disk: Path) -> None:
    small = BertForPreTraining(BertConfig(**{**TINY, "vocab_size": 500}))
    small.save_pretrained(str(small_disk / "m"))
    before = (small_disk / "m" / "model.safetensors").read_bytes()
    big = BertForPreTraining(BertConfig(**TINY))  # about 4 MB of weights: does not fit
    with pytest.raises(OutputError, match=r"model\.safetensors: no space left on the device"):
        big.save_pretrained(str(small_disk / "m"))
    assert (small_disk / "m" / "model.safetensors").read_bytes() == before
    assert not [p for p in (small_disk / "m").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_full_disk_during_a_training_checkpoint(small_disk: Path) -> None:
    from bertkit.training import checkpoint as ckpt

    state = {"model": BertForPreTraining(BertConfig(**TINY)).state_dict()}
    with pytest.raises(OutputError, match=r"state\.pt: no space left on the device"):
        ckpt.save_training_state(small_disk / "checkpoints" / "step-1", state, {"step": 1})
    assert not (small_disk / "checkpoints" / "step-1").exists()


def test_saved_files_are_readable_by_others(tmp_path: Path) -> None:
    """safetensors recreates its file with mode 0600; every file bertkit writes gets the umask's mode."""
    old = os.umask(0o022)
    try:
        BertForPreTraining(BertConfig(**{**TINY, "vocab_size": 500})).save_pretrained(str(tmp_path / "m"))
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "m" / name).stat().st_mode & 0o777 == 0o644, name


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
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from trainer_toy import ToyData, ToyModel

    from bertkit.io import folder_lock
    from bertkit.training import Trainer, TrainingConfig

    cfg = TrainingConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=8, progress_bar=False)
    with folder_lock(tmp_path / "run"):  # a first job, still running
        with pytest.raises(OutputError, match=rf"another job is writing into this folder \(pid {os.getpid()}"):
            Trainer(ToyModel(), cfg, ToyData()).train()
        assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert Trainer(ToyModel(), cfg, ToyData()).train().global_step == 2  # free again once it ended
