"""Pure pieces of the trainer: LR schedule values, weight-decay groups, the LAMB update, the config round trip."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bertkit.errors import ConfigError
from bertkit.training import (Lamb, TrainingConfig, build_optimizer, linear_warmup_decay, parameter_groups,
                              resolve_warmup)
from bertkit.training.optim import split_decay_names
from bertkit.training.schedule import build_scheduler, lr_factor


def test_warmup_then_linear_decay_at_hand_computed_steps() -> None:
    # warmup 4 of 10 steps: (s+1)/4 for s < 4, then (10 - s)/6.
    expected = {0: 0.25, 1: 0.5, 3: 1.0, 4: 1.0, 5: 5 / 6, 7: 0.5, 9: 1 / 6, 10: 0.0, 12: 0.0}
    for step, value in expected.items():
        assert linear_warmup_decay(step, 4, 10) == pytest.approx(value)


def test_warmup_as_fraction_and_steps() -> None:
    assert resolve_warmup(0.1, 1000) == 100
    assert resolve_warmup(10_000, 1000) == 10_000
    assert resolve_warmup(0, 50) == 0
    assert linear_warmup_decay(0, 0, 10) == 1.0  # no warm-up: the first update runs at the peak


def test_scheduler_drives_the_optimizer_lr() -> None:
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = build_scheduler(opt, 0.25, 8)  # 2 warm-up steps
    seen = []
    for _ in range(8):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.5, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    assert opt.param_groups[0]["lr"] == 0.0


# Hand-computed LR multipliers of a 10-step run with 2 warm-up steps ((s + 1) / 2), the decay from step 2 to 10.
SCHEDULES = [
    ("linear", {0: 0.5, 1: 1.0, 2: 1.0, 6: 0.5, 9: 1 / 8}),  # (10 - s) / 8
    ("cosine", {0: 0.5, 1: 1.0, 2: 1.0, 4: (1 + math.sqrt(0.5)) / 2, 6: 0.5, 8: (1 - math.sqrt(0.5)) / 2,
                9: (1 + math.cos(7 * math.pi / 8)) / 2}),  # (1 + cos(pi (s - 2) / 8)) / 2
    ("constant", {0: 0.5, 1: 1.0, 2: 1.0, 5: 1.0, 9: 1.0}),
    ("warmup-stable-decay", {0: 0.5, 1: 1.0, 2: 1.0, 6: 1.0, 7: 1.0, 8: 2 / 3, 9: 1 / 3}),  # decay 0.3: (10 - s) / 3
]


@pytest.mark.parametrize("schedule, expected", SCHEDULES, ids=[s for s, _ in SCHEDULES])
def test_each_schedule_at_hand_computed_steps(schedule: str, expected: dict[int, float]) -> None:
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = build_scheduler(opt, 2, 10, schedule=schedule, decay=0.3)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    for step, value in expected.items():
        assert seen[step] == pytest.approx(2.0 * value), step


def test_a_decay_longer_than_the_run_after_warmup_starts_at_the_warmups_end() -> None:
    assert lr_factor("warmup-stable-decay", 6, 2, 10, decay_steps=9) == lr_factor("linear", 6, 2, 10) == 0.5
    assert lr_factor("warmup-stable-decay", 10, 2, 10, decay_steps=3) == lr_factor("cosine", 10, 2, 10) == 0.0


def test_the_trainer_runs_the_configured_schedule(tmp_path) -> None:
    """The LR each logged step used is lr x the cosine multiplier (warm-up 1 of 5 steps)."""
    from trainer_toy import ToyData, make_model

    from bertkit.training import Trainer

    config = TrainingConfig(output_dir=str(tmp_path), lr=0.1, batch_size=4, max_steps=5, warmup=1, log_every=1,
                            schedule="cosine", progress_bar=False, metric_for_best=None)
    result = Trainer(make_model(), config, ToyData(32)).train()
    logged = [r["lr"] for r in result.history if r["split"] == "train"]
    assert logged == pytest.approx([0.1 * lr_factor("cosine", s, 1, 5) for s in range(5)])
    assert logged[2] == pytest.approx(0.1 * (1 + math.cos(math.pi / 4)) / 2)


def test_schedule_and_decay_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"TrainingConfig.schedule: expected one of linear, cosine, constant, "
                                          r"warmup-stable-decay, found 'step'"):
        TrainingConfig(schedule="step")
    with pytest.raises(ConfigError, match=r"TrainingConfig.decay: expected a step count >= 1 or a fraction"):
        TrainingConfig(decay=2.5)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(10, 4)
        self.dense = nn.Linear(4, 4)
        self.LayerNorm = nn.LayerNorm(4)
        self.norm = nn.LayerNorm(4)  # a norm layer not called LayerNorm is still excluded
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.word_embeddings.weight  # tied: listed once


def test_weight_decay_groups_exclude_biases_and_layernorm() -> None:
    decay, no_decay = split_decay_names(_Block())
    assert decay == ["word_embeddings.weight", "dense.weight"]
    assert no_decay == ["dense.bias", "LayerNorm.weight", "LayerNorm.bias", "norm.weight", "norm.bias"]


def test_adamw_uses_the_paper_settings() -> None:
    opt = build_optimizer(_Block(), TrainingConfig())
    assert isinstance(opt, torch.optim.AdamW)
    g_decay, g_none = opt.param_groups
    assert (g_decay["weight_decay"], g_none["weight_decay"]) == (0.01, 0.0)
    assert g_decay["betas"] == (0.9, 0.999) and g_decay["eps"] == 1e-6 and g_decay["lr"] == 1e-4
    assert g_decay["fused"]  # one kernel per step on CPU and CUDA


def test_fused_adamw_steps_equal_the_loop_implementation() -> None:
    torch.manual_seed(0)
    fused, loop = _Block(), _Block()
    loop.load_state_dict(fused.state_dict())
    start = {k: v.clone() for k, v in fused.state_dict().items()}

    def loss(m: _Block, x: torch.Tensor) -> torch.Tensor:
        return m.head(m.norm(m.LayerNorm(m.dense(m.word_embeddings(x))))).square().mean()
    opt_fused = build_optimizer(fused, TrainingConfig(lr=1e-2))
    opt_loop = torch.optim.AdamW(parameter_groups(loop, 0.01), lr=1e-2, betas=(0.9, 0.999), eps=1e-6,
                                 foreach=False, fused=False)
    x = torch.randint(0, 10, (4, 3))
    for _ in range(5):
        for model, opt in ((fused, opt_fused), (loop, opt_loop)):
            loss(model, x).backward()
            opt.step()
            opt.zero_grad()
    for (name, a), b in zip(fused.named_parameters(), loop.parameters()):
        assert (a - b).abs().max() < 1e-6, name
        assert not torch.equal(a, start[name])  # the weights did move


def test_lamb_step_matches_a_hand_computed_update() -> None:
    w = nn.Parameter(torch.tensor([3.0, 4.0]))  # ||w|| = 5
    opt = Lamb([w], lr=0.1, betas=(0.9, 0.999), eps=0.0, weight_decay=0.1)
    w.grad = torch.tensor([0.5, -2.0])
    opt.step()
    # Step 1: m_hat = g, v_hat = g^2, so the Adam direction is sign(g) = (1, -1); plus 0.1 * w = (0.3, 0.4).
    r = torch.tensor([1.3, -0.6])
    ratio = 5.0 / math.sqrt(1.3**2 + 0.6**2)
    assert torch.allclose(w.detach(), torch.tensor([3.0, 4.0]) - 0.1 * ratio * r, atol=1e-6)
    assert isinstance(build_optimizer(_Block(), TrainingConfig(optimizer="lamb")), Lamb)


def test_config_round_trips_through_json_and_yaml(tmp_path) -> None:
    cfg = TrainingConfig(lr=3e-5, max_steps=100, eval_every=None, precision="bf16", warmup=0.1)
    for name in ("c.json", "c.yaml"):
        cfg.save(tmp_path / name)
        assert TrainingConfig.load(tmp_path / name) == cfg
    (tmp_path / "odd.yaml").write_text("lr: 1e-4\nbatch_size: 8\n")  # YAML 1.1 reads 1e-4 as a string
    assert TrainingConfig.load(tmp_path / "odd.yaml").lr == 1e-4


@pytest.mark.parametrize("bad, field", [({"lr": -1.0}, "lr"), ({"batch_size": "x"}, "batch_size"),
                                        ({"precision": "fp8"}, "precision"), ({"learning_rate": 1}, "learning_rate")])
def test_config_errors_name_the_field(bad, field) -> None:
    with pytest.raises(ConfigError, match=field):
        TrainingConfig.from_dict(bad)


def test_example_configs_load_and_cli_overrides_apply() -> None:
    import argparse
    from pathlib import Path

    from bertkit.cli import pretrain as cli_pretrain
    from bertkit.jobs.pretrain import PretrainConfig

    root = Path(__file__).resolve().parents[2] / "configs"
    base = PretrainConfig.load(root / "pretrain-base-gpu.yaml")
    assert [p.max_steps for p in base.phases] == [900_000, 100_000] and base.training.lr == 1e-4
    parser = argparse.ArgumentParser()
    cli_pretrain.register(parser.add_subparsers())
    args = parser.parse_args(["pretrain", "--config", str(root / "pretrain-mini-cpu.yaml"), "--training.lr", "3e-4",
                              "--max-steps", "10", "--model_overrides", "{hidden_dropout_prob: 0.0}", "--resume"])
    cfg = cli_pretrain.resolve_config(args)
    assert (cfg.training.lr, cfg.training.max_steps, cfg.model, args.resume) == (3e-4, 10, "mini", True)
    assert cfg.model_overrides == {"hidden_dropout_prob": 0.0} and cfg.training.eval_every == 500  # from the file, not overridden
    with pytest.raises(ConfigError, match="training.batch_size"):
        cli_pretrain.resolve_config(parser.parse_args(["pretrain", "--batch_size", "many"]))
    # every shipped config, the README ladder's included, loads with its recipe intact
    for path in sorted(root.rglob("*.yaml")):
        PretrainConfig.load(path)
    ladder_c = PretrainConfig.load(root / "ladder" / "c-mini-preln-alibi.yaml")
    assert ladder_c.model_overrides == {"layer_norm_position": "pre", "hidden_dropout_prob": 0.0,
                                        "attention_probs_dropout_prob": 0.0, "alibi": True}
