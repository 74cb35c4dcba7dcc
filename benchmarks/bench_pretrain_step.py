"""One pre-training step (forward + backward + AdamW) of bertkit's BertForPreTraining, lever by lever, vs
transformers' (sdpa).

Same batches for all: by default random ones, length 128 with real lengths drawn from 64..128 (padded to the
longest), 15% of real tokens masked, NSP labels; with --data, real ones: instances of a `bertkit prepare-pretraining`
folder in a seeded random order, through the collator `bertkit pretrain` builds with its default settings (padding
to a multiple of 8, dynamic masking), the model's vocabulary the data's. Sizes: `bertkit-mini` (its shape: L4 H256
A4, FFN 1024, vocabulary 8,192), `base` (BERT-base: L12 H768 A12, FFN 3072, vocabulary 30,522), and the earlier
report's `mini` (L4 H256 A4 with vocabulary 30,522) and `minilm` (L6 H384 A12, FFN 1536). bertkit runs once per
lever (common.LEVERS: plain = every position and dense MLM logits, as transformers; +sparse MLM; +sparse last
layer, its last layer only at the masked positions and [CLS] as well; +unpadded; all = the default; the fixed-slot
rows), each its own model from the same initial weights; with --bf16 each row
(transformers too) again under bf16 autocast, as `bertkit pretrain --training.precision bf16` runs it, and with
--bf16-weights each row (transformers too) on a bf16 working copy of its weights with a float32 master copy, as
`--training.bf16_weights true` runs it (bertkit.training.precision.Bf16Weights; as 'ROW, bf16 weights'). The step
functions take turns batch by batch in one process, under the same malloc setting (the one `bertkit pretrain` makes;
--default-malloc: none); a round is one pass over the timed batches (--fresh: each round its own), and each row's
best round counts (the machine is shared). Prints real tokens/s, the ratios to bertkit's plain path and to
transformers, and the speed-up each row's work allows over transformers' (its model FLOPs per real token against the
plain path's, `flops_per_token`).

    python benchmarks/bench_pretrain_step.py [--sizes bertkit-mini,base] [--steps 4] [--rounds 2] [--batch-size 32]
        [--levers plain,all] [--threads N] [--data FOLDER] [--compile] [--bf16] [--bf16-weights] [--fresh]
        [--default-malloc]
        [--profile] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

import torch

from common import LEVERS, cpu_line, lever_plan, make_step

from bertkit.runtime import keep_freed_memory

SIZES = {
    "bertkit-mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                         vocab_size=8192),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                 vocab_size=30522),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                 vocab_size=30522),
    "minilm": dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536,
                   vocab_size=30522),
}
REFERENCE = "transformers"


def make_batches(n: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Random pre-training batches: lengths seq/2..seq, [MASK]-ed 15% of real tokens, NSP labels."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
        width = int(lengths.max())
        ids = torch.randint(1000, vocab, (batch, width), generator=g)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        ids[mask == 0] = 0
        types = (torch.arange(width)[None, :] >= (lengths // 2)[:, None]).long() * mask
        chosen = (torch.rand(batch, width, generator=g) < 0.15) & mask.bool()
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        ids = torch.where(chosen, torch.full_like(ids, 103), ids)
        nsp = torch.randint(0, 2, (batch,), generator=g)
        out.append(dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                        next_sentence_label=nsp))
    return out


def load_batches(folder: Path, n: int, batch: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """n real pre-training batches of a prepared folder, as `bertkit pretrain` builds them (seeded random order)."""
    from bertkit.data import PretrainingDataset
    from bertkit.jobs.pretrain import PretrainConfig, pretraining_collator

    dataset = PretrainingDataset(folder)
    collate = pretraining_collator(dataset, seed, PretrainConfig())  # the job's own collator, default settings
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[: n * batch].tolist()
    if len(order) < n * batch:
        raise SystemExit(f"--data {folder}: {len(dataset)} instances, fewer than {n} batches of {batch}")
    return [collate(dataset.__getitems__(order[i * batch:(i + 1) * batch])) for i in range(n)]


def flops_per_token(shape: dict[str, int], batches: list[dict[str, torch.Tensor]], sparse_mlm: bool,
                    unpadded: bool, mlm_slots: int = 0, sparse_last_layer: bool = False) -> float:
    """Model FLOPs of a training step (forward + backward = 3 x 2 per multiply-add) per real token: the encoder's
    linear layers and the attention products at every position or the real tokens only, the MLM transform and
    decoder at every position, the masked ones or `mlm_slots` per sequence, and with `sparse_last_layer` the last
    layer's keys and values at every token but its queries, output projections and feed-forward block at the
    masked positions and [CLS] only, as many per sequence as the batch's most (embeddings, pooler, NSP and the
    optimizer left out). The ratio of two rows' figures is the speed-up their work allows at equal kernel
    efficiency."""
    L, H, inner, V = (shape[k] for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"))
    layer = 4 * H * H + 2 * H * inner  # multiply-adds of one token's linear layers in one layer
    total = 0.0
    for b in batches:
        lengths = b["attention_mask"].sum(1).double()
        rows, width = b["input_ids"].shape
        tokens = float(lengths.sum()) if unpadded else rows * width
        attended = float((lengths**2).sum()) if unpadded else rows * width * width
        chosen = b["labels"] != -100
        masked = float(chosen.sum())
        predicted = (rows * min(mlm_slots, width) if mlm_slots else masked) if sparse_mlm else rows * width
        total += 6 * (H * H + H * V) * predicted
        if sparse_mlm and sparse_last_layer:  # L - 1 whole layers, then the last one at `read` places per row
            read = min(mlm_slots + 1, width) if mlm_slots else int((chosen.sum(1) + 1).max())
            total += (6 * (L - 1) * layer * tokens + 12 * (L - 1) * H * attended
                      + 6 * 2 * H * H * tokens + 6 * (layer - 2 * H * H) * rows * read + 12 * H * rows * read * width)
        else:
            total += 6 * L * layer * tokens + 12 * L * H * attended
    return total / sum(float(b["attention_mask"].sum()) for b in batches)


COMPILED = ", compiled"  # the suffix of a compiled row's name (--compile)
BF16 = ", bf16"  # the suffix of a row under bf16 autocast (--bf16)
BF16_WEIGHTS = ", bf16 weights"  # the suffix of a row on bf16 weights with a float32 master copy (--bf16-weights)


def lever_work(row: str) -> dict[str, object]:
    """flops_per_token's arguments for a row of the table: its lever's settings (a compiled row does its lever's
    work, and so does a bf16 row); transformers computes what the plain path does."""
    lever = LEVERS.get(row.removesuffix(COMPILED).removesuffix(BF16).removesuffix(BF16_WEIGHTS))
    if lever is None:
        return dict(sparse_mlm=False, unpadded=False)
    return {k: lever.get(k, 0) for k in ("sparse_mlm", "unpadded", "mlm_slots", "sparse_last_layer")}


def build(lib: str, size: str, lever: str = "all") -> torch.nn.Module:
    """A freshly initialised BertForPreTraining of `size`, bertkit's (computing as row `lever` of LEVERS) or
    transformers'."""
    if lib == "bertkit":
        from bertkit.model import BertConfig, BertForPreTraining

        return BertForPreTraining(BertConfig(**SIZES[size]), lever_plan(lever))
    import transformers

    cfg = transformers.BertConfig(**SIZES[size])
    return transformers.BertForPreTraining._from_config(cfg, attn_implementation="sdpa")


