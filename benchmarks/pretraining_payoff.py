"""Does a pre-trained folder beat random initialisation on SST-2 and CoNLL-2003? Same budget, LR grid and seeds.

Each start named with --start NAME=FOLDER is fine-tuned on the task over the LR grid and the seeds; with
--random-twin NAME, the same architecture and vocabulary with random weights ("random init") joins as the baseline.
Each start is scored at the LR with the best mean over the seeds. Finished runs are read back (resumable). Writes
OUT/TASK/comparison.json, table.md and comparison.png.

    python3 benchmarks/pretraining_payoff.py --task sst2 --start pretrained=runs/ship/final \\
        --random-twin pretrained --out runs/payoff
    python3 benchmarks/pretraining_payoff.py --task conll --start pretrained=runs/ship/final \\
        --random-twin pretrained --out runs/payoff

With --dropout P, every start (random init included) is fine-tuned with dropout P instead of its folder's own (a
folder pre-trained without dropout, like bertkit-mini, otherwise fine-tunes without it; the paper fine-tunes with
0.1); with --pooling mean, every start's classifier reads the mean of the tokens instead of [CLS]. Each start is
then linked into OUT/TASK/starts/ with only those config.json fields changed.

Budgets (the same for every start): SST-2: 8,000 of the 67,349 training sentences (seeded subset), 3 epochs,
batch 32, max length 64, dev accuracy on all 872 dev sentences. CoNLL-2003: all 14,041 training sentences,
3 epochs, batch 32, max length 128, entity F1 on the 3,250 validation sentences. LR grid: SST-2 1e-4, 3e-4, 1e-3;
CoNLL-2003 3e-4, 1e-3.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common import CLASSIFICATION_BUDGET, DATA, RANDOM_INIT, SEEDS, cpu_line, parse_starts

from bertkit.io import atomic_write_json
from bertkit.jobs import payoff
from bertkit.jobs.payoff import FinetuneBudget, PayoffConfig, markdown_table, plot_comparison, verdict

BUDGETS = {
    "sst2": dict(CLASSIFICATION_BUDGET, train=DATA / "sst2" / "train.tsv", dev=DATA / "sst2" / "dev.tsv",
                 max_length=64, metric="accuracy"),
    "conll": dict(task="ner", train=DATA / "conll2003" / "train.txt", dev=DATA / "conll2003" / "valid.txt",
                  max_train_examples=None, epochs=3.0, batch_size=32, max_length=128, metric="f1",
                  lrs=[3e-4, 1e-3]),  # 7.5 min a run on 2 cores: the two LRs that won SST-2 for either start
}


def with_config(folder: str, out: Path, changes: dict) -> str:
    """`folder` with config.json's fields `changes` changed (dropout, pooling), every other file linked."""
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(folder).iterdir():
        if f.is_file() and f.name != "config.json" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return str(out)


def grid_table(results: list, lrs: list[float], metric: str) -> str:
    """Every start at every LR: mean over the seeds, the seeds in brackets (points)."""
    rows = ["| start | " + " | ".join(f"LR {lr:g}" for lr in lrs) + " |", "| --- |" + " --- |" * len(lrs)]
    for r in results:
        cells = []
        for lr in lrs:
            seeds = list(r.scores[f"{lr:g}"].values())
            cells.append(f"{100 * sum(seeds) / len(seeds):.2f} ({', '.join(f'{100 * x:.2f}' for x in seeds)})")
        rows.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return f"{metric}, every LR of the grid:\n\n" + "\n".join(rows)


def paired_lines(results: list, baseline: str, budget: FinetuneBudget, out: Path) -> list[str]:
    """Each start against `baseline` by the task's paired test on the same dev examples, one per seed (both at
    their best LR); the tests are also written to OUT/TASK/paired.json."""
    by = {r.name: r for r in results}
    if baseline not in by:
        raise SystemExit(f"--baseline {baseline!r} is not a start ({', '.join(by)})")
    lines, record = [], {}
    for r in results:
        if r.name == baseline:
            continue
        tests = payoff.paired_tests(by[baseline], r, budget)
        record[r.name] = [t.to_dict() for t in tests]
        for seed, t in zip(budget.seeds, tests):
            lines.append(f"- {r.name} vs {baseline}, seed {seed}: {100 * t.score_b:.2f} vs {100 * t.score_a:.2f}, "
                         f"{t.outcome} ({t.evidence(baseline, r.name)})")
    atomic_write_json(out / "paired.json", {"baseline": baseline, "seeds": budget.seeds, "tests": record})
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", choices=sorted(BUDGETS), required=True)
    p.add_argument("--start", action="append", default=[], metavar="NAME=FOLDER", help="a start to fine-tune")
    p.add_argument("--random-twin", metavar="NAME", help="add 'random init': NAME's architecture, random weights")
    p.add_argument("--baseline", metavar="NAME", help="the start every other is compared with by a paired test "
                                                      "(default: 'random init' with --random-twin)")
    p.add_argument("--out", type=Path, required=True, help="output folder (runs, comparison.json, table.md)")
    p.add_argument("--lrs", type=float, nargs="+", help="the LR grid (default: the task's)")
    p.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    p.add_argument("--max-train-examples", type=int, help="override the budget's training subset")
    p.add_argument("--epochs", type=float, help="override the budget's epochs")
    p.add_argument("--dropout", type=float, help="fine-tune every start with this dropout (default: the folder's)")
    p.add_argument("--pooling", choices=["cls", "mean"],
                   help="what every start's classifier reads: [CLS] or the mean of the tokens (default: the folder's)")
    args = p.parse_args(argv)

    print(f"{cpu_line()}, threads {torch.get_num_threads()}", flush=True)
    starts = parse_starts(args.start, args.random_twin, args.out / args.task / "random-init")
    changes: dict = {}
    if args.dropout is not None:
        changes.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    if args.pooling is not None:
        changes["pooling"] = args.pooling
    if changes:
        starts = {name: with_config(folder, args.out / args.task / "starts" / name.replace(" ", "-"), changes)
                  for name, folder in starts.items()}
    spec = dict(BUDGETS[args.task])
    metric = spec.pop("metric")
    if args.max_train_examples:
        spec["max_train_examples"] = args.max_train_examples
    if args.epochs:
        spec["epochs"] = args.epochs
    if args.lrs:
        spec["lrs"] = args.lrs
    budget = FinetuneBudget(**{k: str(v) if isinstance(v, Path) else v for k, v in spec.items()}, seeds=args.seeds)
    results = payoff.run(PayoffConfig(starts, budget, args.out / args.task),
                         on_run=lambda s, lr, seed, score: print(f"  {s:24} lr {lr:g} seed {seed}: {score:.4f}",
                                                                 flush=True))
    baseline = args.baseline or (RANDOM_INIT if args.random_twin else None)
    table = markdown_table(results, metric, baseline=baseline)
    lines = [table, "", grid_table(results, budget.lrs, metric)]
    if args.random_twin and baseline == RANDOM_INIT:
        lines += ["", verdict(results, args.random_twin, RANDOM_INIT, metric, args.task)]
    if baseline is not None:
        lines += ["", *paired_lines(results, baseline, budget, args.out / args.task)]
    (args.out / args.task / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot_comparison(results, args.out / args.task / "comparison.png",
                    f"{args.task}: fine-tuned from each start (best LR, mean of {len(args.seeds)} seeds)", metric)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
