"""Where one BERT-base pre-training step spends its time on CUDA: bertkit eager, bf16 autocast, fused AdamW (the GPU
suite's step), full-length seq-128 batches; prints ms/step and the profiler's top ops by CUDA and by CPU time.

    PYTHONPATH=benchmarks python3 benchmarks/device/gpu_profile_step.py [BATCH]   # on a CUDA machine; default 64

(benchmarks/ on the path for its common.py; benchmarks/device/gpu_pretrain_levers.sh runs it so.)
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from common import make_step

from bertkit.model import BertConfig, BertForPreTraining


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("gpu_profile_step.py needs a CUDA GPU")
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("base")).cuda()
    step = make_step(model, autocast_device="cuda")
    ids = torch.randint(1000, 30000, (batch, 128), device="cuda")
    labels = torch.where(torch.rand(ids.shape, device="cuda") < 0.15, ids, torch.full_like(ids, -100))
    b = dict(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids), labels=labels,
             next_sentence_label=torch.zeros(batch, dtype=torch.long, device="cuda"))
    for _ in range(3):
        step(b)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        step(b)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 10
    print(f"batch {batch} x 128: {seconds * 1000:.1f} ms/step, {batch * 128 / seconds:,.0f} tokens/s")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step(b)
        torch.cuda.synchronize()
    for key in ("cuda_time_total", "cpu_time_total"):
        print(prof.key_averages().table(sort_by=key, row_limit=18, max_name_column_width=60))


if __name__ == "__main__":
    main()
