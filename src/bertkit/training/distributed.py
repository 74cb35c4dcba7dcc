"""Distributed set-up for runs launched by torchrun: process group (NCCL on GPU, gloo on CPU), rank helpers.

Launched as `torchrun --nproc_per_node=N ...`, each process finds RANK, LOCAL_RANK and WORLD_SIZE in its
environment; without them the run is a single process and every helper here is a no-op.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bertkit.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that prints and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' -> this process's CUDA GPU when there is one, else CPU; otherwise torch.device(name)."""
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device = {name!r}, but no CUDA GPU is available")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def setup_distributed(device: str = "auto") -> DistInfo:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1) and pick this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        # Leave the group before the interpreter is torn down: a gloo group still alive then aborts the process at
        # exit (SIGABRT, "terminate called without an active exception") after a run that succeeded.
        atexit.register(cleanup_distributed)
    return DistInfo(rank, world_size, local_rank, dev)


def cleanup_distributed() -> None:
    """Leave the process group if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's `obj`, in rank order ([obj] in a single process)."""
    if not info.distributed:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def any_rank(flag: bool | torch.Tensor, info: DistInfo) -> bool:
    """True on every rank if `flag` is true on any rank (used to stop all ranks together: a signal, a non-finite
    loss). A one-element tensor flag is reduced on its device, so the answer costs one synchronisation."""
    if not info.distributed:
        return bool(flag)
    t = torch.as_tensor(flag, device=info.device).detach().reshape(1).to(torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
