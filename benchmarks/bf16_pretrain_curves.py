"""bf16 autocast pre-training against float32 on this CPU: one short `bertkit pretrain` run in each precision, the
same config, seed, batches and masks, and their loss curves side by side; with --bf16-weights a third run on bf16
weights with a float32 master copy (`--training.bf16_weights true`, into OUT/bf16-weights), compared alike.

Each run is `bertkit pretrain --config CONFIG --training.precision P --training.max_steps STEPS` (evaluating half-way
and at the end on EVAL_BATCHES held-out batches, logging every 10 steps) into OUT/fp32 and OUT/bf16; a run whose
final/ folder is there is not run again, and a stopped one resumes. Then it prints, and writes with --json: each
run's median training tokens/s and their ratio, the largest and the mean relative gap between the two training
losses at the logged steps, and both runs' held-out evaluations; OUT/curves.png draws both runs' curves in one panel
per metric. The CPU line says whether bf16 runs in hardware here (avx512_bf16 or amx_bf16): elsewhere PyTorch emulates
it, many times slower, with the same roundings to bf16 (only the order of float32 sums inside a matrix product may
differ), so the curves should be those of a CPU with the units, the speed not.

    python benchmarks/bf16_pretrain_curves.py --train-data DATA/pt128 --eval-data DATA/heldout --out runs/bf16 \\
        [--config configs/pretrain-mini-cpu.yaml] [--steps 200] [--eval-batches 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import cpu_line

PRECISIONS = ("fp32", "bf16")
BF16_WEIGHTS = "bf16-weights"  # the third run's name (--bf16-weights)
CURVES = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "tokens_per_s")


def pretrain_command(config: Path, train: Path, heldout: Path, out: Path, precision: str, steps: int,
                     eval_batches: int) -> list[str]:
    """The `bertkit pretrain` command of one run (fp32, bf16 or bf16-weights): the config's recipe, cut to `steps`
    (its schedule too)."""
    options = ["bf16", "--training.bf16_weights", "true"] if precision == BF16_WEIGHTS else [precision]
    return [sys.executable, "-m", "bertkit", "pretrain", "--config", str(config), "--train_data", str(train),
            "--eval_data", str(heldout), "--training.output_dir", str(out), "--training.precision", *options,
            "--training.max_steps", str(steps), "--training.eval_every", str(max(1, steps // 2)),
            "--training.save_every", str(max(1, steps // 4)), "--eval_batches", str(eval_batches),
            "--training.log_every", "10", "--resume"]


def against_fp32(train: dict[str, dict[int, dict[str, Any]]], speed: dict[str, float], run: str) -> dict[str, Any]:
    """One run against fp32: its speed ratio and the relative gaps |loss - loss_fp32| / loss_fp32 at the steps both
    logged (the largest and the mean)."""
    shared = sorted(set(train["fp32"]) & set(train[run]))
    if not shared:
        raise SystemExit(f"the fp32 and {run} runs logged no training loss at the same steps")
    gaps = [abs(train[run][s]["loss"] - train["fp32"][s]["loss"]) / abs(train["fp32"][s]["loss"]) for s in shared]
    return {"over_fp32": speed[run] / speed["fp32"], "steps_compared": len(shared), "loss_gap_max": max(gaps),
            "loss_gap_mean": statistics.fmean(gaps)}


def compare(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The figures of the runs' metrics.jsonl records (fp32, bf16 and maybe bf16-weights): median training
    tokens/s of each, bf16 against fp32 (`against_fp32`: bf16_over_fp32, steps_compared, loss_gap_max,
    loss_gap_mean), the same for bf16-weights under its name, and each run's evaluations as {step: {metric: value}}."""
    train = {p: {r["step"]: r for r in records if r.get("split") == "train" and "loss" in r}
             for p, records in runs.items()}
    speed = {p: statistics.median(r["tokens_per_s"] for r in rows.values() if "tokens_per_s" in r)
             for p, rows in train.items()}
    bf16 = against_fp32(train, speed, "bf16")
    evaluations = {p: {r["step"]: {k: v for k, v in r.items() if k not in ("step", "split", "epoch")}
                       for r in records if r.get("split") == "eval"} for p, records in runs.items()}
    figures = {"tokens_per_s": speed, "bf16_over_fp32": bf16.pop("over_fp32"), **bf16, "evaluations": evaluations}
    if BF16_WEIGHTS in runs:
        figures[BF16_WEIGHTS] = against_fp32(train, speed, BF16_WEIGHTS)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-data", type=Path, required=True, help="a `bertkit prepare-pretraining` folder")
    p.add_argument("--eval-data", type=Path, required=True, help="its held-out folder")
    p.add_argument("--out", type=Path, required=True, help="the two runs go to OUT/fp32 and OUT/bf16")
    p.add_argument("--config", type=Path, default=Path(__file__).resolve().parents[1] / "configs" /
                   "pretrain-mini-cpu.yaml")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--bf16-weights", action="store_true",
                   help="a third run on bf16 weights with a float32 master copy, into OUT/bf16-weights")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args()
    from bertkit.training.logging import read_metrics
    from bertkit.training.plots import plot_metrics

    print(cpu_line(), flush=True)
    runs = {}
    for precision in PRECISIONS + ((BF16_WEIGHTS,) if a.bf16_weights else ()):
        folder = a.out / precision
        if not (folder / "final").is_dir():
            command = pretrain_command(a.config, a.train_data, a.eval_data, folder, precision, a.steps,
                                       a.eval_batches)
            print(" ".join(command), flush=True)
            subprocess.run(command, check=True)
        runs[precision] = read_metrics(folder / "metrics.jsonl")
    figures = compare(runs)
    print(f"tokens/s: fp32 {figures['tokens_per_s']['fp32']:.0f}, bf16 {figures['tokens_per_s']['bf16']:.0f} "
          f"(bf16 / fp32 {figures['bf16_over_fp32']:.3f}x)")
    print(f"training loss, bf16 against fp32 at {figures['steps_compared']} logged steps: relative gap at most "
          f"{figures['loss_gap_max']:.2e}, mean {figures['loss_gap_mean']:.2e}")
    if BF16_WEIGHTS in figures:
        w = figures[BF16_WEIGHTS]
        print(f"bf16 weights: tokens/s {figures['tokens_per_s'][BF16_WEIGHTS]:.0f} ({w['over_fp32']:.3f}x fp32); "
              f"training loss against fp32 at {w['steps_compared']} logged steps: relative gap at most "
              f"{w['loss_gap_max']:.2e}, mean {w['loss_gap_mean']:.2e}")
    for precision, evals in figures["evaluations"].items():
        for step, metrics in evals.items():
            print(f"{precision} held-out at step {step}: mlm_loss {metrics.get('mlm_loss', float('nan')):.4f}, "
                  f"mlm_accuracy {metrics.get('mlm_accuracy', float('nan')):.4f}")
    # both runs in one figure: each record's split names its run ("train, fp32", "eval, bf16", ...)
    merged = [{**r, "split": f"{r.get('split', 'train')}, {precision}"} for precision, records in runs.items()
              for r in records if r.get("split") in ("train", "eval")]
    plot_metrics(merged, a.out / "curves.png", metrics_to_plot=CURVES,
                 title=f"{a.config.stem}, {a.steps} steps: fp32, bf16 autocast"
                       + (", bf16 weights" if a.bf16_weights else ""))
    if a.json:
        a.json.write_text(json.dumps({"cpu": cpu_line(), "command": sys.argv, "steps": a.steps,
                                      "config": str(a.config), **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
