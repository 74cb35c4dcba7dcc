#!/usr/bin/env bash
# Pre-training that pays off (docs/results/pretraining-ladder-*.md and pretraining-payoff-*.md):
# how the shipped model bertkit-mini is made and
# measured against random initialisation. Every step skips what is already done, so a rerun resumes.
#   1. the task texts: SST-2 and CoNLL-2003 *training* sentences (4 shuffled copies each; never dev or test text)
#   2. an 8,192-piece uncased vocabulary from one Wikipedia file + the task texts + WikiText-2 valid + the novels
#   3. full-sentence seq-128 instances with dynamic masking (Wikipedia slice, task texts, WikiText-2 valid,
#      five Austen novels (Persuasion is held out for the demo's fill-mask), Shakespeare) and WikiText-2 test as
#      the held-out set
#   4. `bertkit pretrain`: RECIPE=cpu (default) runs configs/bertkit-mini.yaml (about 2.5 hours on 2 cores);
#      RECIPE=gpu runs configs/bertkit-mini-gpu.yaml (7 minutes on an H100: the shipped model), whose text is the
#      same plus every file of the Austen folder (Persuasion and its SOURCE.txt too, as that run read them);
#      --resume continues an interrupted run
#   5. SST-2 and CoNLL-2003 from the result and from its random-init twin: benchmarks/pretraining_payoff.py
# Usage: [RECIPE=cpu|gpu] benchmarks/pretraining_payoff.sh [OUT]     (default OUT runs/payoff; DATA=../shared/data)
set -euo pipefail
OUT=${1:-runs/payoff}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${DATA:-$(cd "$ROOT/.." && pwd)/shared/data}
BK="python3 -m bertkit"
mkdir -p "$OUT"
cd "$OUT"
A=$DATA/jane_austen

[ -f corpus/sst2_train.txt ] || python3 "$ROOT/benchmarks/task_text.py" --sst2 "$DATA/sst2/train.tsv" \
  --conll "$DATA/conll2003/train.txt" --copies 4 -o corpus
[ -f raw/enwiki_000.txt ] || { mkdir -p raw; zcat "$DATA/pretraining_corpus/enwiki2014_000.txt.gz" > raw/enwiki_000.txt; }
[ -f tok8k/vocab.txt ] || $BK train-tokenizer --vocab-size 8192 -o tok8k raw/enwiki_000.txt corpus/sst2_train.txt \
  corpus/conll_train.txt "$DATA/wikitext2/valid.txt" "$A"/*.txt "$DATA/tiny_shakespeare/input.txt"
[ -f data/full128/index.json ] || $BK prepare-pretraining "$DATA"/pretraining_corpus/enwiki2014_00*.txt.gz \
  corpus/sst2_train.txt corpus/conll_train.txt "$DATA/wikitext2/valid.txt" \
  "$A"/{emma,mansfieldpark,northangerabbey,prideprejudice,sensesensibility}.txt "$DATA/tiny_shakespeare/input.txt" \
  -o data/full128 --tokenizer tok8k --instances full_sentences --dynamic-masking --dupe-factor 1 --workers 2
[ -f data/wt2test128/index.json ] || $BK prepare-pretraining "$DATA/wikitext2/test.txt" -o data/wt2test128 \
  --tokenizer tok8k --instances full_sentences --dupe-factor 1
case "${RECIPE:-cpu}" in
  cpu) RUN=runs/bertkit-mini ;;
  gpu) RUN=runs/bertkit-mini-gpu
       [ -f data/full128-all/index.json ] || $BK prepare-pretraining "$DATA"/pretraining_corpus/enwiki2014_00*.txt.gz \
         corpus/sst2_train.txt corpus/conll_train.txt "$DATA/wikitext2/valid.txt" "$A"/*.txt \
         "$DATA/tiny_shakespeare/input.txt" -o data/full128-all --tokenizer tok8k --instances full_sentences \
         --dynamic-masking --dupe-factor 1 --workers 2 ;;
  *) echo "RECIPE must be cpu or gpu, not ${RECIPE}" >&2; exit 2 ;;
esac
[ -f $RUN/final/config.json ] || $BK pretrain --config "$ROOT/configs/$(basename $RUN).yaml" --resume

for task in sst2 conll; do
  python3 "$ROOT/benchmarks/pretraining_payoff.py" --task "$task" --start bertkit-mini=$RUN/final \
    --random-twin bertkit-mini --out finetune
done
