"""The prepared accelerator call's CPU dry run (benchmarks/pretrain_stronger.py --dry-run): the same code path as the
device run, on the bundled novels with a tiny shape. A stop (what the budget's deadline sends) leaves a usable model,
a second run resumes from the run's own checkpoint, and the parts that would come back unpack into a folder that
loads by path, and by name once registered as a shipped model."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import bertkit
from bertkit import pretrained

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "pretrain_stronger.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import pretrain_stronger  # noqa: E402

# what a shipped model's folder holds besides the PRETRAINING.md written by hand (tests/pretrained/)
SHIPPED_FILES = {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "pretrain_config.yaml",
                 "metrics.jsonl", "curves.png"}


def run_script(*args: str | Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_the_config_fits_what_a_call_returns_and_a_package_ships() -> None:
    """The shape's float32 weights fit the 60 MB a shipped model may take, so the tar fits the call's 64 MiB."""
    from bertkit.model import BertConfig

    config = yaml.safe_load(pretrain_stronger.CONFIG.read_text())
    shape = BertConfig.preset(config["model"], vocab_size=8192, **config["model_overrides"])
    encoder = shape.num_hidden_layers * (4 * shape.hidden_size**2 + 2 * shape.hidden_size * shape.intermediate_size)
    embeddings = (shape.vocab_size + shape.max_position_embeddings) * shape.hidden_size
    assert 4 * (encoder + embeddings) < 60e6
    assert config["training"]["compile"] != "none" and config["training"]["drop_last"]  # one graph, no recompiles


def test_dry_run_stops_resumes_and_packs_a_loadable_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged, work = tmp_path / "staged", tmp_path / "work"
    assert pretrain_stronger.main(["stage", "--dry-run", "--to", str(staged)]) == 0
    common = ["run", "--dry-run", "--data", staged, "--work", work]

    # Planned far longer than it gets: stopped once its first checkpoint is written, as the deadline stops it
    first = run_script(*common, "--out", tmp_path / "out1", "--steps", 2000)
    deadline = time.monotonic() + 300
    while not list((work / "run" / "checkpoints").glob("step-*/meta.json")):
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint in 300 s"
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    output = first.communicate(timeout=300)[0]
    assert first.returncode == 0, output
    stopped = json.loads((tmp_path / "out1" / "summary.json").read_text())
    assert stopped["outcome"] == "stopped" and stopped["eval"]["step"] == stopped["steps"] < 2000, output
    assert "held-out MLM accuracy" in output and "tokens/s" in output
    assert (work / "run" / "final" / "model.safetensors").is_file()  # final/ from the stop's checkpoint

    # The same command again, four steps further: it resumes from that checkpoint instead of starting over
    k = stopped["steps"]
    prepared = (work / "data" / "train" / "index.json").stat().st_mtime_ns
    second = run_script(*common, "--out", tmp_path / "out2", "--steps", k + 4)
    output = second.communicate(timeout=300)[0]
    assert second.returncode == 0, output
    done = json.loads((tmp_path / "out2" / "summary.json").read_text())
    assert (done["outcome"], done["resumed_from"], done["steps"]) == ("complete", k, k + 4), output
    assert (work / "data" / "train" / "index.json").stat().st_mtime_ns == prepared  # prepared once
    assert not pretrain_stronger.check_return(tmp_path / "out2")

    # What would come back unpacks into a model folder, complete as a shipped one, that loads by path and by name
    folder = pretrain_stronger.unpack(tmp_path / "out2", tmp_path / "model")
    assert SHIPPED_FILES <= {p.name for p in folder.iterdir()}
    bert = bertkit.load(folder)
    assert bert.model.config.num_hidden_layers == 2 and bert.model.config.alibi
    assert [r["step"] for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())][-1] == k + 4
    monkeypatch.setitem(pretrained.SHIPPED, pretrain_stronger.NAME, pretrain_stronger.NAME)
    monkeypatch.setattr(pretrained, "shipped_dir", lambda name: folder)
    by_name = bertkit.load(pretrain_stronger.NAME)
    assert by_name.model.config.to_dict() == bert.model.config.to_dict()


def test_a_failed_compiled_run_is_retried_eagerly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    """A compiled run that fails (not stopped) is run again once with the eager default step, which the CLI accepts
    with this config; without a checkpoint it starts afresh."""
    from bertkit.cli import main

    calls, codes = [], iter([1, 0])
    monkeypatch.setattr(pretrain_stronger, "run_until", lambda cmd, *a, **k: calls.append(cmd) or next(codes))
    monkeypatch.setattr(pretrain_stronger, "latest_step", lambda work: None)
    (tmp_path / "run.log").write_text("a compilation error\n")
    args = argparse.Namespace(dry_run=False, steps=None)
    assert pretrain_stronger.train(args, tmp_path, tmp_path / "run.log", time.monotonic() + 3600) == "complete"
    assert "a compilation error" in capsys.readouterr().out
    assert len(calls) == 2 and calls[1][-6:] == list(pretrain_stronger.EAGER) and "--resume" not in calls[1]
    capsys.readouterr()
    assert main([*calls[1][3:], "--print-config"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["training"]["compile"] == "none" and resolved["execution"]["sparse_mlm"]


def test_unpack_refuses_a_damaged_part(tmp_path: Path) -> None:
    (tmp_path / "a.tar.00").write_bytes(b"not the tar")
    (tmp_path / "summary.json").write_text(json.dumps({"name": "m", "parts": ["a.tar.00"], "tar_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="sha256 differs"):
        pretrain_stronger.unpack(tmp_path, tmp_path / "model")


@pytest.mark.slow
def test_the_compiled_step_is_one_graph_through_evaluations_and_checkpoints(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The config's fixed shapes (every batch padded to 128, drop_last, the plain path) give torch.compile one graph for
    the whole run: no recompilation at an evaluation, a checkpoint or an epoch's end, each of which would cost a new
    CUDA-graph capture on the device. Traced by dynamo with its eager backend (inductor takes minutes on a CPU)."""
    import torch
    from torch._dynamo.utils import counters

    from bertkit.jobs.pretrain import PretrainConfig, run

    staged, work = tmp_path / "staged", tmp_path / "work"
    assert pretrain_stronger.main(["stage", "--dry-run", "--to", str(staged)]) == 0
    pretrain_stronger.prepare(pretrain_stronger.decompress(staged, work), work, 1, work / "prepare.log")
    config = yaml.safe_load(pretrain_stronger.CONFIG.read_text())
    config["model_overrides"].update(pretrain_stronger.DRY_SHAPE)
    for key, value in pretrain_stronger.DRY_OPTIONS.items():
        *group, name = key.split(".")
        (config[group[0]] if group else config)[name] = value
    config.update(train_data=str(work / "data" / "train"), eval_data=str(work / "data" / "heldout"))
    config["training"].update(max_steps=24, compile="default", output_dir=str(work / "run"))  # 3 epochs, 5 evaluations
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: compile_(model, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    assert run(PretrainConfig.from_dict(config)).global_step == 24
    assert (counters["frames"]["total"], counters["stats"]["unique_graphs"]) == (1, 1)
