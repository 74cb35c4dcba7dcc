"""Verbs `finetune`, `evaluate`, `predict`: thin argparse mirrors of bertkit.tasks.runner's functions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bertkit.tasks import TASKS


def _add_finetune(sub: Any) -> None:
    p = sub.add_parser("finetune", help="fine-tune a pre-trained model on a task (classification, ner, qa, ...)",
                       description="Fine-tune MODEL on TRAIN, evaluating on DEV every epoch (or --eval-every N "
                       "steps); the best model by the task's main metric is kept in OUTPUT/best.")
    p.add_argument("--task", required=True, choices=list(TASKS), help="the task")
    p.add_argument("--model", required=True, help="pre-trained (or fine-tuned) model folder")
    p.add_argument("--train", required=True, help="training file (QA: FILE#START:END selects articles)")
    p.add_argument("--dev", required=True, help="dev file, evaluated during training")
    p.add_argument("--output", required=True, help="output folder (best/, final/, checkpoints/, metrics.jsonl)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: 3e-5; NER and QA 5e-5)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=None, help="word pieces per sequence (default 128; QA 384)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up: fraction of steps (<1) or steps (>=1)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps (default: every epoch)")
    p.add_argument("--max-train-examples", type=int, default=None, help="a seeded random subset of TRAIN")
    p.add_argument("--max-eval-examples", type=int, default=None, help="a seeded random subset of DEV")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT's latest checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    g = p.add_argument_group("classification")
    g.add_argument("--text-column", default=None, help="header name or 0-based index of the text")
    g.add_argument("--text-pair-column", default=None, help="... of the second text of a pair")
    g.add_argument("--label-column", default=None, help="... of the label")
    g.add_argument("--glue", default=None, help="GLUE task name when the file's layout is ambiguous (e.g. cola)")
    g.add_argument("--regression", action="store_true", help="real-valued labels (STS-B)")
    g.add_argument("--multi-label", action="store_true", help="several labels per example")
    g = p.add_argument_group("question answering")
    g.add_argument("--doc-stride", type=int, default=None, help="overlap in tokens between context windows (128)")
    g.add_argument("--version-2", action="store_true", help="SQuAD v2.0: allow no answer")
    g.add_argument("--null-threshold", type=float, default=0.0, help="v2.0: answer '' if null - best > this")
    p.set_defaults(func=_finetune)


def _finetune(args: argparse.Namespace) -> int:
    from bertkit.tasks.runner import finetune, format_metrics

    keys = ("task", "model", "train", "dev", "output", "epochs", "lr", "batch_size", "eval_batch_size", "max_length",
            "seed", "warmup", "weight_decay", "max_grad_norm", "eval_every", "max_train_examples",
            "max_eval_examples", "precision", "resume", "progress", "text_column", "text_pair_column",
            "label_column", "glue", "regression", "multi_label", "doc_stride", "version_2", "null_threshold")
    summary = finetune(**{k: getattr(args, k) for k in keys})
    print(f"best ({summary['main_metric']}): {format_metrics(summary['best_metrics'] or {})}")
    print(f"model: {summary['best_dir']}  ({summary['train_examples']} training examples, "
          f"{summary['seconds']:.0f} s)")
    return 0


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="score a fine-tuned model on a labelled file",
                       description="Evaluate a fine-tuned model folder on INPUT with its task's metrics.")
    p.add_argument("--model", required=True, help="fine-tuned model folder (e.g. OUTPUT/best)")
    p.add_argument("--input", required=True, help="labelled file in the task's format")
    p.add_argument("--output", default=None, help="write the metrics here as JSON (always printed)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-examples", type=int, default=None)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from bertkit.tasks.runner import dumps, evaluate

    metrics = evaluate(args.model, args.input, args.output, args.batch_size, args.max_examples)
    print(dumps(metrics))
    return 0


def _add_predict(sub: Any) -> None:
    p = sub.add_parser("predict", help="write a fine-tuned model's predictions for a file",
                       description="Predict with a fine-tuned model: classification -> the input TSV plus a "
                       "prediction column; ner -> token<TAB>tag lines; qa -> {id: answer} JSON; multiple-choice "
                       "-> JSON lines.")
    p.add_argument("--model", required=True, help="fine-tuned model folder")
    p.add_argument("--input", required=True, help="file in the task's format (labels not needed)")
    p.add_argument("--output", required=True, help="predictions file (written atomically)")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=_predict)


def _predict(args: argparse.Namespace) -> int:
    from bertkit.tasks.runner import predict

    n = predict(args.model, args.input, args.output, args.batch_size)
    print(f"{n} predictions -> {args.output}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add the fine-tuning verbs to the `bertkit` parser."""
    _add_finetune(subparsers)
    _add_evaluate(subparsers)
    _add_predict(subparsers)
