# Device call 2 (issue 29): TrainingConfig.compile on the mini recipe at batch 512, end to end.
export PYTHONUNBUFFERED=1
G=.gpu
for run in "default all" "default plain" "reduce-overhead plain"; do
  set -- $run
  x=""; [ $2 = plain ] && x="--sparse_mlm false --unpadded false"
  echo "== compile $1, levers $2"
  timeout 88 python3 -m bertkit pretrain --config configs/bertkit-mini-gpu.yaml --train_data $G/full128 \
    --eval_data $G/wt2test128 --training.output_dir /tmp/mini-$1-$2 --training.max_steps 400 --training.num_workers 4 \
    --training.eval_every 100000 --training.save_every 100000 --training.log_every 50 \
    --training.progress_bar false --training.compile $1 $x 2>&1 | grep -v "^W1\|^  *\^\|^ *$" | tail -4
  cp /tmp/mini-$1-$2/metrics.jsonl $OUT/mini-c$1-$2.jsonl
done
