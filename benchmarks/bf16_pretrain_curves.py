"""bf16 autocast pre-training against float32 on this CPU: one short `bertkit pretrain` run in each precision, the
same config, seed, batches and masks, and their loss curves side by side.

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
CURVES = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "tokens_per_s")


def pretrain_command(config: Path, train: Path, heldout: Path, out: Path, precision: str, steps: int,
                     eval_batches: int) -> list[str]:
    """The `bertkit pretrain` command of one run: the config's recipe, cut to `steps` (its schedule too)."""
    return [sys.executable, "-m", "bertkit", "pretrain", "--config", str(config), "--train_data", str(train),
            "--eval_data", str(heldout), "--training.output_dir", str(out), "--training.precision", precision,
            "--training.max_steps", str(steps), "--training.eval_every", str(max(1, steps // 2)),
            "--training.save_every", str(max(1, steps // 4)), "--eval_batches", str(eval_batches),
            "--training.log_every", "10", "--resume"]


def compare(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The figures of two runs' metrics.jsonl records (fp32 and bf16): median training tokens/s of each and the
    ratio bf16 / fp32, the relative gaps |loss_bf16 - loss_fp32| / loss_fp32 at the steps both logged (the largest
    and the mean), and each run's evaluations as {step: {metric: value}}."""
    train = {p: {r["step"]: r for r in records if r.get("split") == "train" and "loss" in r}
             for p, records in runs.items()}
    speed = {p: statistics.median(r["tokens_per_s"] for r in rows.values() if "tokens_per_s" in r)
             for p, rows in train.items()}
    shared = sorted(set(train["fp32"]) & set(train["bf16"]))
    if not shared:
        raise SystemExit("the two runs logged no training loss at the same steps")
    gaps = [abs(train["bf16"][s]["loss"] - train["fp32"][s]["loss"]) / abs(train["fp32"][s]["loss"]) for s in shared]
    evaluations = {p: {r["step"]: {k: v for k, v in r.items() if k not in ("step", "split", "epoch")}
                       for r in records if r.get("split") == "eval"} for p, records in runs.items()}
    return {"tokens_per_s": speed, "bf16_over_fp32": speed["bf16"] / speed["fp32"], "steps_compared": len(shared),
            "loss_gap_max": max(gaps), "loss_gap_mean": statistics.fmean(gaps), "evaluations": evaluations}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-data", type=Path, required=True, help="a `bertkit prepare-pretraining` folder")
    p.add_argument("--eval-data", type=Path, required=True, help="its held-out folder")
    p.add_argument("--out", type=Path, required=True, help="the two runs go to OUT/fp32 and OUT/bf16")
    p.add_argument("--config", type=Path, default=Path(__file__).resolve().parents[1] / "configs" /
                   "pretrain-mini-cpu.yaml")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args()
    from bertkit.training.logging import read_metrics
    from bertkit.training.plots import plot_metrics

    print(cpu_line(), flush=True)
    runs = {}
    for precision in PRECISIONS:
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
    for precision, evals in figures["evaluations"].items():
        for step, metrics in evals.items():
            print(f"{precision} held-out at step {step}: mlm_loss {metrics.get('mlm_loss', float('nan')):.4f}, "
                  f"mlm_accuracy {metrics.get('mlm_accuracy', float('nan')):.4f}")
    # both runs in one figure: each record's split names its run ("train, fp32", "eval, bf16", ...)
    merged = [{**r, "split": f"{r.get('split', 'train')}, {precision}"} for precision, records in runs.items()
              for r in records if r.get("split") in ("train", "eval")]
    plot_metrics(merged, a.out / "curves.png", metrics_to_plot=CURVES,
                 title=f"{a.config.stem}, {a.steps} steps: fp32 and bf16 autocast")
    if a.json:
        a.json.write_text(json.dumps({"cpu": cpu_line(), "command": sys.argv, "steps": a.steps,
                                      "config": str(a.config), **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
