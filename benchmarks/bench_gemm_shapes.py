"""What a new matrix shape costs a linear layer's training step on this CPU, in float32 and under bf16 autocast.

Under bf16 autocast PyTorch multiplies on the CPU with oneDNN, which builds (JIT-compiles) a kernel for each new
shape; float32 goes to MKL, which does not. A pre-training step whose shapes change every batch (the real tokens
packed, the masked positions as they come) pays that build on nearly every step; this measures it alone: the
forward and backward of one `nn.Linear` (bertkit-mini's feed-forward, 256 -> 1024 by default) on row counts that are
(a) always the same, (b) each new to the process, (c) the same new ones again. Milliseconds per step, each
precision in its own pass over (a), (b), (c), the CPU's flags printed.

    python benchmarks/bench_gemm_shapes.py [--rows 2000] [--shapes 100] [--inner 256] [--outer 1024] [--threads 2]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from common import cpu_line


def ms_per_step(layer: torch.nn.Linear, rows: list[int], bf16: bool) -> float:
    """Mean milliseconds of forward + backward of `layer` over inputs of these row counts."""
    start = time.perf_counter()
    for m in rows:
        x = torch.randn(m, layer.in_features, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = layer(x)
        y.float().sum().backward()
    return (time.perf_counter() - start) / len(rows) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2000, help="row count of the fixed shape; new ones start above it")
    p.add_argument("--shapes", type=int, default=100, help="steps per measurement (and new shapes per precision)")
    p.add_argument("--inner", type=int, default=256)
    p.add_argument("--outer", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    layer = torch.nn.Linear(a.inner, a.outer)
    print(cpu_line())
    print(f"{a.threads} threads, nn.Linear({a.inner}, {a.outer}), forward + backward, ms per step")
    report = {"cpu": cpu_line(), "threads": a.threads, "shape": [a.inner, a.outer], "rows": a.rows, "results": {}}
    # every precision gets row counts no earlier pass used, so that (b) is new to the process for each
    for k, (name, bf16) in enumerate((("fp32", False), ("bf16", True))):
        ms_per_step(layer, [a.rows] * 5, bf16)  # warm-up: the fixed shape is built
        new = list(range(a.rows + 1 + k * a.shapes, a.rows + 1 + (k + 1) * a.shapes))
        r = {"fixed": ms_per_step(layer, [a.rows] * a.shapes, bf16), "new": ms_per_step(layer, new, bf16),
             "seen": ms_per_step(layer, new, bf16)}
        report["results"][name] = r
        print(f"{name}: the same shape {r['fixed']:.2f}, a new shape each step {r['new']:.2f} "
              f"({r['new'] / r['seen']:.2f}x the same shapes seen again: {r['seen']:.2f})")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
