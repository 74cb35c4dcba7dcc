#!/usr/bin/env bash
# Pre-training evidence on CPU (issue 3, section 4): a `mini` BERT pre-trained on the shared corpus for at most
# 30 minutes on 2 cores, then fine-tuned on SST-2 next to the same architecture from random initialisation.
#   1. an 8k WordPiece vocabulary from WikiText-2 valid + tiny Shakespeare + Jane Austen (WikiText-2 test held out)
#   2. seq-128 MLM + NSP instances (dynamic masking, dupe factor 3) and a held-out set from WikiText-2 test
#   3. `bertkit pretrain --config configs/pretrain-mini-cpu.yaml` (3,000 steps x 16 sequences)
#   4. SST-2: the same fine-tuning budget from final/ and from random weights, for every seed and every fine-tuning
#      LR in LRS (default "1e-4 3e-4": as in the paper, each start is entitled to its best LR); a table at the end
# Usage: [LRS="1e-4 3e-4"] benchmarks/pretrain_evidence.sh [OUT] [SEEDS...]   (default OUT runs/pretrain_evidence, seed 42)
set -euo pipefail
OUT=${1:-runs/pretrain_evidence}; shift || true
SEEDS=${*:-42}
DATA=${DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
CONFIG=$(cd "$(dirname "$0")/.." && pwd)/configs/pretrain-mini-cpu.yaml
BK="python -m bertkit"
SST2_EXAMPLES=${SST2_EXAMPLES:-8000}
LRS=${LRS:-1e-4 3e-4}
mkdir -p "$OUT"

timed() {  # name, command...: runs it and appends "name seconds" to OUT/timings.txt
  local name=$1; shift
  local t0=$SECONDS
  "$@"
  echo "$name $((SECONDS - t0))" >> "$OUT/timings.txt"
}

[ -f "$OUT/tokenizer/vocab.txt" ] || timed vocabulary $BK train-tokenizer --vocab-size 8000 -o "$OUT/tokenizer" \
  "$DATA/wikitext2/valid.txt" "$DATA/tiny_shakespeare/input.txt" "$DATA"/jane_austen/*.txt
[ -f "$OUT/pt128/index.json" ] || timed prepare $BK prepare-pretraining "$DATA/wikitext2/valid.txt" \
  "$DATA/tiny_shakespeare/input.txt" "$DATA/jane_austen" -o "$OUT/pt128" --tokenizer "$OUT/tokenizer" \
  --max-length 128 --dupe-factor 3 --dynamic-masking --workers 2
[ -f "$OUT/heldout/index.json" ] || timed prepare-heldout $BK prepare-pretraining "$DATA/wikitext2/test.txt" \
  -o "$OUT/heldout" --tokenizer "$OUT/tokenizer" --max-length 128 --dupe-factor 1
[ -f "$OUT/mini/final/config.json" ] || timed pretrain $BK pretrain --config "$CONFIG" --train_data "$OUT/pt128" \
  --eval_data "$OUT/heldout" --training.output_dir "$OUT/mini" --resume

# The baseline: the same architecture and vocabulary with untrained weights.
[ -f "$OUT/random-init/config.json" ] || python - "$OUT" <<'PY'
import sys, torch
from bertkit.model import BertConfig, BertForPreTraining
from bertkit.tokenizer import BertTokenizer
out = sys.argv[1]
torch.manual_seed(0)
BertForPreTraining(BertConfig.load(f"{out}/mini/final")).save_pretrained(f"{out}/random-init")
BertTokenizer.from_pretrained(f"{out}/mini/final").save_pretrained(f"{out}/random-init")
PY

for lr in $LRS; do
  for seed in $SEEDS; do
    for start in pretrained random-init; do
      model=$OUT/mini/final; [ $start = random-init ] && model=$OUT/random-init
      run=$OUT/sst2-$start-lr$lr-seed$seed
      [ -f "$run/results.json" ] || timed "sst2-$start-lr$lr-seed$seed" $BK finetune --task classification \
        --model "$model" --train "$DATA/sst2/train.tsv" --dev "$DATA/sst2/dev.tsv" --output "$run" \
        --max-train-examples "$SST2_EXAMPLES" --epochs 3 --max-length 64 --batch-size 32 --lr "$lr" --seed "$seed" \
        --no-progress
    done
  done
done

python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
evals = [json.loads(l) for l in (out / "mini/metrics.jsonl").read_text().splitlines() if '"eval"' in l]
print("held-out (WikiText-2 test) during pre-training:")
print(f"{'step':>6} {'mlm loss':>9} {'mlm acc':>8} {'nsp acc':>8} {'ppl':>8}")
for r in evals:
    print(f"{r['step']:>6} {r['mlm_loss']:>9.3f} {r['mlm_accuracy']:>8.3f} {r['nsp_accuracy']:>8.3f} {r['perplexity']:>8.1f}")
print("\nSST-2 dev accuracy (best epoch):")
for p in sorted(out.glob("sst2-*/results.json")):
    r = json.loads(p.read_text())
    print(f"  {p.parent.name:36} {r['best_metrics']['accuracy']:.4f}  ({r['train_examples']} examples, {r['seconds']} s)")
print("\ntimings (s):", (out / "timings.txt").read_text().replace("\n", "; "))
PY

# Why random init is a strong start on sentiment: how much of its last-layer attention [CLS] puts on its single
# most-attended token, over the first 200 SST-2 dev sentences (uniform attention over ~25 tokens gives ~0.05).
python - "$OUT" "$DATA/sst2/dev.tsv" <<'PY'
import sys, torch
from bertkit.model import BertModel
from bertkit.tokenizer import BertTokenizer
out, dev = sys.argv[1], sys.argv[2]
texts = [line.split("\t")[0] for line in open(dev, encoding="utf-8").read().splitlines()[1:201]]
print("\n[CLS] attention, last layer, mean over heads and sentences of the largest weight:")
for name in ("mini/final", "random-init"):
    model = BertModel.from_pretrained(f"{out}/{name}").eval()
    batch = BertTokenizer.from_pretrained(f"{out}/{name}")(texts, max_length=64, padding=True).to_tensors()
    with torch.no_grad():
        attentions = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                           output_attentions=True).attentions
    print(f"  {name:12} {attentions[-1][:, :, 0].max(-1).values.mean():.3f}")
PY
