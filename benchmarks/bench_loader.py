"""Tokens/s of one process building dynamically masked pre-training batches from real shards: bertkit's loader
(the DataLoader's batched read + whole-batch masking) against the collator it replaced (an item at a time, masks
drawn token by token in Python: `legacy_collate`, the code of commit ca5ad5c), batch by batch in turn.

The shards are `bertkit prepare-pretraining` output (sentence pairs, length 128, dynamic masking) of WikiText-2
valid, tiny Shakespeare and the Austen novels with bertkit-mini's tokenizer in 84 shards, made once into --work;
--shards names another prepared folder. The batches are an epoch's shuffled order, as the trainer reads it. Rounds
alternate the loaders; the best round of each counts (the machine is shared). Real tokens (no padding) per second.
glibc malloc keeps freed memory (`bertkit.runtime.keep_freed_memory`), as in `bertkit pretrain`, whose loader builds
its batches in the training process or in DataLoader workers forked from it; --default-malloc leaves malloc's
defaults (every batch's large arrays then come from fresh, page-faulting mappings).

    python3 benchmarks/bench_loader.py [--batch-size 256] [--rounds 5] [--batches 40] [--whole-word]
                                       [--shards FOLDER] [--work DIR] [--default-malloc] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from common import cpu_line

ROOT = Path(__file__).resolve().parents[1]


def prepare(data: Path, work: Path) -> Path:
    """The benchmark's shards (prepared once into work/shards)."""
    from bertkit.data import PretrainingDataConfig, prepare_pretraining
    from bertkit.tokenizer import BertTokenizer

    out = work / "shards"
    if not (out / "index.json").is_file():
        files = [data / "wikitext2" / "valid.txt", data / "tiny_shakespeare" / "input.txt", data / "jane_austen"]
        # 4 documents per shard: 84 shards, so a batch meets about as many shards as one of a large corpus does
        # (prepare's default shards of ~4 M tokens: the shared 53 M-word corpus at dupe_factor 5 makes ~90)
        config = PretrainingDataConfig(max_length=128, dupe_factor=1, dynamic_masking=True, chunk_documents=4)
        prepare_pretraining(files, out, BertTokenizer.from_pretrained("bertkit-mini"), config, workers=2)
    return out


def epoch_loader(folder: Path, whole_word: bool, batch_size: int) -> tuple[Any, Any, list[list[int]]]:
    """What the benchmarks time: the dataset of `folder`, bertkit's dynamic-masking collator (seed 0, widths padded
    to multiples of 8) and an epoch's shuffled batches of dataset indices, as the trainer reads them."""
    from bertkit.data import PretrainingDataset
    from bertkit.data.collate import PretrainingCollator

    ds = PretrainingDataset(folder)
    config = dataclasses.replace(ds.config, whole_word_mask=whole_word)
    collate = PretrainingCollator(ds.vocab_info(), dynamic_masking=True, config=config, seed=0, pad_to_multiple_of=8)
    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i : i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
    return ds, collate, batches


