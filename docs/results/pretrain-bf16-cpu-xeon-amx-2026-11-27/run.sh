#!/usr/bin/env bash
# bf16 pre-training on a CPU with bf16 matrix units (avx512_bf16 or amx_bf16 in /proc/cpuinfo): bf16 autocast and
# bf16 weights against float32 on the same CPU, the step and the mini recipe end to end. The measurement of
# docs/results/pretrain-bf16-cpu-xeon-amx-2026-11-27.md (kept beside it) and, with the bf16-weights rows, of
# pretrain-bf16-weights-cpu-xeon-amx-2026-11-27.md. 30-45 minutes on 2 cores. Without those units
# PyTorch emulates bf16 (bertkit-mini's step 32x slower on an AVX2 EPYC), so the script stops unless FORCE=1.
# Usage, from the repository root, with the mini recipe's data (benchmarks/pretrain_evidence.sh makes both):
#   PT=runs/pretrain_evidence/pt128 HELDOUT=runs/pretrain_evidence/heldout \
#     bash docs/results/pretrain-bf16-cpu-xeon-amx-2026-11-27/run.sh [OUT]
# What it measures, each into OUT (default runs/cpu-bf16) as JSON or a log:
#   0. what a new matrix shape costs a bf16 linear layer (benchmarks/bench_gemm_shapes.py);
#   1. the step, each lever and transformers in fp32, under bf16 autocast and on bf16 weights, on fresh batches:
#      the recipe's batches of 16 on 2 and 1 threads, random batches of 32, BERT-base batches of 8 (goals:
#      bertkit-mini 6x transformers, BERT-base 2x);
#   2. the loss curves of a 200-step run in each precision, bf16 weights too (benchmarks/bf16_pretrain_curves.py);
#   3. the recipe's 3,000 steps under bf16 end to end (goal: its 30-minute held-out MLM accuracy, 0.117, in half the
#      time; with the fixed shapes bertkit keeps there), then on bf16 weights; rerun the script to resume them.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the checkout's root
OUT=${1:-runs/cpu-bf16}
: "${PT:?set PT to the prepared training folder of the recipe}" "${HELDOUT:?set HELDOUT to its held-out folder}"
mkdir -p "$OUT"
if ! grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo && [ "${FORCE:-0}" != 1 ]; then
  echo "this CPU has no bf16 matrix units (no avx512_bf16 or amx_bf16): bf16 is emulated here; FORCE=1 runs anyway" >&2
  exit 2
fi
python3 benchmarks/bench_gemm_shapes.py --json "$OUT/gemm-shapes.json"
# --fresh: no batch shape is seen twice, as in training (oneDNN builds a bf16 kernel per new shape); the slot rows
# are the fixed shapes `bertkit pretrain` keeps under bf16 on a CPU (20 slots: the recipe's max_predictions_per_seq)
STEP="python3 benchmarks/bench_pretrain_step.py --bf16 --bf16-weights --fresh"
for threads in 2 1; do
  $STEP --sizes bertkit-mini --data "$PT" --batch-size 16 --steps 8 --rounds 3 --threads $threads \
    --levers "plain,all,+sparse in 20 slots" --json "$OUT/step-mini-real-t$threads.json"
done
$STEP --sizes bertkit-mini --steps 4 --rounds 3 --batch-size 32 --threads 1 --levers "plain,all,+sparse in 40 slots" \
  --json "$OUT/step-mini.json"
$STEP --sizes base --steps 2 --rounds 2 --batch-size 8 --threads 1 --levers "plain,all,+sparse in 40 slots" \
  --json "$OUT/step-base.json"
python3 benchmarks/bf16_pretrain_curves.py --bf16-weights --train-data "$PT" --eval-data "$HELDOUT" \
  --out "$OUT/curves" --json "$OUT/curves.json"
/usr/bin/time -v python3 -m bertkit pretrain --config configs/pretrain-mini-cpu.yaml --train_data "$PT" \
  --eval_data "$HELDOUT" --training.output_dir "$OUT/recipe-bf16" --training.precision bf16 --resume \
  2> >(tee "$OUT/recipe-bf16.time" >&2)
/usr/bin/time -v python3 -m bertkit pretrain --config configs/pretrain-mini-cpu.yaml --train_data "$PT" \
  --eval_data "$HELDOUT" --training.output_dir "$OUT/recipe-bf16-weights" --training.precision bf16 \
  --training.bf16_weights true --resume 2> >(tee "$OUT/recipe-bf16-weights.time" >&2)
