"""The feature-based approach on CoNLL-2003 (BERT paper, section 5.3, Table 7) with all-MiniLM-L6-v2, next to
fine-tuning: dev (valid) entity F1 of a tagger on the frozen encoder's features, for each feature choice.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/frozen_ner.py [--out runs/frozen_ner] [--threads 1]

Stages, each skipped when its folder already holds results.json (a rerun prints the table again):
  1. finetune:  MiniLM fine-tuned (2 epochs, batch 16, lr 1e-4, max length 128): the reference row
  2. one run of `bertkit finetune --task ner --frozen` per (tagger, feature choice): the encoder runs once per sentence
     into OUT/feature_cache (fp16, shared by every run), then the one Trainer trains only the tagger
     (BiLSTM: --tagger-hidden per direction, --frozen-epochs, --frozen-lr, batch --frozen-batch-size, warm-up 10%).
Goal: the best frozen choice within 2 F1 of fine-tuning. The paper's BERT-base dev F1 are printed beside ours.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch
from common import minilm_dir, run_stage

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "conll2003"
GOAL = 2.0  # F1 points the best frozen choice may trail fine-tuning by
# Devlin et al. 2019, Table 7 (BERT-base, CoNLL-2003 dev F1). The paper's "sum" rows are weighted sums.
PAPER = {"finetune": 96.4, "last": 94.9, "concat_last_four": 96.1, "weighted_sum": 95.5,
         "sum_last_four": 95.9}
PAPER_NOTE = {"sum_last_four": " (weighted sum of the last four)", "weighted_sum": " (weighted sum of all 12)"}


def finetune_run(args: argparse.Namespace, out: Path, training: dict[str, Any], options: dict[str, Any]) -> dict:
    """One `bertkit finetune --task ner` run through its Python API."""
    from bertkit.jobs.finetune import FinetuneConfig, finetune, finetune_training
    from bertkit.tasks import get_task

    config = FinetuneConfig(task="ner", model=args.model, train=str(args.data / "train.txt"),
                            dev=str(args.data / "valid.txt"), max_train_examples=args.max_train_examples,
                            max_eval_examples=args.max_eval_examples,
                            options={"max_length": 128, **options})
    config.training = finetune_training(get_task("ner"), {"output_dir": str(out), "progress_bar": False,
                                                          **training})
    return finetune(config)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=minilm_dir())
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "frozen_ner")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache", type=Path, default=None, help="the encoder-feature cache (default OUT/feature_cache): "
                   "another --out with the same cache encodes nothing again")
    p.add_argument("--choices", default="last,sum_last_four,concat_last_four,weighted_sum")
    p.add_argument("--linear", default="best", help="feature choices for the linear tagger: 'best' (the best "
                   "BiLSTM choice), a comma-separated list, or 'none'")
    p.add_argument("--tagger-hidden", type=int, default=128)
    p.add_argument("--tagger-dropout", type=float, default=0.2)
    p.add_argument("--frozen-epochs", type=float, default=1.0)
    p.add_argument("--frozen-lr", type=float, default=1e-2)
    p.add_argument("--linear-lr", type=float, default=1e-2)
    p.add_argument("--frozen-batch-size", type=int, default=32)
    p.add_argument("--max-train-examples", type=int, default=None, help="a seeded subset (quick probes)")
    p.add_argument("--max-eval-examples", type=int, default=None, help="a seeded dev subset (quick probes)")
    p.add_argument("--skip-finetune", action="store_true", help="no fine-tuning row unless OUT/finetune has one")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; "
          f"model {args.model}", flush=True)

    rows: list[tuple[str, str, dict[str, Any]]] = []
    ft_out = args.out / "finetune"
    if not args.skip_finetune or (ft_out / "results.json").is_file():
        ft = run_stage("finetune", ft_out, lambda: finetune_run(
            args, ft_out, {"epochs": 2.0, "batch_size": 16, "lr": 1e-4}, {}))
        rows.append(("fine-tuning (all weights)", "finetune", ft))

    cache = str(args.cache or args.out / "feature_cache")

    def frozen(tagger: str, choice: str, lr: float) -> dict[str, Any]:
        out = args.out / f"{tagger}-{choice}"
        options = {"frozen": True, "frozen_features": choice, "tagger": tagger, "tagger_hidden": args.tagger_hidden,
                   "tagger_dropout": args.tagger_dropout, "feature_cache": cache}
        training = {"epochs": args.frozen_epochs, "batch_size": args.frozen_batch_size, "lr": lr}
        summary = run_stage(f"{tagger} {choice}", out, lambda: finetune_run(args, out, training, options))
        print(f"{tagger} {choice}: {100 * summary['best_metrics']['f1']:.2f} F1", flush=True)
        rows.append((f"frozen, {tagger}", choice, summary))
        return summary

    bilstm = {c: frozen("bilstm", c, args.frozen_lr) for c in args.choices.split(",") if c}
    if args.linear != "none":
        best = max(bilstm, key=lambda c: bilstm[c]["best_metrics"]["f1"]) if bilstm else "concat_last_four"
        for c in ([best] if args.linear == "best" else args.linear.split(",")):
            frozen("linear", c, args.linear_lr)

    print_table(rows, args)
    return 0


def print_table(rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace) -> None:
    """The README table: our dev F1, the gap to fine-tuning, the paper's BERT-base figure, the run's minutes."""
    ft = next((s["best_metrics"]["f1"] for _, c, s in rows if c == "finetune"), None)
    print("\n| approach | features | dev entity F1 | vs fine-tuning | paper, BERT-base | minutes |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for approach, choice, s in rows:
        f1 = 100 * s["best_metrics"]["f1"]
        gap = "" if ft is None or choice == "finetune" else f"{f1 - 100 * ft:+.2f}"
        paper = f"{PAPER[choice]}{PAPER_NOTE.get(choice, '')}" if choice in PAPER and "bilstm" in approach \
            or choice == "finetune" else ""
        label = "-" if choice == "finetune" else choice
        print(f"| {approach} | {label} | {f1:.2f} | {gap} | {paper} | {s['seconds'] / 60:.1f} |")
    frozen = [(100 * s["best_metrics"]["f1"], a, c) for a, c, s in rows if c != "finetune"]
    if ft is not None and frozen:
        best = max(frozen)
        verdict = "met" if 100 * ft - best[0] <= GOAL else "missed"
        print(f"\nbest frozen: {best[1]} {best[2]} {best[0]:.2f} F1, {100 * ft - best[0]:.2f} below fine-tuning "
              f"({100 * ft:.2f}): goal (within {GOAL} F1) {verdict}")
    print(f"frozen runs: tagger hidden {args.tagger_hidden} per direction, dropout {args.tagger_dropout}, "
          f"{args.frozen_epochs} epoch(s), batch {args.frozen_batch_size}, lr {args.frozen_lr} (linear "
          f"{args.linear_lr}); the first frozen run's minutes include encoding the data once", flush=True)


if __name__ == "__main__":
    sys.exit(main())
