"""One pre-training step (forward + backward + AdamW) of bertkit's BertForPreTraining vs transformers' (sdpa).

Same random batches for both: batch 32, length 128 with real lengths drawn from 64..128 (padded to the longest),
15% of real tokens masked, NSP labels; models `mini` (L4 H256 A4) and MiniLM-sized (L6 H384 A12, FFN 1536).
Prints tokens/s (real tokens) of each and the ratio bertkit / transformers last.

    python benchmarks/bench_pretrain_step.py [--steps 8] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

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


def time_steps(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], warmup: int = 2) -> float:
    """Real tokens per second over the batches after `warmup` untimed steps."""
    from bertkit.training.optim import parameter_groups

    model.train()
    # The fused AdamW kernel for both: bertkit's build_optimizer uses it, and so does the transformers Trainer's
    # default optimizer ("adamw_torch_fused" with torch >= 2.8).
    opt = torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, fused=True)

    def step(b: dict[str, torch.Tensor]) -> None:
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for b in batches[:warmup]:
        step(b)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[warmup:])
    start = time.perf_counter()
    for b in batches[warmup:]:
        step(b)
    return tokens / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="timed steps per model (plus 2 warm-up)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--sizes", default="mini,minilm")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    batches = make_batches(a.steps + 2, a.batch_size, a.seq)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {a.batch_size} x seq {a.seq}")
    print(f"{'model':8} {'bertkit tok/s':>14} {'transformers tok/s':>19} {'ratio':>7}")
    for size in a.sizes.split(","):
        rates = {}
        for lib in ("bertkit", "transformers"):
            torch.manual_seed(0)
            rates[lib] = time_steps(build(lib, size), batches)
        print(f"{size:8} {rates['bertkit']:14.0f} {rates['transformers']:19.0f} "
              f"{rates['bertkit'] / rates['transformers']:6.2f}x")


if __name__ == "__main__":
    main()
