"""Trackers (TrainingConfig.report_to): the records of metrics.jsonl sent as they are written to TensorBoard, MLflow
or Weights & Biases, each a Callback on the main process. Each package is an optional extra; a chosen one that is
not installed is a warning naming the extra (`trackers`).

Every numeric field of a record goes as `SPLIT/NAME` (`train/loss`, `eval/accuracy`) at the record's step; MLflow
and W&B also get the run's settings as parameters. Each start of a run (a resume too) is a run of its own in MLflow
and W&B; TensorBoard writes into the same folder and hides the events a resume replays.

- 'tensorboard' (extra `tensorboard`): event files in OUTPUT/tensorboard (`tensorboard --logdir OUTPUT`).
- 'mlflow' (extra `mlflow`, the mlflow-skinny client): a run in experiment $MLFLOW_EXPERIMENT_NAME (default
  'bertkit') of the tracking server or store $MLFLOW_TRACKING_URI, or without it of the local file store
  OUTPUT/mlruns (`mlflow ui --backend-store-uri OUTPUT/mlruns` with the full mlflow package). MLflow 3 keeps file
  stores in maintenance mode behind MLFLOW_ALLOW_FILE_STORE, which this sets for that default store.
- 'wandb' (extra `wandb`): a run of project $WANDB_PROJECT (default 'bertkit') in OUTPUT/wandb, offline unless
  $WANDB_MODE says otherwise (`wandb sync OUTPUT/wandb/offline-run-*` uploads it later).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import time
from typing import Any, Sequence

from bertkit.training.callbacks import Callback, Trainer
from bertkit.training.logging import RECORD_KEYS

MLFLOW_PARAM_LENGTH = 6000  # MLflow refuses a longer parameter value
MLFLOW_BATCH = 100  # MLflow's most parameters in one log_batch


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of a metrics.jsonl record, named `split/name` (the record's own keys left out)."""
    split = record.get("split", "train")
    return {f"{split}/{k}": float(v) for k, v in record.items()
            if k not in RECORD_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def run_settings(trainer: Trainer) -> dict[str, Any]:
    """The run's settings for a tracker's parameters: the job's fingerprint and every TrainingConfig field, flat,
    nested values as JSON."""
    values = {**trainer.fingerprint, **{f"training.{k}": v for k, v in dataclasses.asdict(trainer.config).items()}}
    return {k: v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v, sort_keys=True)
            for k, v in sorted(values.items())}


class Tracker(Callback):
    """A Callback that sends each record's numbers to a tracking service: `open` at the start, `write` per record,
    `close` at the end (`ok` False when the run failed)."""

    def on_train_begin(self, trainer: Trainer) -> None:
        self.open(trainer)

    def on_log(self, trainer: Trainer, record: dict[str, Any]) -> None:
        values = scalars(record)
        if values:
            self.write(values, int(record["step"]))

    def on_train_end(self, trainer: Trainer, result: Any) -> None:
        self.close(ok=result is not None)

    def open(self, trainer: Trainer) -> None:
        raise NotImplementedError

    def write(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def close(self, ok: bool) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    """Scalars in OUTPUT/tensorboard through torch.utils.tensorboard."""

    def open(self, trainer: Trainer) -> None:
        from torch.utils.tensorboard import SummaryWriter

        step = trainer.state.step  # a resume hides the events after its checkpoint: it writes them again
        self.writer = SummaryWriter(str(trainer.output_dir / "tensorboard"), purge_step=step + 1 if step else None)

    def write(self, values: dict[str, float], step: int) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self, ok: bool) -> None:
        self.writer.close()


class MLflowTracker(Tracker):
    """A run in an MLflow tracking store, through MlflowClient (no process-wide active run)."""

    def open(self, trainer: Trainer) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (trainer.output_dir / "mlruns").resolve().as_uri()
        self.client = MlflowClient(uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "bertkit")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(name)
        tags = {"bertkit.output_dir": str(trainer.output_dir), "bertkit.start_step": str(trainer.state.step)}
        self.run_id = self.client.create_run(experiment_id, run_name=trainer.output_dir.name, tags=tags).info.run_id
        params = [Param(k, str(v)[:MLFLOW_PARAM_LENGTH]) for k, v in run_settings(trainer).items()]
        for i in range(0, len(params), MLFLOW_BATCH):
            self.client.log_batch(self.run_id, params=params[i : i + MLFLOW_BATCH])

    def write(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def close(self, ok: bool) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if ok else "FAILED")


class WandbTracker(Tracker):
    """A Weights & Biases run in OUTPUT/wandb, offline unless WANDB_MODE says otherwise."""

    def open(self, trainer: Trainer) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "bertkit"), name=trainer.output_dir.name,
                              dir=str(trainer.output_dir), config=run_settings(trainer),
                              mode=os.environ.get("WANDB_MODE", "offline"),  # type: ignore[arg-type]
                              settings=wandb.Settings(console="off"))  # the trainer's own output stays its own

    def write(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self, ok: bool) -> None:
        self.run.finish(exit_code=0 if ok else 1)


# report_to's names -> the tracker; each needs the module of its name (installed by the bertkit extra of its name).
TRACKERS: dict[str, type[Tracker]] = {"tensorboard": TensorBoardTracker, "mlflow": MLflowTracker, "wandb": WandbTracker}


def trackers(names: Sequence[str]) -> tuple[list[Tracker], list[str]]:
    """The trackers `names` chooses whose package is installed, and a warning for each that is not."""
    chosen, warnings = [], []
    for name in dict.fromkeys(names):  # each once, in order
        if importlib.util.find_spec(name) is None:
            warnings.append(f"warning: TrainingConfig.report_to names {name!r}, but {name} is not installed: "
                            f"pip install 'bertkit[{name}]' (this run reports to metrics.jsonl and curves.png only)")
        else:
            chosen.append(TRACKERS[name]())
    return chosen, warnings
