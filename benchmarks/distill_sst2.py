"""Distillation on SST-2: all-MiniLM-L6-v2 fine-tuned (the teacher, 6 layers) distilled into 3 of its layers.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/distill_sst2.py [--out runs/distill_sst2] [--threads 1]

Stages, each skipped when its folder already holds results.json (a rerun only re-evaluates and re-times):
  1. teacher:  MiniLM fine-tuned on --teacher-examples SST-2 training sentences (1 epoch, batch 32, lr 1e-4, length 64)
  2. student:  `bertkit distill` of the teacher into its layers 0, 2, 4 (DistilBERT's every other layer) on
               --transfer-examples training sentences (a seeded sample of the same file: the teacher's own training
               text and more), 1 epoch, batch 32, lr 1e-4, T 2, alpha_ce = alpha_hard = alpha_cos = 1
  3. baseline: the same student init trained on the same sentences with the same budget, hard loss only
               (alpha_ce = alpha_cos = 0: no teacher), to show what distillation adds
Then dev accuracy of each (`bertkit evaluate`'s numbers) and the share of the teacher's the student retains (goal:
>= 97%), and sentences/s of classification (tokenize + forward + decode: Task.predict) and of embedding
(Encoder.encode, fp32, mean pooling) of the dev sentences: teacher and student timed alternately in this one run at
the same threads, the median of --repeats each.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from common import minilm_dir, run_stage

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "sst2"
GOAL = 0.97  # accuracy retained by the 3-layer student, as a share of the teacher's
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_summary() -> str:
    """The CPU, its SIMD/matrix flags that matter to torch (bertkit.runtime.cpu_flags), torch's CPU capability."""
    from bertkit.runtime import cpu_flags

    have = [f for f in CPU_FLAGS if f in cpu_flags()]
    return (f"CPU: {platform.processor() or platform.machine()}; "
            f"flags: {' '.join(have) or 'none of ' + ', '.join(CPU_FLAGS)}; "
            f"torch.backends.cpu.get_cpu_capability(): {torch.backends.cpu.get_cpu_capability()}; "
            f"torch threads: {torch.get_num_threads()}")


def train_teacher(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from bertkit.jobs.finetune import FinetuneConfig, finetune, finetune_training
    from bertkit.tasks import get_task

    training = finetune_training(get_task("classification"), dict(
        output_dir=str(out), epochs=1.0, batch_size=32, lr=1e-4, progress_bar=False))
    return finetune(FinetuneConfig(task="classification", model=minilm_dir(), train=str(args.data / "train.tsv"),
                                   dev=str(args.data / "dev.tsv"), options={"max_length": 64},
                                   max_train_examples=args.teacher_examples, training=training))


def train_student(args: argparse.Namespace, teacher: Path, out: Path, distil: bool) -> dict[str, Any]:
    from bertkit.jobs import distill
    from bertkit.jobs.distill import DistillConfig

    config = DistillConfig.from_dict(dict(
        teacher=str(teacher), train=str(args.data / "train.tsv"), dev=str(args.data / "dev.tsv"), student_layers=3,
        max_train_examples=args.transfer_examples, temperature=2.0,
        **({} if distil else {"alpha_ce": 0.0, "alpha_cos": 0.0}),
        training=dict(output_dir=str(out), epochs=1.0, batch_size=32, lr=1e-4, progress_bar=False)))
    return distill.run(config)


def median_rate(n: int, times: list[float]) -> float:
    return n / statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "distill_sst2")
    parser.add_argument("--data", type=Path, default=DATA, help="folder with SST-2 train.tsv and dev.tsv")
    parser.add_argument("--teacher-examples", type=int, default=20_000)
    parser.add_argument("--transfer-examples", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for training and timing")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the dev set per model")
    parser.add_argument("--skip-baseline", action="store_true", help="leave out the no-distillation student")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(cpu_summary(), flush=True)

    from bertkit.inference.encoder import Encoder
    from bertkit.jobs import evaluate
    from bertkit.jobs.finetune import _load_finetuned
    from bertkit.tasks.base import predict

    teacher_dir, student_dir, baseline_dir = (args.out / n for n in ("teacher", "student", "baseline"))
    run_stage("teacher", teacher_dir, lambda: train_teacher(args, teacher_dir))
    run_stage("student (distilled)", student_dir, lambda: train_student(args, teacher_dir / "best", student_dir, True))
    if not args.skip_baseline:
        run_stage("student (no teacher)", baseline_dir,
                  lambda: train_student(args, teacher_dir / "best", baseline_dir, False))

    rows = [("teacher", teacher_dir), ("student, distilled", student_dir)]
    if not args.skip_baseline:
        rows.append(("student, no teacher", baseline_dir))
    dev = str(args.data / "dev.tsv")
    accuracy = {name: evaluate.run(evaluate.EvaluateConfig(str(d / "best"), dev))["accuracy"] for name, d in rows}

    # Speed: the teacher and the distilled student, alternately, on the dev sentences.
    timed = rows[:2]
    loaded = {name: _load_finetuned(str(d / "best")) for name, d in timed}
    encoders = {name: Encoder(str(d / "best"), precision="fp32", max_length=64) for name, d in timed}
    task, settings, _, _ = loaded["teacher"]
    examples = task.read(dev, settings, labelled=False)
    texts = [ex.text for ex in examples]
    classify = {name: [] for name, _ in timed}
    embed = {name: [] for name, _ in timed}
    for rep in range(args.repeats + 1):  # the first pass warms up and is not counted
        for name, _ in timed:
            t, s, net, tok = loaded[name]
            start = time.perf_counter()
            predict(t, net, examples, t.features(examples, tok, s, training=False), s, 64, tok)
            elapsed = time.perf_counter() - start
            start = time.perf_counter()
            encoders[name].encode(texts, batch_size=64)
            elapsed_embed = time.perf_counter() - start
            if rep:
                classify[name].append(elapsed)
                embed[name].append(elapsed_embed)

    n = len(texts)
    teacher_acc = accuracy["teacher"]
    print(f"\nSST-2 dev ({n} sentences); speeds: median of {args.repeats} passes, {torch.get_num_threads()} thread(s), "
          "fp32, tokenization included")
    print(f"{'model':<22}{'layers':>7}{'dev acc':>9}{'of teacher':>12}{'classify/s':>12}{'embed/s':>10}")
    for name, d in rows:
        layers = loaded[name][2].config.num_hidden_layers if name in loaded else 3
        c = f"{median_rate(n, classify[name]):.0f}" if name in classify else "-"
        e = f"{median_rate(n, embed[name]):.0f}" if name in embed else "-"
        print(f"{name:<22}{layers:>7}{100 * accuracy[name]:>9.2f}{100 * accuracy[name] / teacher_acc:>11.1f}%"
              f"{c:>12}{e:>10}")
    retained = accuracy["student, distilled"] / teacher_acc
    speed_c = median_rate(n, classify["student, distilled"]) / median_rate(n, classify["teacher"])
    speed_e = median_rate(n, embed["student, distilled"]) / median_rate(n, embed["teacher"])
    verdict = "met" if retained >= GOAL else "MISSED"
    print(f"\naccuracy retained {100 * retained:.1f}% (goal >= {100 * GOAL:.0f}%: {verdict}); "
          f"student speed-up: classification {speed_c:.2f}x, embedding {speed_e:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
