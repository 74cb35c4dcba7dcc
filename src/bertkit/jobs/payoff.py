"""Does pre-training pay off? The same fine-tuning budget from several starts, each at its best learning rate.

`run(PayoffConfig)` gives every start (a pre-trained folder, the same architecture with random weights, a published
checkpoint) the same task, data, budget, LR grid and seeds; each start is scored at the LR whose mean over the seeds
is best (the paper picks the best fine-tuning LR on dev per task). Runs already finished are read back, so an
interrupted comparison resumes. Two starts are compared by a paired significance test on the same dev examples
(`paired_tests`); each run's best model predicts the dev set once for it (`dev_predictions.json`).
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from bertkit.dataclass_io import SEED_LIMIT, Config, spec
from bertkit.errors import ConfigError
from bertkit.io import atomic_write_json
from bertkit.tasks.significance import PairedTest

SUMMARY_NAME = "comparison.json"
PREDICTIONS_NAME = "dev_predictions.json"


@dataclass
class FinetuneBudget(Config):
    """One task and the fine-tuning budget every start gets."""

    task: str = spec()
    """A bertkit task: 'classification', 'ner', ..."""
    train: str = spec()
    """Training file."""
    dev: str = spec()
    """Dev file: the scores are its main metric at the best evaluation."""
    lrs: list[float] = spec(default_factory=lambda: [1e-4, 3e-4], gt=0, le=1)
    """The learning-rate grid, the same for every start."""
    seeds: list[int] = spec(default_factory=lambda: [42, 43], ge=0, le=SEED_LIMIT)
    """Fine-tuning seeds (head initialisation, order, dropout), the same for every start."""
    epochs: float = spec(3.0, gt=0, le=1e6)
    batch_size: int = spec(32, ge=1, le=2**20)
    max_length: int = spec(64, ge=3, le=2**20)
    max_train_examples: int | None = spec(None, ge=1, le=10**9)
    """A seeded subset of the training file (None: all of it)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The task's other options, the same for every start (QA's doc_stride, ...)."""
    eval_every: int | None = spec(None, ge=1, le=10**12)
    """Evaluate every N steps (None: every epoch)."""


@dataclass
class PayoffConfig(Config):
    """One comparison: the starts, the budget every one of them gets, and where the runs go."""

    starts: dict[str, str | os.PathLike]
    """Start name -> model folder (or a shipped model's name), fine-tuned in this order."""
    budget: FinetuneBudget
    """The task and the fine-tuning budget, the same for every start."""
    output_dir: str | os.PathLike = spec()
    """Each run goes to OUTPUT/START/lrLR-seedSEED, the summary to OUTPUT/comparison.json."""
    progress: bool = False
    """Show each fine-tuning run's progress bar."""


@dataclass
class StartResult:
    """One start's scores: every (LR, seed) run, and the LR with the best mean."""

    name: str
    model: str
    scores: dict[str, dict[str, float]]  # lr -> seed -> main metric
    best_lr: float
    best_scores: list[float]  # at best_lr, one per seed
    mean: float
    dev_examples: int | None = None
    """How many dev examples each score is measured on."""
    best_runs: list[str] = field(default_factory=list)
    """The run folders at best_lr, one per seed (each with its dev predictions)."""


def random_init_twin(folder: str | Path, out: str | Path, seed: int = 0) -> Path:
    """The folder's architecture and vocabulary with freshly initialised weights (the random-init baseline)."""
    import torch

    from bertkit.model import BertForPreTraining
    from bertkit.model.folder import read_folder
    from bertkit.tokenizer import BertTokenizer

    out = Path(out)
    if (out / "config.json").is_file():
        return out
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForPreTraining(read_folder(folder).config)
    model.save_pretrained(str(out))
    BertTokenizer.from_pretrained(str(folder)).save_pretrained(str(out))
    return out


def run_dir(out: str | Path, name: str, lr: float, seed: int) -> Path:
    """The folder of one fine-tuning run of a comparison written to `out` (its results.json, best model, dev
    predictions)."""
    return Path(out) / name / f"lr{lr:g}-seed{seed}"


def dev_predictions(run: str | Path, dev: str) -> list:
    """The predictions of a finished run's best model on every dev example, computed once and kept in the run."""
    from bertkit.jobs.finetune import RESULTS_NAME, predictions_on

    run = Path(run)
    cached = run / PREDICTIONS_NAME
    if cached.is_file():
        return json.loads(cached.read_text(encoding="utf-8"))["predictions"]
    summary = json.loads((run / RESULTS_NAME).read_text(encoding="utf-8"))
    if not summary.get("best_dir"):
        raise ConfigError(f"{run}: the run kept no best model to predict with")
    predictions = predictions_on(summary["best_dir"], dev)[3]
    atomic_write_json(cached, {"dev": str(dev), "predictions": predictions})
    return predictions


def paired_test(task: str) -> Callable[..., PairedTest]:
    """The paired test of a task's main metric (its module's `paired_test(examples, predictions_a, predictions_b,
    settings, seed)`); ConfigError for a task that has none."""
    from bertkit.tasks import classification, multiple_choice, ner, qa

    modules = {"classification": classification, "ner": ner, "qa": qa, "multiple-choice": multiple_choice}
    if task not in modules:
        raise ConfigError(f"task {task!r} has no paired significance test")
    return modules[task].paired_test


def paired_tests(baseline: StartResult, other: StartResult, budget: FinetuneBudget) -> list[PairedTest]:
    """`other` against `baseline` on the dev examples, one paired test per seed (each start at its best LR, runs
    paired by seed), by the task's main metric."""
    from bertkit.jobs.finetune import RESULTS_NAME, finetuned_task

    tests = []
    for seed, (run_a, run_b) in zip(budget.seeds, zip(baseline.best_runs, other.best_runs)):
        best = json.loads((Path(run_a) / RESULTS_NAME).read_text(encoding="utf-8"))["best_dir"]
        task, settings, _ = finetuned_task(best)
        examples = task.read(budget.dev, settings)
        tests.append(paired_test(task.name)(examples, dev_predictions(run_a, budget.dev),
                                            dev_predictions(run_b, budget.dev), settings, seed=seed))
    return tests


def run(config: PayoffConfig, on_run: Callable[[str, float, int, float], None] | None = None) -> list[StartResult]:
    """Fine-tune every start over the LR grid and seeds; write OUTPUT/comparison.json; return one result per start.

    `on_run(start, lr, seed, score)` is called after each run (finished or read back).
    """
    from bertkit.jobs import finetune
    from bertkit.jobs.finetune import RESULTS_NAME, FinetuneConfig

    budget, out = config.budget, Path(config.output_dir)
    results = []
    for name, model in config.starts.items():
        scores: dict[str, dict[str, float]] = {}
        dev_examples = None
        for lr in budget.lrs:
            for seed in budget.seeds:
                folder = run_dir(out, name, lr, seed)
                if (folder / RESULTS_NAME).is_file():
                    summary = json.loads((folder / RESULTS_NAME).read_text(encoding="utf-8"))
                else:
                    job = FinetuneConfig.from_dict({
                        "task": budget.task, "model": str(model), "train": budget.train, "dev": budget.dev,
                        "options": {**budget.options, "max_length": budget.max_length},
                        "max_train_examples": budget.max_train_examples,
                        "training": {"output_dir": str(folder), "epochs": budget.epochs, "lr": lr,
                                     "batch_size": budget.batch_size, "seed": seed, "eval_every": budget.eval_every,
                                     "progress_bar": config.progress}})
                    summary = finetune.run(job, resume=(folder / "checkpoints").is_dir())  # a stopped run continues
                score = float(summary["best_metrics"][summary["main_metric"]])
                dev_examples = summary.get("dev_examples", dev_examples)
                scores.setdefault(f"{lr:g}", {})[str(seed)] = score
                if on_run is not None:
                    on_run(name, lr, seed, score)
        best = max(budget.lrs, key=lambda lr: statistics.fmean(scores[f"{lr:g}"].values()))
        at_best = [scores[f"{best:g}"][str(s)] for s in budget.seeds]
        results.append(StartResult(name, str(model), scores, best, at_best, statistics.fmean(at_best), dev_examples,
                                   [str(run_dir(out, name, best, s)) for s in budget.seeds]))
    atomic_write_json(out / SUMMARY_NAME, {"budget": asdict(budget), "starts": [asdict(r) for r in results]})
    return results


def markdown_table(results: list[StartResult], metric: str, baseline: str | None = None) -> str:
    """A table: start, best LR, score per seed, mean, and the difference to `baseline` in points."""
    base = next((r.mean for r in results if r.name == baseline), None)
    seeds = len(results[0].best_scores) if results else 0
    head = ["start", "best LR", *[f"seed {i + 1}" for i in range(seeds)], f"mean {metric}"]
    if base is not None:
        head.append(f"vs {baseline}")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        row = [r.name, f"{r.best_lr:g}", *[f"{100 * s:.2f}" for s in r.best_scores], f"**{100 * r.mean:.2f}**"]
        if base is not None:
            row.append("" if r.name == baseline else f"{100 * (r.mean - base):+.2f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def verdict(results: list[StartResult], pretrained: str, baseline: str, metric: str, task: str) -> str:
    """One sentence computed from the figures: did `pretrained` beat `baseline`, by how much, on how many seeds."""
    by = {r.name: r for r in results}
    if pretrained not in by or baseline not in by:
        return ""
    p, b = by[pretrained], by[baseline]
    gain = 100 * (p.mean - b.mean)
    wins = sum(x > y for x, y in zip(p.best_scores, b.best_scores))
    n = len(p.best_scores)
    if gain > 0:
        return (f"{pretrained} beats {baseline} on {task} by {gain:+.2f} {metric} points (mean of {n} seeds, "
                f"{100 * p.mean:.2f} vs {100 * b.mean:.2f}; better on {wins} of {n} seeds), with the same "
                f"fine-tuning budget and LR grid.")
    return (f"{pretrained} does not beat {baseline} on {task}: {gain:+.2f} {metric} points (mean of {n} seeds, "
            f"{100 * p.mean:.2f} vs {100 * b.mean:.2f}), with the same fine-tuning budget and LR grid.")



def plot_comparison(results: list[StartResult], png_path: str | Path, title: str, metric: str = "accuracy",
                    scale: float = 100.0) -> Path:
    """A bar per start (its mean at the best LR, in points) with each seed's score as a dot. `scale` turns a score
    into points: 100 for scores in 0..1, 1 for scores that are points already (SQuAD's F1 and exact match)."""
    from bertkit.training.plots import plot_bars

    return plot_bars([r.name for r in results], [scale * r.mean for r in results], png_path, title, f"{metric} (%)",
                     points=[[scale * s for s in r.best_scores] for r in results])
