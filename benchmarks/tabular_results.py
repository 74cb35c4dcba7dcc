"""Text with non-text columns on the clothing reviews (predict Recommended IND): text only, against the columns
written into the text (a template) and the columns beside the text (numbers and category embeddings concatenated
with the pooled [CLS] vector), each with and without the Rating column, one budget, several seeds. Dev only.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 benchmarks/tabular_results.py [--out runs/tabular]

Prints a table (accuracy, F1 of class 0 "not recommended", mean and seed-to-seed spread, the gain over text only
last) and writes it as JSON (OUT/tabular_results.json). A run whose OUT/NAME-seedS/results.json exists is read, not
repeated, so an interrupted benchmark continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bertkit.io import atomic_write_json
from bertkit.jobs.finetune import FinetuneConfig, finetune, finetune_training
from bertkit.tasks import get_task
from bertkit.tasks.base import read_table

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "clothing_reviews"
TEXT = "{Title}. {Review Text}"
NUMERIC = ["Age", "Positive Feedback Count"]
CATEGORICAL = ["Division Name", "Department Name", "Class Name"]


def rendered(rating: bool) -> str:
    """Strategy (a)'s template: the columns first (never cut by truncation), then the text."""
    return ("Age: {Age}. " + ("Rating: {Rating}. " if rating else "") + "Positive feedback: "
            "{Positive Feedback Count}. Division: {Division Name}. Department: {Department Name}. Class: "
            "{Class Name}. " + TEXT)


STRATEGIES: dict[str, dict] = {
    "text only": {"template": TEXT},
    "(a) columns in the text, no Rating": {"template": rendered(False)},
    "(a) columns in the text, with Rating": {"template": rendered(True)},
    "(b) columns beside the text, no Rating": {"template": TEXT, "numeric_columns": NUMERIC,
                                               "categorical_columns": CATEGORICAL},
    "(b) columns beside the text, with Rating": {"template": TEXT, "numeric_columns": ["Rating", *NUMERIC],
                                                 "categorical_columns": CATEGORICAL},
}


def class0_f1(accuracy: float, f1_positive: float, n: int, n_positive: int) -> float:
    """F1 of class 0 from accuracy and class 1's F1 on n examples (n_positive of class 1): with TP + FN =
    n_positive, TN + FP = n - n_positive, TP + TN = accuracy * n and F1_1 = 2TP / (2TP + FP + FN), the confusion
    matrix is determined: TP = F1_1 * n * (1 - accuracy) / (2 (1 - F1_1))."""
    errors = round(n * (1 - accuracy))
    tp = round(f1_positive * errors / (2 * (1 - f1_positive))) if f1_positive < 1 else n_positive
    tn = round(accuracy * n) - tp
    fn, fp = n_positive - tp, (n - n_positive) - tn
    return 2 * tn / (2 * tn + fp + fn) if tn else 0.0


def run(name: str, options: dict, seed: int, args: argparse.Namespace) -> dict:
    """One fine-tuning (or its saved results), with the benchmark's budget."""
    out = Path(args.out) / f"{slug(name)}-seed{seed}"
    done = out / "results.json"
    if done.is_file():
        return json.loads(done.read_text())
    training = finetune_training(get_task("classification"), {
        "output_dir": str(out), "lr": args.lr, "head_lr_scale": args.head_lr_scale, "batch_size": args.batch_size,
        "epochs": args.epochs, "seed": seed, "progress_bar": False, "save_every": None, "keep_last": 1})
    config = FinetuneConfig(task="classification", model=args.model, train=str(DATA / "train.csv"),
                            dev=str(DATA / "dev.csv"), max_train_examples=args.train_examples,
                            options={**options, "label_column": "Recommended IND", "max_length": args.max_length},
                            training=training)
    return finetune(config)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("--", "-")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bertkit-mini")
    p.add_argument("--out", default="runs/tabular")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--train-examples", type=int, default=3000)
    p.add_argument("--max-length", type=int, default=96)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--head-lr-scale", type=float, default=100.0)
    p.add_argument("--only", nargs="*", help="run only the strategies whose name contains one of these")
    args = p.parse_args()
    rows = read_table(DATA / "dev.csv")
    label = rows[0][1].index("Recommended IND")
    n, n_pos = len(rows) - 1, sum(r[label] == "1" for _, r in rows[1:])
    table = []
    for name, options in STRATEGIES.items():
        if args.only and not any(o in name for o in args.only):
            continue
        per_seed = []
        for seed in args.seeds:
            started = time.time()
            summary = run(name, options, seed, args)
            m = summary["best_metrics"]
            per_seed.append({"seed": seed, "accuracy": m["accuracy"], "f1_class0": class0_f1(m["accuracy"], m["f1"],
                                                                                           n, n_pos),
                             "matthews": m["matthews"], "seconds": summary["seconds"]})
            print(f"  {name} seed {seed}: accuracy {m['accuracy']:.4f} ({time.time() - started:.0f} s)",
                  file=sys.stderr, flush=True)
        summary_stats = {}
        for key in ("accuracy", "f1_class0"):
            values = [r[key] for r in per_seed]
            summary_stats.update({f"{key}_mean": statistics.fmean(values), f"{key}_spread": max(values) - min(values)})
        table.append({"strategy": name, "options": options, "runs": per_seed, **summary_stats})
    base = next((r for r in table if r["strategy"] == "text only"), None)
    print(f"| strategy | dev accuracy % (mean of seeds {args.seeds}) | seed spread | F1 class 0 % | seed spread | "
          "accuracy gain over text only |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in table:
        gain = f"{100 * (r['accuracy_mean'] - base['accuracy_mean']):+.2f}" if base else "-"
        print(f"| {r['strategy']} | {100 * r['accuracy_mean']:.2f} | {100 * r['accuracy_spread']:.2f} | "
              f"{100 * r['f1_class0_mean']:.2f} | {100 * r['f1_class0_spread']:.2f} | {gain} |")
    budget = {k: getattr(args, k) for k in ("model", "train_examples", "max_length", "epochs", "batch_size", "lr",
                                            "head_lr_scale", "seeds")}
    atomic_write_json(Path(args.out) / "tabular_results.json", {"budget": budget, "dev_examples": n,
                                                                 "dev_class1": n_pos, "strategies": table})


if __name__ == "__main__":
    main()
