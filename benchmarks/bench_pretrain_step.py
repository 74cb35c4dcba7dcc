"""One pre-training step (forward + backward + AdamW) of bertkit's BertForPreTraining vs transformers' (sdpa).

Same random batches for both: batch 32, length 128 with real lengths drawn from 64..128 (padded to the longest),
15% of real tokens masked, NSP labels; models `mini` (L4 H256 A4) and MiniLM-sized (L6 H384 A12, FFN 1536).
Prints tokens/s (real tokens) of each and the ratio bertkit / transformers last. The two take turns batch by
batch, in one process under the same malloc setting (the one `bertkit pretrain` makes; --default-malloc: none).

    python benchmarks/bench_pretrain_step.py [--steps 8] [--threads N] [--default-malloc] [--profile]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch

from common import make_step

from bertkit.runtime import keep_freed_memory

SIZES = {
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "minilm": dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536),
}
VOCAB = 30522


def make_batches(n: int, batch: int, seq: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Random pre-training batches: lengths 64..seq, [MASK]-ed 15% of real tokens, NSP labels."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
        width = int(lengths.max())
        ids = torch.randint(1000, VOCAB, (batch, width), generator=g)
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


def build(lib: str, size: str) -> torch.nn.Module:
    if lib == "bertkit":
        from bertkit.model import BertConfig, BertForPreTraining

        return BertForPreTraining(BertConfig(vocab_size=VOCAB, **SIZES[size]))
    import transformers

    cfg = transformers.BertConfig(vocab_size=VOCAB, **SIZES[size])
    return transformers.BertForPreTraining._from_config(cfg, attn_implementation="sdpa")


def time_interleaved(steps: dict[str, Callable], batches: list[dict[str, torch.Tensor]], warmup: int = 2) -> dict:
    """Real tokens per second of each step function. After `warmup` untimed steps each, the libraries take turns
    on every batch, so a change in the machine's speed during the run affects both alike."""
    for step in steps.values():
        for b in batches[:warmup]:
            step(b)
    seconds = dict.fromkeys(steps, 0.0)
    for b in batches[warmup:]:
        for name, step in steps.items():
            start = time.perf_counter()
            step(b)
            seconds[name] += time.perf_counter() - start
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[warmup:])
    return {name: tokens / s for name, s in seconds.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="timed steps per model (plus 2 warm-up)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--sizes", default="mini,minilm")
    p.add_argument("--profile", action="store_true",
                   help="afterwards, torch.profiler's top ops over two bertkit steps of the last size")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc malloc as it is instead of bertkit's training setting (for both libraries)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    # The setting `bertkit pretrain` makes (bertkit.runtime): one process, so both libraries run under it.
    malloc = "glibc default" if a.default_malloc or not keep_freed_memory() else "freed memory kept (bertkit.runtime)"
    batches = make_batches(a.steps + 2, a.batch_size, a.seq)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {a.batch_size} x seq {a.seq}, "
          f"malloc: {malloc}")
    print(f"{'model':8} {'bertkit tok/s':>14} {'transformers tok/s':>19} {'ratio':>7}")
    for size in a.sizes.split(","):
        steps = {}
        for lib in ("bertkit", "transformers"):
            torch.manual_seed(0)
            steps[lib] = make_step(build(lib, size))
        rates = time_interleaved(steps, batches)
        print(f"{size:8} {rates['bertkit']:14.0f} {rates['transformers']:19.0f} "
              f"{rates['bertkit'] / rates['transformers']:6.2f}x")
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in batches[:2]:
                steps["bertkit"](b)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        linear = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm"))
        print(f"\nwhere the bertkit {size} step spends its time (torch.profiler, self CPU time): "
              f"{linear / total:.0%} in matrix products of the linear layers (aten::mm, aten::addmm)")
        print(events.table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
