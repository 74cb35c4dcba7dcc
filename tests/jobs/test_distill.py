"""`bertkit distill` end to end on tiny models: task-specific (a fine-tuned teacher -> a fine-tuned folder that
evaluate uses), pre-training-time (masked LM on prepared data), resume, and the config's round trip."""

from __future__ import annotations

import gzip
import json
import os
import signal
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import ConfigError
from bertkit.model.folder import load_model

DEMO = Path(bertkit.__file__).parent / "demo_data" / "shakespeare.txt.gz"


@pytest.fixture(scope="module")
def teacher(finetuned_dir: Path) -> Path:
    """The tiny model (2 layers) fine-tuned on a few SST-2 sentences (tests/conftest.py): a fine-tuned teacher."""
    return finetuned_dir


def _args(teacher: Path, data_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--teacher", str(teacher), "--student-layers", "1", "--train", str(data_dir / "sst2/train.tsv"),
            "--dev", str(data_dir / "sst2/dev.tsv"), "--max-train-examples", "64", "--max-eval-examples", "16",
            "--epochs", "2", "--batch-size", "8", "--output", str(out), "--no-progress", *extra]


def test_task_distillation_writes_a_fine_tuned_folder(tmp_path: Path, data_dir: Path, teacher: Path, capsys) -> None:
    """The student in best/ is the teacher's layer 0 with its embeddings, pooler and head, trained a little; the
    metrics recorded for it are the Trainer's best evaluation, and evaluate on the folder gives them again."""
    from safetensors.torch import load_file

    out = tmp_path / "student"
    assert main(_args(teacher, data_dir, out)) == 0
    assert "teacher layers [0] of 2 (task distillation)" in capsys.readouterr().out
    summary = json.loads((out / "results.json").read_text())
    assert summary["distillation"] == {"mode": "task", "teacher": str(teacher), "teacher_depth": 2,
                                       "teacher_layers": [0], "temperature": 2.0, "alpha_ce": 1.0,
                                       "alpha_hard": 1.0, "alpha_cos": 1.0}
    assert summary["train_examples"] == 64 and summary["dev_examples"] == 16
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [8, 16]  # the Trainer's evaluation, each epoch
    best = summary["best_metrics"]
    (at_best,) = [r for r in evals if r["step"] == best["step"]]
    assert best == {k: v for k, v in at_best.items() if k not in ("split", "epoch")}
    assert best["accuracy"] == max(r["accuracy"] for r in evals)
    from bertkit.dataclass_io import read_config_file
    from bertkit.jobs.distill import DistillConfig

    assert DistillConfig.from_dict(read_config_file(out / "distill_config.yaml")).student_layers == 1  # the record
    student = load_model(out / "best")
    assert student.config.num_hidden_layers == 1 and student.config.task == "classification"
    assert student.config.label_names == ["0", "1"] and student.config.task_settings["max_length"] == 32  # teacher's
    # Weights: the teacher's tensors but layer 1's, each moved by training (16 steps at lr 3e-5 move a weight by
    # about 1e-4, never 5e-3), and layer 0's matrices, not layer 1's (those differ from layer 0's by ~0.1).
    s, t = load_file(out / "best" / "model.safetensors"), load_file(teacher / "model.safetensors")
    assert set(s) == {k for k in t if ".layer.1." not in k}
    moved = {k: float((s[k] - t[k]).abs().max()) for k in s}
    assert max(moved.values()) < 5e-3, moved
    matrices = [k for k in s if s[k].dim() == 2 and ".layer.0." in k]
    assert len(matrices) == 6 and all(moved[k] > 1e-6 for k in [*matrices, "classifier.weight"]), moved
    assert all(float((s[k] - t[k.replace(".layer.0.", ".layer.1.")]).abs().max()) > 0.01 for k in matrices)
    assert main(["evaluate", "--model", str(out / "best"), "--input", str(data_dir / "sst2/dev.tsv"),
                 "--max-examples", "16", "--output", str(tmp_path / "m.json")]) == 0
    evaluated = json.loads((tmp_path / "m.json").read_text())  # the same 16 dev sentences (seed 42)
    assert evaluated["examples"] == 16
    assert {k: evaluated[k] for k in ("accuracy", "matthews", "f1")} == pytest.approx(
        {k: best[k] for k in ("accuracy", "matthews", "f1")}, abs=1e-9)


