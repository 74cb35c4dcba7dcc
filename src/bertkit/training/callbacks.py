"""Callbacks: how a run is extended without editing the trainer's loop.

A callback overrides any of the hooks of `Callback`; the trainer calls them on the main process (rank 0) only, in
the order of its list: the trackers of TrainingConfig.report_to, then early stopping, then the ones passed as
`Trainer(..., callbacks=[...])`. A run calls `on_train_begin` once, then `on_log`, `on_evaluate` and `on_save` as
records, evaluations and checkpoints come, and `on_train_end` once at the end (also when it failed).

A callback stops a run with `trainer.request_stop(reason)`: the run then ends after the current step as at its last
one (evaluation if the step had none, checkpoint, final/), every process together.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

from bertkit.training.config import TrainingConfig
from bertkit.training.logging import MetricsLogger, read_metrics


class Trainer(Protocol):
    """What a callback sees of the trainer (bertkit.training.Trainer)."""

    config: TrainingConfig
    output_dir: Path
    state: Any
    """TrainState: step, best_value, best_step, best_metrics, tokens_seen."""
    fingerprint: dict[str, Any]
    """The run's data and settings, as a resume checks them."""
    logger: MetricsLogger
    """metrics.jsonl (`logger.path`)."""

    def request_stop(self, reason: str) -> None: ...


class Callback:
    """The hooks the trainer calls (see the module docstring); each does nothing here."""

    def on_train_begin(self, trainer: Trainer) -> None:
        """Before the first step of this process's run (a resumed run: after its checkpoint was loaded)."""

    def on_log(self, trainer: Trainer, record: dict[str, Any]) -> None:
        """A record was appended to metrics.jsonl (its 'split': 'train' every `log_every` steps, 'eval' after each
        evaluation, 'resume' where a run was resumed)."""

    def on_evaluate(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        """An evaluation returned `metrics` (best/ is already written when they are the best so far)."""

    def on_save(self, trainer: Trainer, folder: Path) -> None:
        """A training-state checkpoint was written to `folder`."""

    def on_train_end(self, trainer: Trainer, result: Any) -> None:
        """The run ended (`result`: its TrainResult), or failed with an error (None; raised again after the hook)."""


class EarlyStopping(Callback):
    """Stop the run when `metric` has not improved by more than `min_delta` for `patience` evaluations in a row
    (TrainingConfig.early_stopping_patience, early_stopping_min_delta; the metric is metric_for_best). A resumed
    run counts the evaluations its metrics.jsonl already holds, so it stops where the straight run would."""

    def __init__(self, metric: str, patience: int, min_delta: float = 0.0, greater_is_better: bool = False) -> None:
        self.metric, self.patience, self.min_delta = metric, patience, min_delta
        self.greater_is_better = greater_is_better
        self.best: float | None = None
        self.waited = 0

    def update(self, value: float) -> bool:
        """Count one evaluation's value; True when `patience` evaluations in a row have not improved on the best."""
        if math.isfinite(value) and (self.best is None or (value > self.best + self.min_delta if self.greater_is_better
                                                           else value < self.best - self.min_delta)):
            self.best, self.waited = value, 0
        else:
            self.waited += 1
        return self.waited >= self.patience

    def on_train_begin(self, trainer: Trainer) -> None:
        self.best, self.waited = None, 0
        for record in read_metrics(trainer.logger.path):
            if record.get("split") == "eval" and self.metric in record:
                self.update(float(record[self.metric]))

    def on_evaluate(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        if self.update(float(metrics[self.metric])):
            best = "none finite" if self.best is None else f"best {self.best:g}"
            trainer.request_stop(f"early stopping: {self.metric} has not improved by more than {self.min_delta:g} "
                                 f"for {self.patience} evaluations ({best})")
