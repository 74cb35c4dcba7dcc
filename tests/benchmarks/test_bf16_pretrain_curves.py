"""bf16_pretrain_curves: the commands it runs and the figures it draws from two runs' records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bf16_pretrain_curves  # noqa: E402

from bertkit.cli import build_parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_each_run_is_a_pretrain_command_bertkit_accepts(tmp_path: Path) -> None:
    command = bf16_pretrain_curves.pretrain_command(ROOT / "configs" / "pretrain-mini-cpu.yaml", tmp_path / "pt",
                                                    tmp_path / "heldout", tmp_path / "bf16", "bf16", 200, 8)
    assert command[1:4] == ["-m", "bertkit", "pretrain"]
    args = build_parser().parse_args(command[3:])  # argparse exits on an option bertkit does not know
    assert args.command == "pretrain"
    options = dict(zip(command[4::2], command[5::2]))
    assert options["--training.precision"] == "bf16" and options["--training.max_steps"] == "200"
    assert options["--training.eval_every"] == "100" and "--resume" in command
    weights = bf16_pretrain_curves.pretrain_command(ROOT / "configs" / "pretrain-mini-cpu.yaml", tmp_path / "pt",
                                                    tmp_path / "heldout", tmp_path / "w", "bf16-weights", 200, 8)
    options = dict(zip(weights[4::2], weights[5::2]))
    assert options["--training.precision"] == "bf16" and options["--training.bf16_weights"] == "true"
    args = build_parser().parse_args(weights[3:])
    assert args.command == "pretrain"


def test_compare_gives_the_speed_ratio_loss_gaps_and_evaluations() -> None:
    def records(losses: list[float], speeds: list[float], accuracy: float) -> list[dict]:
        train = [{"step": 10 * (i + 1), "split": "train", "loss": x, "tokens_per_s": s}
                 for i, (x, s) in enumerate(zip(losses, speeds))]
        return train + [{"step": 30, "split": "eval", "epoch": 0.1, "mlm_accuracy": accuracy}]

    figures = bf16_pretrain_curves.compare({"fp32": records([4.0, 3.0, 2.0], [100, 300, 200], 0.1),
                                            "bf16": records([4.04, 3.0, 2.01], [50, 40, 60], 0.12)})
    assert figures["tokens_per_s"] == {"fp32": 200, "bf16": 50}
    assert figures["bf16_over_fp32"] == pytest.approx(0.25)
    assert figures["steps_compared"] == 3
    assert figures["loss_gap_max"] == pytest.approx(0.01)
    assert figures["loss_gap_mean"] == pytest.approx((0.01 + 0 + 0.005) / 3)
    assert figures["evaluations"] == {"fp32": {30: {"mlm_accuracy": 0.1}}, "bf16": {30: {"mlm_accuracy": 0.12}}}
    assert "bf16-weights" not in figures
    runs = {"fp32": records([4.0, 3.0, 2.0], [100, 300, 200], 0.1),
            "bf16": records([4.04, 3.0, 2.01], [50, 40, 60], 0.12),
            "bf16-weights": records([4.0, 3.06, 2.0], [400, 300, 500], 0.11)}
    weights = bf16_pretrain_curves.compare(runs)["bf16-weights"]
    assert weights["over_fp32"] == pytest.approx(2.0) and weights["steps_compared"] == 3
    assert weights["loss_gap_max"] == pytest.approx(0.02) and weights["loss_gap_mean"] == pytest.approx(0.02 / 3)


def test_runs_with_no_common_logged_step_are_refused() -> None:
    fp32 = [{"step": 10, "split": "train", "loss": 1.0, "tokens_per_s": 1.0}]
    bf16 = [{"step": 20, "split": "train", "loss": 1.0, "tokens_per_s": 1.0}]
    with pytest.raises(SystemExit, match="same steps"):
        bf16_pretrain_curves.compare({"fp32": fp32, "bf16": bf16})