def legacy_collate(collator: Any) -> Callable[[Sequence[Mapping[str, Any]]], dict[str, torch.Tensor]]:
    """The replaced dynamic-masking collator's loop (commit ca5ad5c), kept here as the reference: per item, a
    `random.Random` from sha256(seed, epoch, index) and `mask_tokens` over the item's token list."""
    import hashlib

    from bertkit.data.pretraining import mask_tokens

    def instance_rng(seed: int, epoch: int, index: int) -> random.Random:
        digest = hashlib.sha256(f"bertkit-dynamic-mask:{seed}:{epoch}:{index}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "little"))

    def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(x["input_ids"]) for x in items)
        m = collator.pad_to_multiple_of
        width = -(-longest // m) * m if m else longest
        batch = len(items)
        input_ids = torch.full((batch, width), collator.vocab.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((batch, width), dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        nsp = torch.empty(batch, dtype=torch.long)
        for b, item in enumerate(items):
            ids = torch.as_tensor(item["input_ids"], dtype=torch.long)
            n = len(ids)
            rng = instance_rng(collator.seed, collator.epoch, int(item["index"]))
            masked, positions, originals = mask_tokens(ids.tolist(), collator.vocab, rng,
                                                       **collator.config.mask_options())
            input_ids[b, :n] = torch.tensor(masked, dtype=torch.long)
            labels[b, positions] = torch.tensor(originals, dtype=torch.long)
            token_type_ids[b, :n] = torch.as_tensor(item["token_type_ids"], dtype=torch.long)
            attention_mask[b, :n] = 1
            nsp[b] = int(item["next_sentence_label"])
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
                "labels": labels, "next_sentence_label": nsp}

    return collate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="the shared data folder")
    p.add_argument("--shards", type=Path, default=None, help="a prepared folder to read instead of making one")
    p.add_argument("--work", type=Path, default=Path("/tmp/bertkit-bench-loader-84"))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5, help="rounds, each timing both loaders")
    p.add_argument("--batches", type=int, default=40, help="batches per round for bertkit's loader")
    p.add_argument("--legacy-batches", type=int, default=3, help="batches per round for the replaced collator")
    p.add_argument("--whole-word", action="store_true", help="whole-word masking for both")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the loader's arrays are numpy's)")
    p.add_argument("--default-malloc", action="store_true", help="leave glibc malloc's defaults alone")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from bertkit.runtime import keep_freed_memory

    if a.default_malloc:
        os.environ["BERTKIT_MALLOC"] = "default"
    kept = keep_freed_memory()

    folder = a.shards or prepare(a.data, a.work)
    ds, collate, batches = epoch_loader(folder, a.whole_word, a.batch_size)
    legacy = legacy_collate(collate)
    print(cpu_line())
    print(f"data: {folder} ({len(ds):,} instances, {ds.index['num_tokens']:,} tokens), batch {a.batch_size}, "
          f"whole-word masking {'on' if a.whole_word else 'off'}, torch threads {torch.get_num_threads()}, "
          f"malloc {'keeps freed memory' if kept else 'defaults'}")

    loaders = {
        "bertkit": (lambda b: collate(ds.__getitems__(b)), a.batches),
        "legacy": (lambda b: legacy([ds[i] for i in b]), a.legacy_batches),
    }
    same = [(k, collate(ds.__getitems__(batches[0]))[k], legacy([ds[i] for i in batches[0]])[k])
            for k in ("token_type_ids", "attention_mask", "next_sentence_label")]
    assert all(torch.equal(x, y) for _, x, y in same), "the two loaders disagree on the batch's layout"
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    cursor = 0
    for _ in range(a.rounds):
        for name, (load, count) in loaders.items():
            chosen = [batches[(cursor + i) % len(batches)] for i in range(count)]
            tokens = 0
            start = time.perf_counter()
            for b in chosen:
                tokens += int(load(b)["attention_mask"].sum())
            rates[name].append(tokens / (time.perf_counter() - start))
        cursor += a.batches
    best = {name: max(r) for name, r in rates.items()}
    print(f"{'loader':10} {'best tok/s':>14} {'rounds (M tok/s)':>40}")
    for name, r in rates.items():
        print(f"{name:10} {best[name]:14,.0f}   {' '.join(f'{x / 1e6:.2f}' for x in r):>38}")
    ratio = best["bertkit"] / best["legacy"]
    print(f"bertkit / legacy: {ratio:.1f}x; goal >= 10 M tok/s: {'met' if best['bertkit'] >= 10e6 else 'NOT met'}")
    if a.json:
        from bertkit.runtime import cpu_flags

        a.json.write_text(json.dumps({
            "cpu": cpu_line(), "cpu_flags": sorted(cpu_flags()), "torch": torch.__version__,
            "capability": torch.backends.cpu.get_cpu_capability(), "data": str(folder),
            "instances": len(ds), "batch_size": a.batch_size, "whole_word_mask": a.whole_word,
            "malloc_keeps_freed_memory": kept,
            "rounds": rates, "best": best, "ratio": ratio,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
