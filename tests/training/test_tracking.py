"""Trackers (TrainingConfig.report_to), each with its real package: the records a run writes to metrics.jsonl are
read back from TensorBoard's event files (its EventAccumulator), MLflow's local store (its client) and W&B's offline
run folder (its own record type); a chosen tracker that is not installed is a warning naming the extra; an old
config's `tensorboard` still reads."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from trainer_toy import ToyData, evaluate_fn, make_model

from bertkit.training import Trainer, TrainingConfig
from bertkit.training.config import config_from_dict


def _train(out: Path, report_to: list[str], **kw):
    data = ToyData(32)
    config = TrainingConfig(output_dir=str(out), lr=0.05, batch_size=4, warmup=1, max_steps=6, log_every=2,
                            eval_every=3, progress_bar=False, metric_for_best="mse", report_to=report_to, **kw)
    return Trainer(make_model(), config, data, evaluate=evaluate_fn(data)).train()


def _series(history: list[dict], split: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of one number in the run's metrics.jsonl records."""
    return [(r["step"], r[key]) for r in history if r["split"] == split]


def test_tensorboard_events_hold_the_records(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = _train(tmp_path, ["tensorboard"])
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for split, key in [("train", "loss"), ("train", "lr"), ("eval", "mse")]:
        got = [(e.step, e.value) for e in events.Scalars(f"{split}/{key}")]
        want = _series(result.history, split, key)
        assert [s for s, _ in got] == [s for s, _ in want] and want
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # float32 in the events


def test_mlflow_runs_hold_the_records_and_the_settings(tmp_path: Path, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    result = _train(tmp_path / "run", ["mlflow"])
    client = MlflowClient((tmp_path / "run" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("bertkit")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    for split, key in [("train", "loss"), ("eval", "mse")]:
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, f"{split}/{key}"))
        assert got == _series(result.history, split, key)
    assert run.data.params["training.lr"] == "0.05" and run.data.params["training.max_steps"] == "6"


def _wandb_records(path: Path) -> list:
    """The records of a W&B run file: its 7-byte header, then LevelDB log blocks of 32 KiB whose chunks (a 7-byte
    header: crc32c, length, type; types FULL 1, FIRST 2, MIDDLE 3, LAST 4) carry the serialized records."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_run_holds_the_records_and_the_settings(tmp_path: Path, monkeypatch) -> None:
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "home" / name))  # nothing written outside the test's folder
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    result = _train(tmp_path / "run", ["wandb"])
    [run_file] = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    records = _wandb_records(run_file)
    logged: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            for name, value in items.items():
                if not name.startswith("_"):
                    logged.setdefault(name, []).append((items["_step"], value))
    assert logged["train/loss"] == _series(result.history, "train", "loss")
    assert logged["eval/mse"] == _series(result.history, "eval", "mse")
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    settings = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert run.display_name == "run" and run.project == "bertkit" and settings["training.lr"] == 0.05


def test_a_tracker_that_is_not_installed_is_a_warning_naming_its_extra(tmp_path: Path, monkeypatch, capsys) -> None:
    import bertkit.training.tracking as tracking

    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name))
    result = _train(tmp_path, ["mlflow", "tensorboard"])
    assert result.global_step == 6
    err = capsys.readouterr().err
    assert "TrainingConfig.report_to names 'mlflow', but mlflow is not installed: pip install 'bertkit[mlflow]'" in err
    assert not (tmp_path / "mlruns").exists() and (tmp_path / "tensorboard").is_dir()  # the others still report


def test_an_old_config_with_tensorboard_still_reads() -> None:
    assert config_from_dict(TrainingConfig, {"tensorboard": True}).report_to == ["tensorboard"]
    assert config_from_dict(TrainingConfig, {"tensorboard": False}).report_to == []
    assert config_from_dict(TrainingConfig, {"tensorboard": True, "report_to": ["wandb"]}).report_to == ["wandb"]
    assert TrainingConfig().report_to == []  # metrics.jsonl and curves.png only, unless a tracker is chosen


def test_report_to_names_known_trackers() -> None:
    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"TrainingConfig.report_to\[0\]: expected one of tensorboard, mlflow, wandb"):
        TrainingConfig(report_to=["comet"])
