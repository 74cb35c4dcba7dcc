"""Parity of BERT's family with transformers, in one run: DistilBERT, RoBERTa, XLM-R, ALBERT and ELECTRA folders as
transformers' own classes write them, read by bertkit, on real text.

Each family's folder is built without the network (tests/family_models.py): random weights (seeded) of a small
config (hidden 256, 4 layers, 4 heads, intermediate 1024; ALBERT and ELECTRA with a 128-wide factorised embedding,
ALBERT's one shared layer), the family's own tokenizer trained on the shared texts (tests/family_folders.py), one
folder per head class the family has. The batch is the BERT parity batch's texts (the first 32 SST-2 dev sentences
and 16 MRPC dev pairs) tokenized by transformers' tokenizer of the folder, padded to the longest. For every head,
each bertkit execution (unpadded, the default; padded, every position as transformers computes) against each of
transformers' attention implementations (sdpa, eager; the padded plan for the classes built with one, BertModel and
the masked-LM heads): the max abs difference at the real tokens over every hidden
state (the embeddings and each layer) and over each output both compute (the head's logits, the pooled output),
float32. 0 means bit for bit the same; the tests allow 1e-5.

    python3 benchmarks/bench_family_parity.py [--data ../shared/data] [--threads N] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import sys
import tempfile
from pathlib import Path

import torch

from common import DATA, cpu_line

TESTS = Path(__file__).resolve().parents[1] / "tests"
EXECUTIONS = {"unpadded (the default)": True, "padded": False}  # bertkit.model.execution.Execution(unpadded=...)
ATTENTIONS = ("sdpa", "eager")  # transformers' attn_implementation
SIZES = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)


def family_overrides(family: str) -> dict:
    """The benchmark's sizes in the family's config keys (DistilBERT renames them; 128-wide factorised embeddings)."""
    if family == "distilbert":
        return dict(dim=256, n_layers=4, n_heads=4, hidden_dim=1024, max_position_embeddings=512)
    positions = 514 if family in ("roberta", "xlm-roberta") else 512
    extra = {"embedding_size": 128} if family in ("albert", "electra") else {}
    return dict(SIZES, max_position_embeddings=positions, **extra)


def texts(data: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The first 32 SST-2 dev sentences and 16 MRPC dev pairs (tests/model/test_model_parity.py's batch)."""
    with open(data / "sst2" / "dev.tsv", encoding="utf-8") as f:
        sst2 = [row[0].strip() for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:33]]
    with open(data / "mrpc" / "dev.tsv", encoding="utf-8-sig") as f:
        pairs = [(line.split("\t")[3], line.split("\t")[4]) for line in f.read().splitlines()[1:17]]
    return sst2, pairs


def real_batch(folder: Path, data: Path, segments: bool) -> dict[str, torch.Tensor]:
    """The texts tokenized by transformers' tokenizer of the folder: singles and pairs, padded to the longest."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    singles, pairs = texts(data)
    one = tokenizer(singles, padding=True, return_tensors="pt", return_token_type_ids=segments)
    two = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt",
                    return_token_type_ids=segments)  # transformers 5's ALBERT gives them only when asked
    seq = max(one["input_ids"].shape[1], two["input_ids"].shape[1])
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if segments else [])
    pad = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0, "token_type_ids": 0}
    return {k: torch.cat([torch.nn.functional.pad(t[k], (0, seq - t[k].shape[1]), value=pad[k]) for t in (one, two)])
            for k in keys}


def compare(data: Path) -> list[dict]:
    """One row per (family, head, bertkit execution, transformers attention)."""
    import transformers

    sys.path.insert(0, str(TESTS))
    from family_folders import write_tokenizer
    from family_models import heads, max_diffs, write_folder

    from bertkit.model import MODEL_CLASSES
    from bertkit.model.execution import Execution
    from bertkit.model.folder import load_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("distilbert", "roberta", "xlm-roberta", "albert", "electra"):
            batch = None
            for seed, (ours_name, theirs_name) in enumerate(heads(family).items()):
                folder = Path(tmp) / family / theirs_name
                write_folder(family, ours_name, folder, seed=seed, vocab_size=1024, **family_overrides(family))
                write_tokenizer(family, folder, data)
                if batch is None:
                    batch = real_batch(folder, data, segments=family in ("albert", "electra"))
                cls = getattr(transformers, theirs_name)
                for attention in ATTENTIONS:
                    theirs = cls.from_pretrained(folder, attn_implementation=attention).eval()
                    planned = "execution" in inspect.signature(MODEL_CLASSES[ours_name]).parameters
                    for execution, unpadded in EXECUTIONS.items():
                        if not planned and not unpadded:
                            continue  # a task head is built with the default plan only
                        ours = load_model(folder, **({"execution": Execution(unpadded=unpadded)} if planned else {}))
                        diffs = max_diffs(ours, theirs, batch)
                        hidden = max(v for k, v in diffs.items() if k.startswith("hidden_states."))
                        outputs = {k: v for k, v in diffs.items() if not k.startswith("hidden_states.")}
                        rows.append({"family": family, "head": theirs_name, "bertkit_class": ours_name,
                                     "execution": execution, "attention": attention, "worst_hidden_state": hidden,
                                     "outputs": outputs, "max": max(diffs.values()),
                                     "tokens": int(batch["attention_mask"].sum()),
                                     "padding": float(1 - batch["attention_mask"].float().mean())})
                print(f"{family:<12} {theirs_name:<36} max |diff| "
                      f"{max(r['max'] for r in rows if r['head'] == theirs_name):.3g}", flush=True)
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
    families = list(dict.fromkeys(r["family"] for r in rows))
    summary = {f: {"heads": len({r["head"] for r in rows if r["family"] == f}),
                   "max": max(r["max"] for r in rows if r["family"] == f),
                   "worst_hidden_state": max(r["worst_hidden_state"] for r in rows if r["family"] == f),
                   "worst_output": max(max(r["outputs"].values(), default=0.0) for r in rows if r["family"] == f),
                   "exact_rows": sum(r["max"] == 0 for r in rows if r["family"] == f),
                   "rows": sum(r["family"] == f for r in rows)} for f in families}
    print(f"{'family':<12} {'heads':>5} {'worst hidden':>13} {'worst output':>13} {'exact rows':>11}")
    for f, s in summary.items():
        print(f"{f:<12} {s['heads']:>5} {s['worst_hidden_state']:>13.3g} {s['worst_output']:>13.3g} "
              f"{s['exact_rows']:>5}/{s['rows']:<5}")
    within = all(s["max"] <= 1e-5 for s in summary.values())
    print("all within 1e-5" if within else "SOME ABOVE 1e-5")
    if args.json:
        args.json.write_text(json.dumps({
            "command": " ".join(["python3", "benchmarks/bench_family_parity.py",
                                 *(sys.argv[1:] if argv is None else argv)]),
            "cpu": cpu_line(), "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "sizes": SIZES, "summary": summary, "rows": rows,
            "within_1e-5": within}, indent=1) + "\n")
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
