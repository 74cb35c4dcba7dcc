"""A GLUE-style table in one command: several starts fine-tuned on every GLUE task in ../shared/data.

    python3 benchmarks/glue_table.py --start bertkit-mini=bertkit-mini --random-twin bertkit-mini \\
        --start all-MiniLM-L6-v2=$MINILM --out runs/glue
    python3 benchmarks/glue_table.py --dry-run --out /tmp/glue-dry      # tiny model, a few examples per task

Every start gets the same budget per task (below), the same LR sweep and the same seeds; each is scored at the LR
whose mean over the seeds is best (bertkit.jobs.payoff.run, which also reads finished runs back, so an
interrupted table resumes). Metrics are GLUE's: Matthews correlation (CoLA), accuracy (SST-2, QNLI, RTE), F1 and
accuracy (MRPC, averaged as GLUE averages them); the mean is over the tasks. Writes OUT/glue.md and OUT/glue.json.

Budgets, the same for every start (chosen to fit two CPU cores; the tasks' dev sets are scored whole):
- CoLA, SST-2, MRPC, RTE: a seeded subset of at most TRAIN_EXAMPLES training examples, 3 epochs, batch 32, max length
  64 for single sentences and 128 for pairs;
- QNLI has no training file here (its test labels are held back): its dev set is split by a seeded permutation into
  QNLI_DEV examples scored as dev and the rest as training data (written to OUT/data/qnli/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertkit.io import atomic_write_json, atomic_write_text
from bertkit.jobs import payoff
from bertkit.jobs.payoff import FinetuneBudget, PayoffConfig, StartResult, paired_tests, random_init_twin

DATA = Path(os.environ.get("DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TRAIN_EXAMPLES = 4000
QNLI_DEV = 1000
LRS = [3e-5, 1e-4, 3e-4]  # spans the best LRs of a published checkpoint (1e-4 and below) and random init (3e-4)
SEEDS = [42, 43]


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its files, the metrics its score is the mean of, and its sequence length."""

    name: str
    metrics: tuple[str, ...]
    max_length: int


TASKS = [GlueTask("cola", ("matthews",), 64), GlueTask("sst2", ("accuracy",), 64),
         GlueTask("mrpc", ("f1", "accuracy"), 128), GlueTask("qnli", ("accuracy",), 128),
         GlueTask("rte", ("accuracy",), 128)]


