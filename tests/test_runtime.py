"""bertkit.runtime: the malloc setting that lets training steps reuse freed memory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import os, sys, torch
from bertkit.runtime import keep_freed_memory
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
applied = keep_freed_memory()
before = rss_mb()
x = torch.ones(64 * 2**20)  # 256 MiB, touched
del x
print(applied, rss_mb() - before)
"""


def _run(env_extra: dict[str, str]) -> tuple[bool, float]:
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True)
    applied, kept = out.stdout.split()
    return applied == "True", float(kept)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc setting")
def test_freed_memory_is_kept_for_reuse() -> None:
    applied, kept_mb = _run({})
    assert applied
    assert kept_mb > 200  # the freed 256 MiB block stays in the process, ready for the next step


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc setting")
def test_opt_out_leaves_malloc_alone() -> None:
    applied, kept_mb = _run({"BERTKIT_MALLOC": "default"})
    assert not applied
    assert kept_mb < 50  # glibc returns the mmap'd block on free


def test_release_free_memory_hands_fragmented_free_pages_back() -> None:
    """200 MB of 4 KB blocks, every 50th kept: free() alone cannot shrink the heap past the survivors;
    release_free_memory (malloc_trim) returns the free pages between them."""
    import numpy as np

    from bertkit.runtime import release_free_memory

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    blocks = [np.ones(512) for _ in range(50_000)]  # 4 KB each, from malloc's heap
    survivors = blocks[::50]
    del blocks
    before = rss_mb()
    assert release_free_memory()
    after = rss_mb()
    assert before - after > 100, (before, after)
    assert all(s.sum() == 512 for s in survivors)
