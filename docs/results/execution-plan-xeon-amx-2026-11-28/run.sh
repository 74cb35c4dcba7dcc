#!/bin/bash
# The runs of docs/results/execution-plan-xeon-amx-2026-11-28.md, in the order they ran (2026-11-28, 05:35-06:22 UTC).
# BEFORE: a worktree at e9875b6 (the plan's base); AFTER: the same with the plan's changes to src/bertkit (commit
# 5328780's diff of model/, jobs/pretrain.py, inference/encoder.py, training/config.py) and nothing else.
# BENCHMARKS: a copy of benchmarks/ at the plan's commit (make_step imports Bf16Weights from
# bertkit.training.bf16_weights, which both trees have). SHARDS: bench_loader.py's prepared folder, made once by
#   PYTHONPATH=$BEFORE/src:benchmarks python -c "from pathlib import Path; from bench_loader import prepare; \
#     prepare(Path('../shared/data'), Path('/tmp/exec-bench-shards'))"
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
BEFORE=${BEFORE:-/tmp/bk-before} AFTER=${AFTER:-/tmp/bk-after} SHARDS=${SHARDS:-/tmp/exec-bench-shards/shards}
export BENCHMARKS DATA=${DATA:-$HERE/../../../../shared/data}
OUT=${OUT:-/tmp/exec-bench/final}
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
python -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability())"
cd "$HERE"
# One process, both trees, taking turns step by step / chunk by chunk (1 thread):
python two_trees_step.py $BEFORE $AFTER fp32 $SHARDS 8 9 1 $OUT/inprocess-step-fp32.json
python two_trees_step.py $BEFORE $AFTER bf16 $SHARDS 8 9 1 $OUT/inprocess-step-bf16.json
python two_trees_step.py $BEFORE $AFTER bf16 $SHARDS 8 15 1 $OUT/inprocess-step-bf16-long.json
python two_trees_embed.py $BEFORE $AFTER bertkit-mini fp32 600 6 7 $OUT/inprocess-embed-mini-fp32.json
python two_trees_embed.py $BEFORE $AFTER bertkit-mini bf16 600 6 7 $OUT/inprocess-embed-mini-bf16.json
python two_trees_embed.py $BEFORE $AFTER minilm bf16 400 4 5 $OUT/inprocess-embed-minilm-bf16.json
python two_trees_embed.py $BEFORE $AFTER minilm bf16 400 8 7 $OUT/inprocess-embed-minilm-bf16-long.json
# A process per run, the trees in turn (benchmarks/bench_before_after.py, 1 thread):
BA="python $BENCHMARKS/bench_before_after.py --before $BEFORE --after $AFTER --data $DATA"
$BA --workloads step,embed --step-precision fp32 --precision fp32 --step-data $SHARDS --steps 10 --rounds 7 --json $OUT/before-after-fp32.json
$BA --workloads step,embed --step-precision bf16 --precision bf16 --step-data $SHARDS --steps 10 --rounds 7 --json $OUT/before-after-bf16.json
$BA --workloads step --step-precision bf16 --step-data $SHARDS --steps 10 --rounds 7 --json $OUT/before-after-bf16-quiet.json
$BA --workloads step,embed --step-precision fp32 --precision fp32 --step-data $SHARDS --steps 10 --rounds 7 --json $OUT/before-after-fp32-quiet.json
$BA --workloads embed --precision bf16 --rounds 7 --json $OUT/before-after-bf16-embed-quiet.json
$BA --workloads step --step-precision fp32 --step-data $SHARDS --steps 10 --rounds 10 --json $OUT/before-after-fp32-quiet2.json
# (before-after-fp32-earlier.json: the first fp32 run, the same command as before-after-fp32, 04:30 UTC.)
python build_report.py $OUT ../execution-plan-xeon-amx-2026-11-28.json