def split_qnli(data: Path, out: Path, held_out: int, seed: int = 0) -> tuple[Path, Path]:
    """QNLI's dev file split into a training part and `held_out` dev examples (a seeded permutation, header kept)."""
    lines = (data / "qnli" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [line for line in lines[1:] if line.strip()]
    order = np.random.default_rng(seed).permutation(len(rows))
    dev = sorted(order[:held_out])
    train = sorted(order[held_out:])
    paths = out / "train.tsv", out / "dev.tsv"
    for path, picked in zip(paths, (train, dev)):
        atomic_write_text(path, "\n".join([header] + [rows[i] for i in picked]) + "\n")
    return paths


def task_files(task: GlueTask, data: Path, out: Path, qnli_dev: int) -> tuple[str, str]:
    """The training and dev files of a task."""
    if task.name == "qnli":
        train, dev = split_qnli(data, out / "data" / "qnli", qnli_dev)
        return str(train), str(dev)
    return str(data / task.name / "train.tsv"), str(data / task.name / "dev.tsv")


def task_score(result: StartResult, task: GlueTask) -> dict[str, float]:
    """The start's GLUE metrics at its best LR, each the mean over the seeds, and their mean as the task score."""
    values = {m: [] for m in task.metrics}
    for run in result.best_runs:
        best = json.loads((Path(run) / "results.json").read_text(encoding="utf-8"))["best_metrics"]
        for m in task.metrics:
            values[m].append(float(best[m]))
    scores = {m: statistics.fmean(v) for m, v in values.items()}
    scores["score"] = statistics.fmean(scores[m] for m in task.metrics)
    return scores


def table(rows: dict[str, dict[str, dict[str, float]]], tasks: list[GlueTask]) -> str:
    """Markdown: one row per start, one column per task (its GLUE metric, x100), and the mean over the tasks."""
    head = ["start"] + [f"{t.name.upper()} ({'/'.join(t.metrics)})" for t in tasks] + ["mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for start, by_task in rows.items():
        cells = []
        for t in tasks:
            s = by_task[t.name]
            cells.append("/".join(f"{100 * s[m]:.1f}" for m in t.metrics))
        mean = statistics.fmean(by_task[t.name]["score"] for t in tasks)
        lines.append(f"| {start} | " + " | ".join(cells) + f" | **{100 * mean:.1f}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--start", action="append", default=[], metavar="NAME=FOLDER",
                   help="a start to fine-tune (a folder or a shipped model's name)")
    p.add_argument("--random-twin", metavar="NAME", help="add 'random init': NAME's architecture, random weights")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--tasks", nargs="+", default=[t.name for t in TASKS], choices=[t.name for t in TASKS])
    p.add_argument("--lrs", type=float, nargs="+", default=LRS)
    p.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    p.add_argument("--train-examples", type=int, default=TRAIN_EXAMPLES)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--qnli-dev", type=int, default=QNLI_DEV)
    p.add_argument("--dry-run", action="store_true",
                   help="the same code paths in seconds: a tiny random model, 48 training examples, 1 LR, 1 seed")
    args = p.parse_args(argv)

    out: Path = args.out
    starts = dict(s.split("=", 1) for s in args.start)
    budget_note = (f"at most {args.train_examples} training examples, {args.epochs:g} epochs, batch 32, LRs "
                   f"{', '.join(f'{lr:g}' for lr in args.lrs)}, seeds {', '.join(map(str, args.seeds))}")
    if args.dry_run:
        from bertkit.model import BertConfig, BertForPreTraining
        from bertkit.pretrained import resolve_model_dir
        from bertkit.tokenizer import BertTokenizer

        tiny = out / "tiny"
        if not (tiny / "config.json").is_file():
            config = BertConfig.preset("tiny")
            tokenizer = BertTokenizer.from_pretrained(str(resolve_model_dir("bertkit-mini")))
            config.vocab_size = tokenizer.vocab_size
            torch.manual_seed(0)
            BertForPreTraining(config).save_pretrained(str(tiny))
            tokenizer.save_pretrained(str(tiny))
        starts = {"tiny": str(tiny)}
        args.random_twin, args.lrs, args.seeds, args.train_examples, args.epochs = "tiny", [1e-3], [0], 48, 1.0
        args.qnli_dev = 64
    if args.random_twin:
        starts = {"random init": str(random_init_twin(starts[args.random_twin], out / "random-init")), **starts}

    print(f"CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"capability {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}", flush=True)
    tasks = [t for t in TASKS if t.name in args.tasks]
    rows: dict[str, dict[str, dict[str, float]]] = {name: {} for name in starts}
    paired: dict[str, dict[str, list[dict]]] = {}
    started = time.perf_counter()
    for task in tasks:
        train, dev = task_files(task, args.data, out, args.qnli_dev)
        budget = FinetuneBudget(task="classification", train=train, dev=dev, lrs=args.lrs, seeds=args.seeds,
                                epochs=args.epochs, batch_size=32, max_length=task.max_length,
                                max_train_examples=args.train_examples)
        results = payoff.run(PayoffConfig(starts, budget, out / task.name),
                             on_run=lambda s, lr, seed, score, t=task.name: print(
                                 f"  {t:5} {s:24} lr {lr:g} seed {seed}: {score:.4f}", flush=True))
        for r in results:
            rows[r.name][task.name] = task_score(r, task)
        if "random init" in starts:
            base = next(r for r in results if r.name == "random init")
            for r in results:
                if r is not base:
                    paired.setdefault(r.name, {})[task.name] = [t.to_dict() for t in paired_tests(base, r, budget)]
    text = table(rows, tasks)
    report = {"budget": budget_note, "tasks": [t.name for t in tasks], "starts": starts, "scores": rows,
              "paired_vs_random_init": paired, "seconds": round(time.perf_counter() - started, 1),
              "machine": {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                          "threads": torch.get_num_threads()}}
    atomic_write_json(out / "glue.json", report)
    atomic_write_text(out / "glue.md", f"GLUE dev, {budget_note}:\n\n{text}\n")
    print(text)
    return report


if __name__ == "__main__":
    main()