def time_interleaved(steps: dict[str, Callable], batches: list[dict[str, torch.Tensor]], warmup: int = 2,
                     rounds: int = 1, fresh: bool = False) -> dict[str, list[float]]:
    """Real tokens per second of each step function, per round. After `warmup` untimed steps each, the step
    functions take turns on every batch, so a change in the machine's speed affects all alike. Every round times
    the same batches, or with `fresh` its own share of them (shapes new to the kernels, as in training)."""
    for step in steps.values():
        for b in batches[:warmup]:
            step(b)
    timed = batches[warmup:]
    per_round = len(timed) // rounds if fresh else len(timed)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        these = timed[r * per_round:(r + 1) * per_round] if fresh else timed
        tokens = sum(int(b["attention_mask"].sum()) for b in these)
        seconds = dict.fromkeys(steps, 0.0)
        for b in these:
            for name, step in steps.items():
                start = time.perf_counter()
                step(b)
                seconds[name] += time.perf_counter() - start
        for name, s in seconds.items():
            rates[name].append(tokens / s)
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4, help="timed steps per round and row (plus 2 warm-up)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data", type=Path, default=None,
                   help="a prepared pre-training folder: its real batches (and vocabulary) instead of random ones")
    p.add_argument("--sizes", default="bertkit-mini,base")
    p.add_argument("--levers", default=",".join(LEVERS), help=f"bertkit's rows, of: {', '.join(LEVERS)}")
    p.add_argument("--compile", action="store_true",
                   help="also each bertkit row through torch.compile (inductor, dynamic shapes), as 'ROW, compiled'; "
                        "it compiles during the warm-up and the first rounds, so give --rounds 2 or more; with --bf16 "
                        "also each bertkit row compiled under bf16 autocast, as 'ROW, bf16, compiled'")
    p.add_argument("--bf16", action="store_true",
                   help="also each row, transformers too, under bf16 autocast, as 'ROW, bf16' (fast on CPUs with "
                        "AVX512-BF16 or AMX, emulated and many times slower elsewhere: the CPU line says which)")
    p.add_argument("--bf16-weights", action="store_true",
                   help="also each row, transformers too, on a bf16 copy of its weights (a float32 master copy for "
                        "AdamW) under bf16 autocast, as 'ROW, bf16 weights' (same CPU caveat as --bf16)")
    p.add_argument("--profile", action="store_true",
                   help="afterwards, torch.profiler's top ops over two steps of bertkit's last row (its bf16 "
                        "row with --bf16, its bf16-weights row with --bf16-weights), last size")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc malloc as it is instead of bertkit's training setting (for both libraries)")
    p.add_argument("--fresh", action="store_true",
                   help="each round its own batches instead of the same ones again: no batch shape is seen twice, "
                        "as in training (under bf16 on a CPU oneDNN builds a kernel per new shape, which repeated "
                        "batches hide)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    levers = a.levers.split(",")
    unknown = sorted(set(levers) - set(LEVERS))
    if unknown:
        raise SystemExit(f"--levers: unknown {', '.join(unknown)}; choose from {', '.join(LEVERS)}")
    # The setting `bertkit pretrain` makes (bertkit.runtime): one process, so both libraries run under it.
    malloc = "glibc default" if a.default_malloc or not keep_freed_memory() else "freed memory kept (bertkit.runtime)"
    print(cpu_line())
    print(f"{torch.get_num_threads()} threads, batch {a.batch_size} x seq {a.seq}, malloc: {malloc}, "
          f"{a.rounds} rounds of {a.steps} steps, best round")
    report = {"cpu": cpu_line(), "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "batch_size": a.batch_size, "seq": a.seq, "malloc": malloc,
              "steps": a.steps, "rounds": a.rounds, "fresh": a.fresh, "data": str(a.data) if a.data else "random",
              "sizes": {}}
    steps: dict[str, Callable] = {}
    for size in a.sizes.split(","):
        if a.data:
            from bertkit.data import PretrainingDataset

            SIZES[size] = {**SIZES[size], "vocab_size": PretrainingDataset(a.data).vocab_info().vocab_size}
            batches = load_batches(a.data, a.steps * (a.rounds if a.fresh else 1) + 2, a.batch_size)
        else:
            batches = make_batches(a.steps * (a.rounds if a.fresh else 1) + 2, a.batch_size, a.seq,
                                   SIZES[size]["vocab_size"])
        steps = {}
        for lever in levers:
            torch.manual_seed(0)
            steps[lever] = make_step(build("bertkit", size, lever))
        for lever in levers if a.compile else []:
            torch.manual_seed(0)
            model = build("bertkit", size, lever)
            model.compile(dynamic=True)
            steps[f"{lever}{COMPILED}"] = make_step(model)
        for lever in levers if a.bf16 else []:
            torch.manual_seed(0)
            steps[f"{lever}{BF16}"] = make_step(build("bertkit", size, lever), autocast_device="cpu")
        for lever in levers if a.bf16 and a.compile else []:
            torch.manual_seed(0)
            model = build("bertkit", size, lever)
            model.compile(dynamic=True)
            steps[f"{lever}{BF16}{COMPILED}"] = make_step(model, autocast_device="cpu")
        for lever in levers if a.bf16_weights else []:
            torch.manual_seed(0)
            steps[f"{lever}{BF16_WEIGHTS}"] = make_step(build("bertkit", size, lever), autocast_device="cpu",
                                                        bf16_weights=True)
        torch.manual_seed(0)
        steps[REFERENCE] = make_step(build("transformers", size))
        if a.bf16:
            torch.manual_seed(0)
            steps[f"{REFERENCE}{BF16}"] = make_step(build("transformers", size), autocast_device="cpu")
        if a.bf16_weights:
            torch.manual_seed(0)
            steps[f"{REFERENCE}{BF16_WEIGHTS}"] = make_step(build("transformers", size), autocast_device="cpu",
                                                            bf16_weights=True)
        rates = time_interleaved(steps, batches, rounds=a.rounds, fresh=a.fresh)
        best = {name: max(r) for name, r in rates.items()}
        plain = best.get("plain")
        work = {name: flops_per_token(SIZES[size], batches[2:], **lever_work(name)) for name in steps}
        print(f"\n{size} ({', '.join(f'{k}={v}' for k, v in SIZES[size].items())})")
        print(f"{'row':38} {'tok/s':>9} {'rounds':>17} {'MFLOP/tok':>10} {'/ plain':>8} {'/ transformers':>15} "
              f"{'work allows':>12}")
        for name, r in rates.items():
            vs_plain = f"{best[name] / plain:7.2f}x" if plain else ""
            print(f"{name:38} {best[name]:9.0f} {' '.join(f'{x:.0f}' for x in r):>17} {work[name] / 1e6:10.1f} "
                  f"{vs_plain:>8} {best[name] / best[REFERENCE]:14.2f}x {work[REFERENCE] / work[name]:11.2f}x")
        report["sizes"][size] = {"shape": SIZES[size], "rounds": rates, "best": best, "flops_per_token": work}
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        profiled = levers[-1] + (BF16_WEIGHTS if a.bf16_weights else BF16 if a.bf16 else "")
        step = steps[profiled]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in batches[:2]:
                step(b)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        linear = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm"))
        print(f"\nwhere the bertkit {size} step ({profiled}) spends its time (torch.profiler, self CPU time): "
              f"{linear / total:.0%} in matrix products of the linear layers (aten::mm, aten::addmm)")
        print(events.table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