def test_a_stopped_distillation_resumes_to_the_same_student(tmp_path: Path, data_dir: Path, teacher: Path,
                                                           monkeypatch, capsys) -> None:
    """SIGTERM mid-run writes the Trainer's checkpoint (the student only); --resume ends with the uninterrupted
    run's exact weights and metrics (the teacher is rebuilt from its folder)."""
    from bertkit.training.logging import MetricsLogger

    assert main(_args(teacher, data_dir, tmp_path / "straight")) == 0
    real_log = MetricsLogger.log

    def log_then_stop(self, record):
        real_log(self, record)
        if record["split"] == "train" and record["step"] >= 10:
            os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "stopped"
    monkeypatch.setattr(MetricsLogger, "log", log_then_stop)
    assert main(_args(teacher, data_dir, out)) == 128 + signal.SIGTERM
    state = torch.load(next((out / "checkpoints").glob("step-*")) / "state.pt", weights_only=False)
    assert all(k.startswith("student.") for k in state["model"])
    monkeypatch.setattr(MetricsLogger, "log", real_log)
    assert main(_args(teacher, data_dir, out, "--resume")) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (tmp_path / "straight", out))
    assert a["best_metrics"] == b["best_metrics"]
    wa, wb = (load_model(d / "final").state_dict() for d in (tmp_path / "straight", out))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def mlm_teacher(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> dict[str, Path]:
    """A tiny 2-layer BertForPreTraining with MiniLM's vocabulary, and Shakespeare prepared for masked LM."""
    from bertkit.data import PretrainingDataConfig, prepare_pretraining
    from bertkit.model import BertConfig, BertForPreTraining

    root = tmp_path_factory.mktemp("mlm")
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=37)).save_pretrained(str(root / "teacher"))
    tokenizer.save_pretrained(root / "teacher")
    lines = gzip.open(DEMO, "rt", encoding="utf-8").read().splitlines()
    out = {"teacher": root / "teacher"}
    for name, (lo, hi) in {"train": (0, 400), "eval": (400, 500)}.items():
        (root / f"{name}.txt").write_text("\n".join(lines[lo:hi]) + "\n", encoding="utf-8")
        cfg = PretrainingDataConfig(max_length=32, dupe_factor=1, layout="lines", dynamic_masking=True,
                                    max_predictions_per_seq=5, instances="full_sentences")
        out[name] = prepare_pretraining([root / f"{name}.txt"], root / name, tokenizer, cfg).output_dir
    return out


def test_pretraining_time_distillation_on_prepared_text(tmp_path: Path, mlm_teacher: dict[str, Path]) -> None:
    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(mlm_teacher["teacher"]), "--train", str(mlm_teacher["train"]),
                 "--dev", str(mlm_teacher["eval"]), "--max-steps", "4", "--batch-size", "8", "--warmup", "1",
                 "--eval-every", "2", "--output", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "results.json").read_text())
    d = summary["distillation"]
    assert d["mode"] == "pretraining" and d["teacher_layers"] == [0]  # None = half of 2 layers
    assert (d["alpha_ce"], d["alpha_hard"], d["alpha_cos"]) == (5.0, 2.0, 1.0)  # DistilBERT's
    metrics = summary["final_metrics"]
    assert {"mlm_loss", "mlm_accuracy"} <= set(metrics) and "nsp_accuracy" not in metrics  # no NSP, as DistilBERT
    student = load_model(out / "final")
    assert type(student).__name__ == "BertForPreTraining" and student.config.num_hidden_layers == 1
    assert (out / "final" / "vocab.txt").is_file()
    train = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in train if r["split"] == "eval"] == [2, 4]


def _resolve(*argv: str):
    import argparse

    from bertkit.cli import distill as cli_distill

    parser = argparse.ArgumentParser()
    cli_distill.register(parser.add_subparsers())
    return cli_distill.resolve_distill_config(parser.parse_args(["distill", *argv]))


def test_distill_config_round_trips_and_names_bad_fields(tmp_path: Path, teacher: Path,
                                                         mlm_teacher: dict[str, Path]) -> None:
    from bertkit.dataclass_io import dump_config, read_config_file
    from bertkit.jobs.distill import DistillConfig

    config = _resolve("--teacher", str(teacher), "--train", "t.tsv", "--dev", "d.tsv", "--student-layers", "1",
                      "--alpha-ce", "3", "--lr", "1e-4", "--output", "o", "--options", "{max_length: 64}")
    assert (config.alpha_ce, config.training.lr, config.training.output_dir) == (3.0, 1e-4, "o")
    assert config.training.epochs == 3.0 and config.training.metric_for_best == "accuracy"  # fine-tuning defaults
    assert config.weights() == {"alpha_ce": 3.0, "alpha_hard": 1.0, "alpha_cos": 1.0}
    path = tmp_path / "run.yaml"
    path.write_text(dump_config(config))
    assert DistillConfig.from_dict(read_config_file(path)) == config
    assert _resolve("--config", str(path)) == config
    pre = _resolve("--teacher", str(mlm_teacher["teacher"]), "--train", "d", "--max-steps", "5")
    assert pre.mode == "pretraining" and pre.training.max_steps == 5 and pre.training.metric_for_best == "loss"
    with pytest.raises(ConfigError, match=r"DistillConfig.teacher is required"):
        DistillConfig(train="t")
    with pytest.raises(ConfigError, match=r"DistillConfig.alpha_cos: expected a number >= 0 and <= 10000, found -1.0"):
        DistillConfig(teacher=str(teacher), train="t", dev="d", alpha_cos=-1.0)
    with pytest.raises(ConfigError, match=r"teacher_layers names 2 layers but student_layers is 1"):
        DistillConfig(teacher=str(teacher), train="t", dev="d", student_layers=1, teacher_layers=[0, 1])
    with pytest.raises(ConfigError, match=r"DistillConfig.max_train_examples applies to task-specific"):
        DistillConfig(teacher=str(mlm_teacher["teacher"]), train="t", max_train_examples=5)
    with pytest.raises(ConfigError, match=r"DistillConfig.dev is required"):
        DistillConfig(teacher=str(teacher), train="t")
