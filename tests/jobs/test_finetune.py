"""End to end through the real CLI: finetune -> evaluate -> predict for every task.

Unmarked: a tiny random model on a few real examples (the pipeline, files and formats; seconds each).
MiniLM weights on small real subsets, asserting the metric is well above chance: a short SST-2, CoNLL and
multiple-choice run in CI, longer ones (and SQuAD's) are marked slow (`python3 -m pytest -m slow tests/jobs`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli import main
from bertkit.model.folder import load_model


def finetune(model: Path, out: Path, *args: str) -> dict:
    code = main(["finetune", "--model", str(model), "--output", str(out), "--no-progress", "--epochs", "1",
                 "--batch-size", "8", *args])
    assert code == 0
    return json.loads((out / "results.json").read_text())


def mc_file(path: Path, n: int) -> Path:
    """A small SWAG-style file: which choice repeats the context's colour word."""
    colours = ["red", "green", "blue", "black"]
    with open(path, "w") as f:
        for i in range(n):
            c = colours[i % 4]
            choices = [f"the sky is {x}" for x in colours]
            f.write(json.dumps({"id": f"q{i}", "context": f"I painted it {c}.", "question": "Then",
                                "choices": choices, "label": i % 4}) + "\n")
    return path


@pytest.mark.parametrize("task, train, dev, extra", [
    ("classification", "mrpc/train.tsv", "mrpc/dev.tsv", ["--max-length", "32"]),
    ("ner", "conll2003/train.txt", "conll2003/valid.txt", ["--max-length", "32"]),
    ("qa", "squad_v1.1/dev-v1.1.json#:38", "squad_v1.1/dev-v1.1.json#38:", ["--max-length", "64",
                                                                             "--doc-stride", "16"]),
])
def test_cli_round_trip_tiny(tmp_path, data_dir, tiny_dir, task, train, dev, extra) -> None:
    out = tmp_path / "run"
    summary = finetune(tiny_dir, out, "--task", task, "--train", str(data_dir / train), "--dev", str(data_dir / dev),
                       "--max-train-examples", "24", "--max-eval-examples", "12", *extra)
    best = out / "best"
    assert summary["train_examples"] == 24 and summary["dev_examples"] == 12
    assert (best / "vocab.txt").is_file() and (out / "metrics.jsonl").is_file()
    model = load_model(best)
    assert model.config.task in (task, "multiple_choice") and model.config.task_settings["max_length"]
    if task == "classification":
        assert model.config.label_names == ["0", "1"]
    if task == "ner":
        assert model.config.label_names[0] == "O" and "B-PER" in model.config.label_names
    assert main(["evaluate", "--model", str(best), "--input", str(data_dir / dev), "--max-examples", "12",
                 "--output", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())  # the same 12 dev examples (seed 42) as training's
    recorded = {k: v for k, v in summary["best_metrics"].items() if k != "step"}
    assert summary["main_metric"] in recorded and metrics["examples"] == 12
    assert {k: metrics[k] for k in recorded} == pytest.approx(recorded, abs=1e-9)  # best/ is the model they came from
    # predictions in the task's format
    small = tmp_path / "small"
    if task == "classification":
        lines = (data_dir / dev).read_text(encoding="utf-8-sig").splitlines()[:6]
        small.write_text("\n".join(lines) + "\n")
        assert main(["predict", "--model", str(best), "--input", str(small), "--output", str(tmp_path / "p")]) == 0
        rows = (tmp_path / "p").read_text().splitlines()
        assert rows[0].endswith("\tprediction") and len(rows) == 6
        assert all(r.split("\t")[-1] in ("0", "1") and len(r.split("\t")) == 6 for r in rows[1:])
    elif task == "ner":
        small.write_text("EU B-ORG\nrejects O\n\nPeter B-PER\n")
        assert main(["predict", "--model", str(best), "--input", str(small), "--output", str(tmp_path / "p")]) == 0
        blocks = (tmp_path / "p").read_text().strip().split("\n\n")
        assert [len(b.splitlines()) for b in blocks] == [2, 1]
        assert all(len(line.split("\t")) == 2 for b in blocks for line in b.splitlines())
    else:
        doc = {"data": [{"paragraphs": [{"context": "Paris is the capital of France.",
                                         "qas": [{"id": "a1", "question": "What is the capital?"}]}]}]}
        small.write_text(json.dumps(doc))
        assert main(["predict", "--model", str(best), "--input", str(small), "--output", str(tmp_path / "p")]) == 0
        preds = json.loads((tmp_path / "p").read_text())
        assert set(preds) == {"a1"} and preds["a1"] in doc["data"][0]["paragraphs"][0]["context"]


def test_cli_multiple_choice_tiny(tmp_path, tiny_dir) -> None:
    train, dev = mc_file(tmp_path / "train.jsonl", 16), mc_file(tmp_path / "dev.jsonl", 8)
    summary = finetune(tiny_dir, tmp_path / "run", "--task", "multiple-choice", "--train", str(train),
                       "--dev", str(dev), "--max-length", "24")
    assert main(["predict", "--model", str(tmp_path / "run" / "best"), "--input", str(dev),
                 "--output", str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    choices = [f"the sky is {x}" for x in ("red", "green", "blue", "black")]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(8)]
    assert all(r["choice"] == choices[r["label"]] for r in rows)
    # best/'s predictions on the whole dev file score what training recorded for it
    correct = sum(r["label"] == i % 4 for i, r in enumerate(rows))
    assert summary["dev_examples"] == 8 and summary["best_metrics"]["accuracy"] == pytest.approx(correct / 8)


# Short MiniLM fine-tunings on real subsets run in CI (under a minute each on a quiet machine); the `slow` versions
# train longer and hold the metric to a higher bar. Chance: SST-2 ~0.5 accuracy, CoNLL entity F1 ~0, SQuAD F1 6-9
# (random spans), multiple choice 0.25.
SHORT_AND_SLOW = {
    "sst2": [pytest.param(1600, 0.75, id="short"), pytest.param(6000, 0.80, id="long", marks=pytest.mark.slow)],
    "conll": [pytest.param(1500, 0.45, id="short"), pytest.param(6000, 0.75, id="long", marks=pytest.mark.slow)],
    # SQuAD leaves chance only after ~100 steps (a random span of up to 10 context words scores F1 7.5 on these
    # questions), minutes on 2 cores: its MiniLM run is slow only; CI covers QA with the tiny-model round trip above
    # and the decoding tests in test_qa.py.
    "squad": [pytest.param(1600, 25.0, id="long", marks=pytest.mark.slow)],
}


@pytest.mark.parametrize("examples, bar", SHORT_AND_SLOW["sst2"])
def test_sst2_minilm_above_chance(tmp_path, data_dir, minilm_dir, examples: int, bar: float) -> None:
    s = finetune(minilm_dir, tmp_path / "run", "--task", "classification", "--train",
                 str(data_dir / "sst2/train.tsv"), "--dev", str(data_dir / "sst2/dev.tsv"), "--max-train-examples",
                 str(examples), "--max-eval-examples", "400", "--max-length", "64", "--lr", "1e-4",
                 "--batch-size", "32")
    assert s["best_metrics"]["accuracy"] > bar


@pytest.mark.parametrize("examples, bar", SHORT_AND_SLOW["conll"])
def test_conll_minilm_above_chance(tmp_path, data_dir, minilm_dir, examples: int, bar: float) -> None:
    s = finetune(minilm_dir, tmp_path / "run", "--task", "ner", "--train", str(data_dir / "conll2003/train.txt"),
                 "--dev", str(data_dir / "conll2003/valid.txt"), "--max-train-examples", str(examples),
                 "--max-eval-examples", "400", "--max-length", "64", "--lr", "2e-4", "--batch-size", "16")
    assert s["best_metrics"]["f1"] > bar


@pytest.mark.parametrize("examples, bar", SHORT_AND_SLOW["squad"])
def test_squad_minilm_above_chance(tmp_path, data_dir, minilm_dir, examples: int, bar: float) -> None:
    path = data_dir / "squad_v1.1/dev-v1.1.json"
    s = finetune(minilm_dir, tmp_path / "run", "--task", "qa", "--train", f"{path}#:38", "--dev", f"{path}#38:",
                 "--max-train-examples", str(examples), "--max-eval-examples", "200", "--max-length", "128",
                 "--doc-stride", "32", "--lr", "2e-4", "--batch-size", "16")
    assert s["best_metrics"]["f1"] > bar


def test_multiple_choice_minilm_above_chance(tmp_path, minilm_dir) -> None:
    train, dev = mc_file(tmp_path / "train.jsonl", 160), mc_file(tmp_path / "dev.jsonl", 40)
    s = finetune(minilm_dir, tmp_path / "run", "--task", "multiple-choice", "--train", str(train), "--dev", str(dev),
                 "--max-length", "24", "--lr", "1e-4", "--epochs", "2")
    assert s["best_metrics"]["accuracy"] > 0.5  # chance is 0.25


def test_without_a_dev_file_the_last_steps_model_is_the_result(tmp_path, data_dir, tiny_dir, capsys) -> None:
    """No --dev: no evaluation, no best/; final/ holds the last step's model, which evaluate and predict read."""
    out = tmp_path / "run"
    summary = finetune(tiny_dir, out, "--task", "classification", "--train", str(data_dir / "mrpc/train.tsv"),
                       "--max-train-examples", "24", "--max-length", "32")
    assert f"model: {out / 'final'}" in capsys.readouterr().out
    assert summary["dev"] is None and summary["best_dir"] is None and summary["best_metrics"] is None
    assert summary["final_dir"] == str(out / "final") and not (out / "best").exists()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r["split"] == "train" for r in records)
    assert main(["evaluate", "--model", str(out / "final"), "--input", str(data_dir / "mrpc/dev.tsv"),
                 "--max-examples", "8", "--output", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["examples"] == 8
    code = main(["finetune", "--model", str(tiny_dir), "--output", str(tmp_path / "stop"), "--task", "classification",
                 "--train", str(data_dir / "mrpc/train.tsv"), "--early-stopping-patience", "2"])
    assert code != 0 and "early_stopping_patience watches the dev score: give a dev file" in capsys.readouterr().err


def test_same_seed_same_run(tmp_path, data_dir, tiny_dir) -> None:
    """The new head's initial weights come from --seed: two runs with one seed end with identical weights."""
    import torch

    runs = []
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        finetune(tiny_dir, tmp_path / name, "--task", "classification", "--train", str(data_dir / "sst2/train.tsv"),
                 "--dev", str(data_dir / "sst2/dev.tsv"), "--max-train-examples", "24", "--max-eval-examples", "12",
                 "--max-length", "32", "--seed", seed)
        runs.append(load_model(tmp_path / name / "final").state_dict())
    a, b, c = runs
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])


def test_a_stopped_run_reports_no_result_and_resumes_to_the_same_one(tmp_path, data_dir, tiny_dir, monkeypatch,
                                                                     capsys) -> None:
    """SIGTERM mid-run: exit 128+15 with a message, a checkpoint but no results.json (a partial run's best must
    not pass for the run's result); --resume then finishes with the uninterrupted run's exact metrics."""
    import os
    import signal

    from bertkit.training.logging import MetricsLogger

    args = ["--task", "classification", "--train", str(data_dir / "sst2" / "train.tsv"), "--dev",
            str(data_dir / "sst2" / "dev.tsv"), "--max-train-examples", "64", "--max-eval-examples", "16",
            "--max-length", "32", "--no-progress", "--epochs", "2", "--batch-size", "8", "--model", str(tiny_dir)]
    straight = finetune(tiny_dir, tmp_path / "straight", *args[:-2])

    real_log = MetricsLogger.log

    def log_then_stop(self, record):  # noqa: ANN001, ANN202
        real_log(self, record)
        if record["split"] == "train" and record["step"] >= 10:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler: checkpoint, then stop

    out = tmp_path / "stopped"
    monkeypatch.setattr(MetricsLogger, "log", log_then_stop)
    assert main(["finetune", "--output", str(out), *args]) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert not (out / "results.json").exists() and list((out / "checkpoints").glob("step-*"))
    monkeypatch.setattr(MetricsLogger, "log", real_log)
    assert main(["finetune", "--output", str(out), "--resume", *args]) == 0
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["best_metrics"] == straight["best_metrics"]


def _resolve(*argv: str):  # noqa: ANN202
    import argparse

    from bertkit.cli import finetune as cli_finetune

    parser = argparse.ArgumentParser()
    cli_finetune.register(parser.add_subparsers())
    return cli_finetune.resolve_finetune_config(parser.parse_args(["finetune", *argv]))


def test_finetune_config_defaults_round_trip_and_task_options(tmp_path: Path) -> None:
    from bertkit.dataclass_io import dump_config, read_config_file
    from bertkit.errors import ConfigError
    from bertkit.jobs.finetune import FinetuneConfig

    base = ["--model", "m", "--train", "data.json#:38", "--dev", "data.json#38:", "--output", "out"]
    ner = _resolve("--task", "ner", *base)
    assert (ner.training.lr, ner.training.epochs, ner.training.batch_size, ner.training.warmup) == (5e-5, 3.0, 32, 0.1)
    assert ner.train == "data.json#:38" and ner.training.output_dir == "out"  # strings are never YAML-parsed
    assert ner.training.metric_for_best == "f1"
    cls = _resolve("--task", "classification", *base, "--lr", "1e-4", "--text-column", "0", "--regression",
                   "--max-length", "64", "--no-progress")
    assert cls.training.lr == 1e-4 and cls.training.progress_bar is False
    assert cls.options == {"text_column": "0", "regression": True, "max_length": 64}
    # the config file is the same run: dump, read back, resolve again
    path = tmp_path / "run.yaml"
    path.write_text(dump_config(cls))
    assert FinetuneConfig.from_dict(read_config_file(path)) == cls
    assert _resolve("--config", str(path)) == cls
    assert _resolve("--config", str(path), "--seed", "7").training.seed == 7
    with pytest.raises(ConfigError, match="--doc-stride is an option of qa, not of --task classification"):
        _resolve("--task", "classification", *base, "--doc-stride", "16")
    with pytest.raises(ConfigError, match="unknown task 'nerr'"):
        _resolve("--task", "nerr", *base)
    assert _resolve("--task", "ner", "--model", "m", "--train", "t", "--output", "o").dev is None  # final/ is the model
    with pytest.raises(ConfigError, match=r"FinetuneConfig.dev is required \(a non-empty string\), found ''"):
        _resolve("--task", "ner", "--model", "m", "--train", "t", "--dev", "", "--output", "o")
    with pytest.raises(ConfigError, match=r"unknown field\(s\) doc_strid"):
        FinetuneConfig.from_dict({"task": "qa", "model": "m", "train": "t", "dev": "d", "options": {"doc_strid": 1}})
