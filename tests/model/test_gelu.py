"""bertkit.model.kernels.GELU: torch's GELU bit for bit, with a bounded set of shapes reaching the CPU kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from bertkit.model.kernels import GELU

BLOCK, CHUNK = GELU.BLOCK_ROWS, GELU.CHUNK_ROWS


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(7, 37), (BLOCK, 64), (BLOCK + 1, 64), (3 * BLOCK + 17, 96), (2, 300, 48)])
def test_values_and_gradients_equal_torch_bit_for_bit(shape: tuple[int, ...], approximate: str) -> None:
    """The gradient is compared with torch's on one thread: with several, torch's own tanh-GELU gradient depends on
    where its thread split falls (on an AVX-512 CPU, elements at a split computed by the scalar path, an ulp away),
    while the blocks, each below torch's parallel grain, always take the one-thread path."""
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    gelu = GELU(approximate)
    with torch.inference_mode():
        assert torch.equal(gelu(x), F.gelu(x, approximate=approximate))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(*shape)
    out_a = gelu(a)
    out_a.backward(grad)  # with this process's threads
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out_b = F.gelu(b, approximate=approximate)
        out_b.backward(grad)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out_a, out_b) and out_a.shape == x.shape
    assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("rows", [CHUNK, 2 * CHUNK + 3 * BLOCK + 5])
def test_chunks_give_the_values_and_gradients_of_one_call(rows: int, approximate: str) -> None:
    """Row counts of a training batch (whole chunks on every thread, then blocks): one call's values and gradients
    with the same threads."""
    torch.manual_seed(0)
    x, grad = torch.randn(rows, 384) * 3, torch.randn(rows, 384)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_a, out_b = GELU(approximate)(a), F.gelu(b, approximate=approximate)
    out_a.backward(grad)
    out_b.backward(grad)
    assert torch.equal(out_a, out_b) and torch.equal(a.grad, b.grad)


class _GeluShapes(TorchDispatchMode):
    """Records the input shape of every aten GELU call (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func._schema.name in ("aten::gelu", "aten::gelu.out", "aten::gelu_backward"):
            self.shapes.add(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


def test_token_counts_of_every_size_reach_the_kernels_as_few_shapes() -> None:
    gelu = GELU()
    with _GeluShapes() as seen:
        for rows in range(BLOCK - 40, 3 * CHUNK, 7):  # the packed path's ever-changing token counts
            x = torch.randn(rows, 16, requires_grad=rows % 2 == 0)
            y = gelu(x)
            if x.requires_grad:
                y.sum().backward()
    assert len(seen.shapes) <= BLOCK + 1
    assert all(s[0] <= BLOCK or s[0] == CHUNK for s in seen.shapes)


def test_memory_stays_flat_over_many_token_counts() -> None:
    """The failure this guards against: a kernel cached per row count, memory growing with the length of a job."""
    code = """
import torch
from bertkit.model.kernels import GELU
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
gelu = GELU()
with torch.inference_mode():
    for rows in range(300, 600):
        gelu(torch.randn(rows, 37))
    before = rss_mb()
    for rows in range(600, 2600):
        gelu(torch.randn(rows, 37))
print(rss_mb() - before)
"""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/statm")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    grown = float(done.stdout.split()[-1])
    assert grown < 40, f"resident memory grew {grown:.0f} MB over 2,000 token counts"
