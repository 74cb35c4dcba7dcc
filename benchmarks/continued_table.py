"""The continued pre-training report's rows for one task, read from the runs' own files.

Issue 25 item 4 measures continued pre-training of bertkit-mini on a task's own unlabelled text: a `bertkit
pretrain` run from the shipped model (its metrics.jsonl starts with the shipped model's held-out MLM score, step 0,
from `eval_at_start`), then `pretraining_payoff.py --start shipped=bertkit-mini --start continued=FOLDER
--baseline shipped`, which writes OUT/TASK/comparison.json and paired.json. This reads those files and puts the
task's rows into the report's JSON tables (pretrain, best, grid, paired), replacing the task's earlier rows and
keeping the other tasks', and the runs' raw comparison and paired tests under "tasks"; `python3 docs/generate.py`
then renders the tables.

    python3 benchmarks/continued_table.py --task conll --pretrain runs/continue-conll --payoff runs/payoff/conll \\
        --report docs/results/continued-pretraining-epyc-avx2-2026-11-25.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_text

TITLES = {"sst2": "SST-2", "conll": "CoNLL-2003"}
START_NAMES = ("shipped bertkit-mini", "continued on the task's text")
"""How the report names the baseline (the shipped model) and the continued model."""


def held_out_scores(pretrain: Path) -> dict[str, Any]:
    """The run's held-out MLM accuracy before its first step (step 0) and at its last evaluation, and its steps."""
    evals = [json.loads(line) for line in (pretrain / "metrics.jsonl").read_text("utf-8").splitlines()
             if line.strip() and json.loads(line).get("split") == "eval"]
    if not evals or evals[0]["step"] != 0:
        raise SystemExit(f"{pretrain / 'metrics.jsonl'}: no step-0 evaluation (run with training.eval_at_start)")
    return {"steps": evals[-1]["step"], "mlm_before": evals[0]["mlm_accuracy"],
            "mlm_after": evals[-1]["mlm_accuracy"], "ppl_after": evals[-1]["perplexity"]}


def task_rows(task: str, pretrain: Path, payoff_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows for one task: the held-out MLM scores, each start's best LR, the grid, the paired tests."""
    title = TITLES[task]
    comparison = json.loads((payoff_dir / "comparison.json").read_text("utf-8"))
    paired = json.loads((payoff_dir / "paired.json").read_text("utf-8"))
    starts = comparison["starts"]
    if len(starts) != 2 or starts[0]["name"] != paired["baseline"]:
        raise SystemExit(f"{payoff_dir}: expected the shipped baseline first and one continued start, got "
                         f"{[s['name'] for s in starts]} (baseline {paired['baseline']!r})")
    seeds = comparison["budget"]["seeds"]
    rows: dict[str, list[dict[str, Any]]] = {"pretrain": [{"task": title, **held_out_scores(pretrain)}],
                                             "best": [], "grid": [], "paired": []}
    for name, start in zip(START_NAMES, starts):
        best = [100 * s for s in start["best_scores"]]
        row = {"task": title, "start": name, "best_lr": start["best_lr"], "seed1": best[0], "seed2": best[1],
               "mean": 100 * start["mean"], "gain": 100 * (start["mean"] - starts[0]["mean"])}
        if start is starts[0]:
            row["_templates"] = {"gain": ""}
        rows["best"].append(row)
        grid = {"task": title, "start": name}
        for lr, by_seed in start["scores"].items():
            values = [100 * by_seed[str(s)] for s in seeds]
            grid[f"lr_{lr.replace('.', 'p')}"] = (f"{sum(values) / len(values):.2f} ("
                                                  + ", ".join(f"{v:.2f}" for v in values) + ")")
        rows["grid"].append(grid)
    for seed, test in zip(seeds, next(iter(paired["tests"].values()))):
        row = {"task": title, "seed": seed, "test": test["test"], "n": test["n"], "continued": 100 * test["score_b"],
               "shipped": 100 * test["score_a"], "only_continued": test["only_b"], "only_shipped": test["only_a"],
               "interval": test["interval"], "p": test["p_value"], "outcome": test["outcome"]}
        if test["interval"] is not None:
            row["low"], row["high"] = (100 * x for x in test["interval"])
            row["_templates"] = {"evidence": "95% interval [{low:+.2f}, {high:+.2f}]"}
        rows["paired"].append(row)
    return rows


def merge(report: dict[str, Any], task: str, rows: dict[str, list[dict[str, Any]]], payoff_dir: Path) -> dict[str, Any]:
    """The report with the task's rows replaced by `rows` (in the tables' order of tasks: SST-2, then CoNLL) and
    its raw comparison and paired tests recorded."""
    report["tasks"][task] = {f: json.loads((payoff_dir / f"{f}.json").read_text("utf-8"))
                             for f in ("comparison", "paired")}
    order = list(TITLES.values())
    for name, new in rows.items():
        table = report["tables"][name]
        kept = [r for r in table["rows"] if r["task"] != TITLES[task]]
        table["rows"] = sorted(kept + new, key=lambda r: order.index(r["task"]))
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", choices=sorted(TITLES), required=True)
    p.add_argument("--pretrain", type=Path, required=True, help="the continued pre-training run's output folder")
    p.add_argument("--payoff", type=Path, required=True, help="pretraining_payoff.py's OUT/TASK folder")
    p.add_argument("--report", type=Path, required=True, help="the report's JSON, updated in place")
    args = p.parse_args(argv)
    report = json.loads(args.report.read_text("utf-8"))
    merged = merge(report, args.task, task_rows(args.task, args.pretrain, args.payoff), args.payoff)
    atomic_write_text(args.report, json.dumps(merged, indent=1, ensure_ascii=False) + "\n")
    print(f"{args.report}: {TITLES[args.task]} rows written; run python3 docs/generate.py")


if __name__ == "__main__":
    main()
