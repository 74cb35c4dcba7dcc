"""Process-level settings that make CPU training and inference faster: how glibc's malloc hands memory back to the
system.

A training step, and every inference batch, allocates and frees the same large tensors every time. glibc serves
blocks above its mmap threshold (at most 32 MiB) with fresh `mmap` pages and returns them with `munmap`, so every
step page-faults that memory in again and the kernel zeroes each page (the cost: docs/results/cpu-levers-*.md and
embeddings-*.md, from benchmarks/bench_cpu_levers.py and bench_embed.py --default-malloc). `keep_freed_memory` makes
malloc serve every block from its heap and never give the heap back, so steady-state steps reuse warm pages: the
PyTorch CPU performance guides' advice (jemalloc or tcmalloc), without a preloaded library. Freed memory then stays
in the process until it exits (`bertkit serve` hands it back whenever its queue runs empty: `release_free_memory`).
Set BERTKIT_MALLOC=default to leave malloc alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt parameters from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Make glibc malloc keep freed memory for reuse (no mmap'd blocks, no heap trimming). Idempotent.

    Returns True when the setting is in effect, False where it does not apply (not Linux/glibc, or opted out with
    BERTKIT_MALLOC=default).
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("BERTKIT_MALLOC", "").lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. The trim threshold is an int: 2**31 - 1 bytes means "never trim".
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    return _applied


def release_free_memory() -> bool:
    """Give the free pages of every malloc arena back to the system (glibc `malloc_trim(0)`).

    A server's batches come in every shape, and glibc keeps what they freed in per-thread arenas, so without this
    the resident size of `bertkit serve` climbs with the history of request shapes instead of following the load.
    The server calls it when its queue runs empty. Returns False where it does not apply (not glibc).
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def cpu_flags() -> set[str]:
    """The CPU feature flags the kernel reports (/proc/cpuinfo's first `flags` line); empty where unavailable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX-BF16). Without those units
    PyTorch emulates bf16 and it runs slower than float32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())

