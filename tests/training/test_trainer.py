"""The trainer on a toy model: exact resume, checkpoints, signals, metrics and plots."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from trainer_toy import ToyData, ToyModel, evaluate_fn, make_model, signal_at_first_eval

from bertkit.errors import CheckpointError, ConfigError, TrainingError
from bertkit.training import Trainer, TrainingConfig
from bertkit.training.checkpoint import list_checkpoints

HERE = Path(__file__).parent


def _config(out: Path, **kw) -> TrainingConfig:
    base = dict(output_dir=str(out), lr=0.05, batch_size=4, warmup=3, progress_bar=False, log_every=1,
                metric_for_best="mse", keep_last=2)
    base.update(kw)
    return TrainingConfig(**base)


@pytest.mark.parametrize("precision", ["fp32", "bf16 weights"])
def test_interrupted_and_resumed_run_ends_bitwise_equal(tmp_path: Path, precision: str) -> None:
    """N steps straight vs k steps, SIGTERM, resume to N: same weights, with dropout on, accumulation, 2 epochs+;
    with bf16 weights too (the working copy is made again from the resumed float32 weights)."""
    data = ToyData(36)  # 9 batches of 4 per epoch: epochs end mid-accumulation
    kw = dict(max_steps=11, grad_accum_steps=2, eval_every=4, save_every=3,
              **(dict(precision="bf16", bf16_weights=True) if precision == "bf16 weights" else {}))
    straight = make_model(dropout=0.3)
    Trainer(straight, _config(tmp_path / "a", **kw), data, evaluate=evaluate_fn(data)).train()

    model = make_model(dropout=0.3)
    first = Trainer(model, _config(tmp_path / "b", **kw), data, evaluate=signal_at_first_eval(evaluate_fn(data))).train()
    assert first.interrupted and first.signal == signal.SIGTERM and first.global_step == 4
    assert [s for s, _ in list_checkpoints(tmp_path / "b" / "checkpoints")] == [3, 4]
    torch.manual_seed(999)  # resuming must not depend on the state the process happens to be in
    resumed = make_model(dropout=0.3)
    torch.manual_seed(999)
    result = Trainer(resumed, _config(tmp_path / "b", **kw), data, evaluate=evaluate_fn(data)).train(resume=True)
    assert result.global_step == 11 and not result.interrupted
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    steps = [r["step"] for r in result.history if r["split"] == "train"]
    assert steps == list(range(1, 12))  # the replayed records were not duplicated


def test_metrics_plot_best_and_final(tmp_path: Path) -> None:
    data = ToyData(32)
    result = Trainer(make_model(), _config(tmp_path, epochs=2, eval_every=None), data,
                     evaluate=evaluate_fn(data)).train()
    assert result.global_step == 16
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [8, 16]  # every epoch
    assert {"loss", "lr", "tokens_per_s"} <= set(records[0])
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.best_metrics["mse"] == min(r["mse"] for r in evals)
    assert (tmp_path / "best" / "model.pt").is_file() and (tmp_path / "final" / "model.pt").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_eval_at_start_records_the_starting_score_and_changes_nothing_else(tmp_path: Path) -> None:
    data = ToyData(32)
    kw = dict(max_steps=6, eval_every=3, save_every=3)
    plain = make_model(dropout=0.3)
    Trainer(plain, _config(tmp_path / "a", **kw), data, evaluate=evaluate_fn(data)).train()
    start = make_model(dropout=0.3).eval()
    with torch.no_grad():
        expected = evaluate_fn(data)(start)["mse"]
    model = make_model(dropout=0.3)
    result = Trainer(model, _config(tmp_path / "b", eval_at_start=True, **kw), data,
                     evaluate=evaluate_fn(data)).train()
    evals = [r for r in result.history if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 3, 6]
    assert evals[0]["mse"] == expected and evals[1]["mse"] != expected
    for (name, a), b in zip(plain.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name  # the extra evaluation left the training's randomness alone
    # a resumed run does not score its start again
    torch.manual_seed(999)
    again = Trainer(make_model(dropout=0.3), _config(tmp_path / "b", eval_at_start=True, max_steps=9, eval_every=3,
                                                     save_every=3, resume_mismatch="warn"), data,
                    evaluate=evaluate_fn(data)).train(resume=True)
    assert [r["step"] for r in again.history if r["split"] == "eval"] == [0, 3, 6, 9]


def test_keep_last_prunes_old_checkpoints(tmp_path: Path) -> None:
    Trainer(make_model(), _config(tmp_path, max_steps=10, save_every=2, keep_last=3, metric_for_best=None),
            ToyData(32)).train()
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [6, 8, 10]


def test_no_checkpoint_at_end_writes_only_the_model_and_trains_the_same(tmp_path: Path) -> None:
    """checkpoint_at_end=False (transformers' save_strategy='no'): the run's own checkpoints as save_every says,
    none for the last step; final/ holds the same weights as a run that writes one."""
    kw = dict(max_steps=5, save_every=2, metric_for_best=None)
    with_end, without = make_model(dropout=0.3), make_model(dropout=0.3)
    Trainer(with_end, _config(tmp_path / "a", **kw), ToyData(32)).train()
    result = Trainer(without, _config(tmp_path / "b", checkpoint_at_end=False, **kw), ToyData(32)).train()
    assert [s for s, _ in list_checkpoints(tmp_path / "a" / "checkpoints")] == [4, 5]
    assert [s for s, _ in list_checkpoints(tmp_path / "b" / "checkpoints")] == [2, 4]
    assert result.final_dir == tmp_path / "b" / "final" and (result.final_dir / "model.pt").is_file()
    for (name, a), b in zip(with_end.state_dict().items(), without.state_dict().values()):
        assert torch.equal(a, b), name
    # the finished run's final/ is not overwritten by a second run into the same folder, resumed or not
    shutil.rmtree(tmp_path / "b" / "checkpoints")
    for resume in (False, True):
        with pytest.raises(ConfigError, match=r"final holds a finished run's model and there is no checkpoint"):
            Trainer(make_model(), _config(tmp_path / "b", checkpoint_at_end=False, **kw), ToyData(32)).train(
                resume=resume)
    assert (result.final_dir / "model.pt").is_file()


def test_corrupted_or_mismatched_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path, max_steps=4, metric_for_best=None)
    Trainer(make_model(), cfg, ToyData(32)).train()
    state = tmp_path / "checkpoints" / "step-4" / "state.pt"
    with pytest.raises(CheckpointError, match="batch_sizes"):
        Trainer(make_model(), _config(tmp_path, max_steps=8, batch_size=8, metric_for_best=None),
                ToyData(32)).train(resume=True)

    class Wider(ToyModel):
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(16, 2)

    with pytest.raises(CheckpointError, match=r"state.pt.*out.weight"):
        Trainer(Wider(), _config(tmp_path, max_steps=8, metric_for_best=None), ToyData(32)).train(resume=True)
    raw = bytearray(state.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    state.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"step-4/state.pt: corrupted"):
        Trainer(make_model(), _config(tmp_path, max_steps=8, metric_for_best=None), ToyData(32)).train(resume=True)
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        Trainer(make_model(), cfg, ToyData(32)).train()


def test_sigterm_writes_a_checkpoint_and_exits_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(HERE / "trainer_toy.py"), "--out", str(out), "--steps", "1000",
                             "--delay", "0.02"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out / "metrics.jsonl").is_file() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    steps = [s for s, _ in list_checkpoints(out / "checkpoints")]
    assert len(steps) == 1 and 1 <= steps[0] < 1000


def test_warmup_longer_than_the_run_is_reported(tmp_path, capsys) -> None:
    from trainer_toy import ToyData, ToyModel

    from bertkit.training import Trainer, TrainingConfig

    cfg = TrainingConfig(output_dir=str(tmp_path / "run"), max_steps=4, warmup=10, batch_size=8, progress_bar=False)
    Trainer(ToyModel(), cfg, ToyData()).train()
    assert "warmup is 10 steps but the run has 4" in capsys.readouterr().err


@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_without_bf16_units_is_reported(tmp_path, capsys, monkeypatch, native: bool) -> None:
    """bf16 autocast on a CPU that emulates bf16 is many times slower than fp32: the run says so at its start."""
    import bertkit.training.precision as precision_module

    monkeypatch.setattr(precision_module, "cpu_has_native_bf16", lambda: native)
    cfg = TrainingConfig(output_dir=str(tmp_path / "run"), max_steps=2, warmup=0, batch_size=8, progress_bar=False,
                         precision="bf16")
    Trainer(ToyModel(), cfg, ToyData()).train()
    err = capsys.readouterr().err
    assert ("no bf16 matrix units" in err) is not native, err


def test_activation_checkpointing_needs_a_bert_encoder(tmp_path: Path) -> None:
    from bertkit.model import BertConfig, BertForMaskedLM

    with pytest.raises(ConfigError, match="activation_checkpointing"):
        Trainer(make_model(), _config(tmp_path / "toy", activation_checkpointing=True), ToyData(8))
    bert = BertForMaskedLM(BertConfig.preset("tiny", vocab_size=50))
    Trainer(bert, _config(tmp_path / "bert", activation_checkpointing=True), ToyData(8))
    assert bert.bert.encoder.gradient_checkpointing


def test_fp16_overflow_steps_are_skipped_not_fatal(tmp_path: Path, monkeypatch) -> None:
    """With fp16 loss scaling an inf/NaN gradient is the scaler's overflow signal: the step is skipped and the scale
    lowered, and the run goes on; only a non-finite unscaled loss stops it (fp16 autocast runs on CPU too)."""
    import bertkit.training.precision as precision_module

    monkeypatch.setattr(precision_module, "resolve_precision", lambda precision, device: "fp16")
    real, scalers = torch.amp.GradScaler, []

    def huge_scale(*args, **kw):  # gradients x 2^24 overflow fp16 until the scaler has halved it a few times
        scalers.append(real(*args, init_scale=2.0**24, **kw))
        return scalers[-1]

    monkeypatch.setattr(torch.amp, "GradScaler", huge_scale)
    model = make_model(0.0)
    initial = model.inp.weight.detach().clone()
    result = Trainer(model, _config(tmp_path / "a", max_steps=16, metric_for_best=None), ToyData(32)).train()
    assert result.global_step == 16 and scalers[0].get_scale() < 2.0**24  # overflowing steps were skipped
    assert not torch.equal(initial, model.inp.weight) and all(torch.isfinite(p).all() for p in model.parameters())
    data = ToyData(32)
    data.y[:] = float("nan")
    with pytest.raises(TrainingError, match=r"step 1 \(phase 0 'train', epoch 0\.125\): the loss is nan\. "):
        Trainer(make_model(0.0), _config(tmp_path / "b", max_steps=4, metric_for_best=None), data).train()


def test_compiled_training_matches_eager_and_saves_the_plain_model(tmp_path: Path, monkeypatch) -> None:
    """TrainingConfig.compile: the steps run through torch.compile (here with the aot_eager backend, which traces
    the forward and backward like inductor but runs the same kernels, so a CPU test stays quick) and end at the eager
    run's weights; checkpoints and final/ hold the plain model's names, so a compiled run resumes uncompiled."""
    modes = []
    real_compile = torch.compile

    def traced(model, mode=None):
        modes.append(mode)
        return real_compile(model, backend="aot_eager")

    data = ToyData(32)
    eager = make_model(dropout=0.0)
    Trainer(eager, _config(tmp_path / "eager", max_steps=6), data).train()
    monkeypatch.setattr(torch, "compile", traced)
    compiled = make_model(dropout=0.0)
    Trainer(compiled, _config(tmp_path / "compiled", max_steps=6, compile="reduce-overhead"), data).train()
    assert modes == ["reduce-overhead"]
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    saved = torch.load(tmp_path / "compiled" / "final" / "model.pt", weights_only=True)
    assert list(saved) == list(eager.state_dict())  # no '_orig_mod.' prefix
    monkeypatch.setattr(torch, "compile", real_compile)
    resumed = Trainer(make_model(dropout=0.0), _config(tmp_path / "compiled", max_steps=8), data).train(resume=True)
    assert resumed.global_step == 8


def test_compile_mode_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"TrainingConfig.compile: expected one of none, default, .*found 'fast'"):
        TrainingConfig(compile="fast")
