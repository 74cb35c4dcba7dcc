"""The pre-training ladder (docs/results/pretraining-ladder-*.md): one row per run, read from the runs' own files.

    python3 benchmarks/ladder_table.py --row "RECIPE|SIZE|RUN_DIR|PAYOFF_DIR" [--row ...] [--step N]

RUN_DIR is a `bertkit pretrain` output folder. Tokens seen come from its newest checkpoint (scaled to the step of
the evaluation shown); training time is the sum over metrics.jsonl's training windows of the window's tokens over
its logged tokens/s (evaluations and start-up excluded); the held-out MLM accuracy is its evaluation at step N, or by
default at the run's best step, whose weights are the best/ folder the SST-2 columns fine-tune from. PAYOFF_DIR is
benchmarks/pretraining_payoff.py's SST-2 output (comparison.json): the pre-trained start against "random init", mean
and per seed, each at its best LR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def run_figures(run: Path, step: int | None) -> dict:
    """Step, tokens, training seconds and held-out MLM accuracy of a pre-training run."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    checkpoints = sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    trainer = torch.load(checkpoints[-1] / "state.pt", map_location="cpu", weights_only=False)["trainer"]
    step = trainer["best_step"] if step is None else step
    last = [r for r in records if r["split"] == "eval" and r["step"] <= step][-1]
    per_step = trainer["tokens_seen"] / trainer["step"]  # tokens are counted at each logged window
    seconds, previous = 0.0, 0
    for r in records:
        if r["split"] == "train" and r["step"] <= last["step"]:
            seconds += per_step * (r["step"] - previous) / r["tokens_per_s"]
            previous = r["step"]
    return {"step": last["step"], "tokens": per_step * last["step"], "seconds": seconds,
            "mlm_accuracy": last["mlm_accuracy"]}


def payoff(folder: Path) -> dict | None:
    """The pre-trained start and "random init" from comparison.json, or None if not run."""
    path = folder / "comparison.json"
    if not path.is_file():
        return None
    starts = {s["name"]: s for s in json.loads(path.read_text())["starts"]}
    base = starts.pop("random init")
    (other,) = starts.values()
    return {"pretrained": other, "random": base}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--row", action="append", required=True, metavar="RECIPE|SIZE|RUN_DIR|PAYOFF_DIR")
    p.add_argument("--step", type=int, default=None,
                   help="show each run at its evaluation at or before this step (default: its best step)")
    args = p.parse_args()
    print("| recipe | size | steps | tokens | training time | held-out MLM acc. | SST-2 dev: pre-trained | "
          "SST-2 dev: random init | gain |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in args.row:
        recipe, size, run, pay = row.split("|")
        f = run_figures(Path(run), args.step)
        r = payoff(Path(pay)) if pay else None
        cells = [recipe, size, f"{f['step']:,}", f"{f['tokens'] / 1e6:.1f} M", f"{f['seconds'] / 60:.0f} min",
                 f"{f['mlm_accuracy']:.3f}"]
        if r is None:
            cells += ["-", "-", "-"]
        else:
            def show(s: dict) -> str:
                return f"{100 * s['mean']:.2f} ({', '.join(f'{100 * x:.2f}' for x in s['best_scores'])})"

            cells += [show(r["pretrained"]), show(r["random"]),
                      f"**{100 * (r['pretrained']['mean'] - r['random']['mean']):+.2f}**"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
