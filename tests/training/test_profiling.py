"""TrainingConfig.profile_steps: a window of a real run's steps profiled (one span around each step), its parts
measured from PyTorch's own spans (the loader's, the optimizer's), nothing else changed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from trainer_toy import ToyData, evaluate_fn, make_model

from bertkit.errors import ConfigError
from bertkit.training import Trainer, TrainingConfig
from bertkit.training.profiling import PARTS, PROFILE_TEXT, PROFILE_TRACE


def _config(out: Path, **kw) -> TrainingConfig:
    base = dict(output_dir=str(out), lr=0.05, batch_size=4, warmup=2, progress_bar=False, log_every=2,
                metric_for_best="mse")
    base.update(kw)
    return TrainingConfig(**base)


def _part_rows(text: str) -> dict[str, tuple[float, float]]:
    """{part: (ms per step, share)} from profile.txt's parts table."""
    rows = {}
    for part in PARTS:
        m = re.search(rf"^{part}\s+([\d.]+)\s+([\d.]+)%$", text, re.M)
        if m:
            rows[part] = (float(m.group(1)), float(m.group(2)) / 100)
    return rows


def test_a_profiled_window_changes_no_weight_and_covers_its_steps(tmp_path: Path) -> None:
    data = ToyData(40)
    kw = dict(max_steps=8, grad_accum_steps=2, eval_every=4)
    plain = make_model(dropout=0.3)
    Trainer(plain, _config(tmp_path / "a", **kw), data, evaluate=evaluate_fn(data)).train()
    profiled = make_model(dropout=0.3)
    Trainer(profiled, _config(tmp_path / "b", profile_from=3, profile_steps=3, **kw), data,
            evaluate=evaluate_fn(data)).train()
    for (name, a), b in zip(plain.state_dict().items(), profiled.state_dict().values()):
        assert torch.equal(a, b), name  # the profiler draws no random number and reorders nothing

    text = (tmp_path / "b" / PROFILE_TEXT).read_text()
    assert text.startswith("# training steps 4-6, profiled")
    assert set(_part_rows(text)) == set(PARTS)
    assert re.search(r"^aten::addmm\s+[\d.]+\s+[\d.]+%\s+4\.0$", text, re.M)  # 2 linear layers x 2 micro-batches
    trace = json.loads((tmp_path / "b" / PROFILE_TRACE).read_text())
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count("step.step") == 3  # one span around each step, nothing marked inside it
    assert not [n for n in names if n and n.startswith("step.") and n != "step.step"]
    assert sum(1 for n in names if n and n.startswith("enumerate(DataLoader)")) >= 6  # 3 steps x 2 micro-batches
    assert names.count("Optimizer.step#AdamW.step") == 3
    assert not (tmp_path / "a" / PROFILE_TEXT).exists()
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_the_parts_measure_where_the_time_goes(tmp_path: Path) -> None:
    """A loader that sleeps 50 ms per item (4 per step) shows as the step's 'load' part, >= 200 ms of it: long
    enough to stay the larger part when a busy machine slows the tiny model's compute down."""
    data = ToyData(24, delay=0.05)
    Trainer(make_model(), _config(tmp_path, max_steps=5, profile_from=1, profile_steps=3), data,
            evaluate=evaluate_fn(data)).train()
    rows = _part_rows((tmp_path / PROFILE_TEXT).read_text())
    load_ms, load_share = rows["load"]
    assert load_ms >= 200 and load_share > 0.5
    assert sum(share for _, share in rows.values()) <= 1.0 + 1e-3  # the parts do not overlap


def test_a_window_past_the_end_covers_the_steps_there_are(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = ToyData(16)
    Trainer(make_model(), _config(tmp_path, max_steps=4, profile_from=2, profile_steps=10), data,
            evaluate=evaluate_fn(data)).train()
    err = capsys.readouterr().err
    assert "profile_from + profile_steps = 12 but the run has 4 steps" in err
    assert f"profile of steps 3-4 written to {tmp_path / PROFILE_TEXT}" in err
    assert (tmp_path / PROFILE_TEXT).read_text().startswith(
        "# training steps 3-4, profiled with torch.profiler (the run ended after 2 of them)")


def test_a_resume_may_change_the_profile_window(tmp_path: Path) -> None:
    data = ToyData(16)
    Trainer(make_model(), _config(tmp_path, max_steps=3, save_every=1), data, evaluate=evaluate_fn(data)).train()
    result = Trainer(make_model(), _config(tmp_path, max_steps=6, profile_from=4, profile_steps=2), data,
                     evaluate=evaluate_fn(data)).train(resume=True)
    assert result.global_step == 6
    assert (tmp_path / PROFILE_TEXT).read_text().startswith("# training steps 5-6, profiled")


@pytest.mark.parametrize("field", ["profile_steps", "profile_from"])
def test_a_negative_window_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(ConfigError, match=f"TrainingConfig.{field}: expected an integer >= 0 .*, found -1"):
        TrainingConfig(**{field: -1})
