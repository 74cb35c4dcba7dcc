"""Callbacks, the trainer's extension point: the hooks come in their documented order, built-in ones first; early
stopping ends a run at the evaluation its patience runs out, a resumed run too; the first step is always logged."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_toy import ToyData, evaluate_fn, make_model

from bertkit.errors import ConfigError
from bertkit.training import Trainer, TrainingConfig
from bertkit.training.callbacks import Callback, EarlyStopping
from bertkit.training.tracking import TensorBoardTracker


def _config(out: Path, **kw) -> TrainingConfig:
    base = dict(output_dir=str(out), lr=0.05, batch_size=4, warmup=1, progress_bar=False, log_every=2,
                metric_for_best="mse")
    return TrainingConfig(**{**base, **kw})


class Recorder(Callback):
    """Writes down every hook call as (name, hook, what)."""

    def __init__(self, name: str, calls: list[tuple[str, str, Any]]) -> None:
        self.name, self.calls = name, calls

    def on_train_begin(self, trainer: Trainer) -> None:
        self.calls.append((self.name, "begin", trainer.state.step))

    def on_log(self, trainer: Trainer, record: dict[str, Any]) -> None:
        self.calls.append((self.name, "log", (record["split"], record["step"])))

    def on_evaluate(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        self.calls.append((self.name, "evaluate", trainer.state.step))

    def on_save(self, trainer: Trainer, folder: Path) -> None:
        self.calls.append((self.name, "save", folder.name))

    def on_train_end(self, trainer: Trainer, result: Any) -> None:
        self.calls.append((self.name, "end", result.global_step))


def test_hooks_come_in_order_built_in_callbacks_first(tmp_path: Path) -> None:
    data = ToyData(32)
    calls: list[tuple[str, str, Any]] = []
    config = _config(tmp_path, max_steps=4, eval_every=2, save_every=2, report_to=["tensorboard"],
                     early_stopping_patience=3)
    trainer = Trainer(make_model(), config, data, evaluate=evaluate_fn(data),
                      callbacks=[Recorder("a", calls), Recorder("b", calls)])
    trainer.train()
    assert [type(c) for c in trainer.callbacks] == [TensorBoardTracker, EarlyStopping, Recorder, Recorder]
    assert [(hook, what) for name, hook, what in calls if name == "a"] == [
        ("begin", 0),
        ("log", ("train", 1)),  # the first step, whatever log_every is
        ("log", ("train", 2)), ("log", ("eval", 2)), ("evaluate", 2), ("save", "step-2"),
        ("log", ("train", 4)), ("log", ("eval", 4)), ("evaluate", 4), ("save", "step-4"),
        ("end", 4),
    ]
    assert [name for name, _, _ in calls] == ["a", "b"] * (len(calls) // 2)  # each hook: a, then b


def test_the_first_step_is_logged_whatever_log_every_is(tmp_path: Path) -> None:
    result = Trainer(make_model(), _config(tmp_path, max_steps=5, log_every=100, metric_for_best=None),
                     ToyData(32)).train()
    assert [r["step"] for r in result.history if r["split"] == "train"] == [1, 5]


def test_a_failed_run_ends_its_callbacks_with_no_result(tmp_path: Path) -> None:
    ended: list[Any] = []

    class Ends(Callback):
        def on_train_end(self, trainer: Trainer, result: Any) -> None:
            ended.append(result)

    def broken(model: torch.nn.Module) -> dict[str, float]:
        raise RuntimeError("evaluation broke")

    with pytest.raises(RuntimeError, match="evaluation broke"):
        Trainer(make_model(), _config(tmp_path, max_steps=4, eval_every=2), ToyData(32), evaluate=broken,
                callbacks=[Ends()]).train()
    assert ended == [None]


def _scripted(values: dict[int, float], trainer_box: list[Trainer]):
    """An evaluate function whose 'mse' at step s is values[s]."""
    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        return {"mse": values[trainer_box[0].state.step]}
    return evaluate


@pytest.mark.parametrize("min_delta, stop_step, best_step", [(0.0, 4, 2), (0.05, 6, 6)])
def test_early_stopping_stops_when_patience_runs_out(tmp_path: Path, min_delta: float, stop_step: int,
                                                     best_step: int) -> None:
    """Patience 2, an evaluation every step. min_delta 0: 1.0, 0.9 (best), 0.95, 0.91: two without improvement, the
    run stops at step 4. min_delta 0.05: 0.86 at step 3 improves on 0.9 by 0.04 only (no improvement), 0.84 at step
    4 by 0.06 (the new best), then 0.83 and 0.82 do not: it stops at step 6 (best/ still keeps the lowest, 0.82: the
    margin is early stopping's, not the best model's)."""
    values = {1: 1.0, 2: 0.9, 3: 0.95 if min_delta == 0 else 0.86, 4: 0.91 if min_delta == 0 else 0.84,
              5: 0.83, 6: 0.82, 7: 0.5, 8: 0.4}
    box: list[Trainer] = []
    trainer = Trainer(make_model(), _config(tmp_path, max_steps=8, eval_every=1, early_stopping_patience=2,
                                            early_stopping_min_delta=min_delta), ToyData(32),
                      evaluate=_scripted(values, box))
    box.append(trainer)
    result = trainer.train()
    assert result.global_step == stop_step and not result.interrupted
    assert result.stop_reason is not None and result.stop_reason.startswith("early stopping: mse has not improved")
    assert result.best_metrics["step"] == best_step
    assert [r["step"] for r in result.history if r["split"] == "eval"] == list(range(1, stop_step + 1))
    assert (tmp_path / "final").is_dir() and (tmp_path / "checkpoints" / f"step-{stop_step}").is_dir()


def test_a_resumed_run_stops_early_where_the_straight_run_does(tmp_path: Path) -> None:
    """The patience counted before a resume is counted again from metrics.jsonl: stopped by SIGTERM at step 3 (after
    0.95, one evaluation without improvement), the resumed run stops at step 4 like a straight one."""
    values = {1: 1.0, 2: 0.9, 3: 0.95, 4: 0.91, 5: 0.5, 6: 0.4, 7: 0.3, 8: 0.2}
    kw = dict(max_steps=8, eval_every=1, save_every=1, early_stopping_patience=2)
    box: list[Trainer] = []

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        step = box[-1].state.step
        if step == 3 and len(box) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"mse": values[step]}

    box.append(Trainer(make_model(), _config(tmp_path, **kw), ToyData(32), evaluate=evaluate))
    first = box[0].train()
    assert first.interrupted and first.global_step == 3
    box.append(Trainer(make_model(), _config(tmp_path, **kw), ToyData(32), evaluate=evaluate))
    result = box[1].train(resume=True)
    assert result.global_step == 4 and result.stop_reason is not None


def test_early_stopping_needs_a_metric() -> None:
    with pytest.raises(ConfigError, match="early_stopping_patience is set but metric_for_best is None"):
        TrainingConfig(metric_for_best=None, early_stopping_patience=2)
    with pytest.raises(ConfigError, match=r"TrainingConfig.early_stopping_patience: expected an integer >= 1"):
        TrainingConfig(early_stopping_patience=0)
