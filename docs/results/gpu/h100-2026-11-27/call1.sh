# Device call 1 (issue 29): the levers on a GPU, eager and compiled, and the mini recipe end to end.
export PYTHONUNBUFFERED=1
G=.gpu
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
S="python3 benchmarks/gpu_suite.py --sections pretrain --data $G --minilm $G/minilm"
timeout 120 $S --pretrain-batch 256 --levers "plain,+sparse MLM,+unpadded,all,all+jagged" --out $OUT/pre256.json
for run in "all 4" "all 0" "plain 4"; do
  set -- $run
  x=""; [ $1 = plain ] && x="--sparse_mlm false --unpadded false"
  timeout 75 python3 -m bertkit pretrain --config configs/bertkit-mini-gpu.yaml --train_data $G/full128 \
    --eval_data $G/wt2test128 --training.output_dir /tmp/mini-$1-w$2 --training.max_steps 300 \
    --training.num_workers $2 --training.eval_every 100000 --training.save_every 100000 --training.log_every 50 \
    --training.progress_bar false $x 2>&1 | tail -3
  cp /tmp/mini-$1-w$2/metrics.jsonl $OUT/mini-$1-w$2.jsonl
done
timeout 260 $S --pretrain-batch 256 --compile --levers "plain" --out $OUT/pre256c.json 2>&1 | grep -v "^W1\|^  *\^\|^ *$"
