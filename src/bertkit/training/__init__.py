"""The one trainer and its components: config, precision, optimizers, LR schedules, checkpoints, DDP, metrics log,
callbacks (trackers, early stopping), plots."""

from bertkit.training.callbacks import Callback, EarlyStopping
from bertkit.training.config import TrainingConfig
from bertkit.training.optim import Lamb, build_optimizer, parameter_groups, split_decay_names
from bertkit.training.plots import plot_metrics
from bertkit.training.schedule import build_scheduler, linear_warmup_decay, resolve_warmup
from bertkit.training.trainer import Trainer, TrainPhase, TrainResult

__all__ = [
    "Callback",
    "EarlyStopping",
    "Lamb",
    "TrainPhase",
    "TrainResult",
    "Trainer",
    "TrainingConfig",
    "build_optimizer",
    "build_scheduler",
    "linear_warmup_decay",
    "parameter_groups",
    "plot_metrics",
    "resolve_warmup",
    "split_decay_names",
]
