"""The two CPU-level levers of bertkit's training step and embedding batches, each against what it replaces.

1. Dropout on a (32, 12, 128, 128) attention-probability tensor: torch's F.dropout (one random float per element)
   vs bertkit.model.kernels.dropout (16 random bits per element).
2. malloc (bertkit.runtime.keep_freed_memory): a (462, 30522) masked-LM cross-entropy forward + backward, the
   zeroing of a (30522, 384) gradient, and two operations of an 8192-token MiniLM embedding batch (scaling a
   (8192, 1536) activation per channel; the int8 product of a first feed-forward layer, (8192, 384) x (384, 1536)),
   each in a fresh process with glibc's default and with freed memory kept.
3. The float32 GEMM rate on MiniLM's embedding-batch shapes (8192 tokens): torch.addmm (MKL) against oneDNN's
   linear on prepacked weights (what inductor's freezing uses), in GFLOP/s: the compute wall of float32 inference.

    python benchmarks/bench_cpu_levers.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F


def mean_ms(fn: Callable[[], object], repeat: int) -> float:
    """Mean milliseconds per call over `repeat` calls, after two warm-up calls."""
    fn(), fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1000


def allocation_heavy(repeat: int) -> dict[str, float]:
    """Run in a child process: allocation-heavy operations of a pre-training step and of an embedding batch."""
    from bertkit.inference.quantize import int8_weight

    torch.manual_seed(0)
    logits = torch.randn(462, 30522, requires_grad=True)
    labels = torch.randint(0, 30522, (462,))
    activation, scale = torch.randn(8192, 1536), torch.rand(1536)
    hidden, weight = torch.randn(8192, 384), torch.randn(1536, 384)
    packed = torch.ops.quantized.linear_prepack(int8_weight(weight), torch.zeros(1536))  # as bertkit's int8 packs it
    int8 = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32
    return {
        "cross-entropy fwd+bwd (462 x 30522)": mean_ms(lambda: F.cross_entropy(logits, labels).backward(), repeat),
        "zeros (30522 x 384)": mean_ms(lambda: torch.zeros(30522, 384), repeat),
        "per-channel scaling (8192 x 1536)": mean_ms(lambda: activation * scale, repeat),
        "int8 product (8192 x 384) x (384 x 1536)": mean_ms(lambda: int8(hidden, 0.05, 128, packed), repeat),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--child", choices=["default", "kept"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        if a.child == "kept":
            from bertkit.runtime import keep_freed_memory

            assert keep_freed_memory(), "the malloc setting did not apply"
        print(json.dumps(allocation_heavy(a.repeat)))
        return

    from bertkit.model.kernels import dropout

    from bertkit.runtime import keep_freed_memory

    keep_freed_memory()  # as the Encoder does; the malloc comparison below runs in child processes
    print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    probs = torch.rand(32, 12, 128, 128)
    torch_ms = mean_ms(lambda: F.dropout(probs, 0.1, True), a.repeat)
    ours_ms = mean_ms(lambda: dropout(probs, 0.1), a.repeat)
    print(f"{'operation':54} {'before ms':>10} {'bertkit ms':>11} {'ratio':>7}")
    print(f"{'dropout p=0.1 on (32, 12, 128, 128)':54} {torch_ms:10.1f} {ours_ms:11.1f} {torch_ms / ours_ms:6.2f}x")

    runs = {}
    for mode in ("default", "kept"):
        env = {**os.environ, "BERTKIT_MALLOC": "default" if mode == "default" else ""}
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--repeat", str(a.repeat)], env=env,
                             capture_output=True, text=True, check=True)
        runs[mode] = json.loads(out.stdout)
    for name, before in runs["default"].items():
        after = runs["kept"][name]
        print(f"{name + ', malloc kept':54} {before:10.1f} {after:11.1f} {before / after:6.2f}x")

    print(f"\n{'float32 GEMM, (M, K) x (K, N)':44} {'addmm GFLOP/s':>14} {'oneDNN prepacked':>17}")
    for m, k, n in ((8192, 384, 1152), (8192, 384, 384), (8192, 384, 1536), (8192, 1536, 384)):
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        mkl = 2 * m * k * n / mean_ms(lambda: torch.addmm(b, x, w.t()), a.repeat) / 1e6
        onednn = float("nan")  # torch built without oneDNN
        if torch.backends.mkldnn.is_available():
            packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
            onednn = 2 * m * k * n / mean_ms(
                lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""), a.repeat) / 1e6
        print(f"{f'({m}, {k}) x ({k}, {n})':44} {mkl:14.0f} {onednn:17.0f}")


if __name__ == "__main__":
    main()
