"""The one trainer and its components: config, precision, optimizers, LR schedules, checkpoints, DDP, metrics log,
callbacks (trackers, early stopping), plots. Names are imported on first use (bertkit.lazy), so
`bertkit.training.config` reads without torch."""

from bertkit.lazy import lazy_exports

_EXPORTS = {
    "Callback": "bertkit.training.callbacks",
    "EarlyStopping": "bertkit.training.callbacks",
    "TrainingConfig": "bertkit.training.config",
    **{name: "bertkit.training.optim" for name in ("Lamb", "build_optimizer", "parameter_groups",
                                                     "split_decay_names")},
    "plot_metrics": "bertkit.training.plots",
    **{name: "bertkit.training.schedule" for name in ("build_scheduler", "linear_warmup_decay", "resolve_warmup")},
    **{name: "bertkit.training.trainer" for name in ("Trainer", "TrainPhase", "TrainResult")},
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
