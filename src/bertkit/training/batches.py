"""What a run reads, in which order: its phases (`TrainPhase`), each rank's micro-batches of each epoch as a pure
function of (seed, phase, epoch), the stream of them a step draws from, and the small functions that take a batch
through the model. A resume that restores a `Position` continues the very batches the run would have drawn.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, default_collate

from bertkit.errors import ConfigError
from bertkit.training.config import TrainingConfig
from bertkit.training.distributed import DistInfo


BatchSampler = Callable[[list[int], int, bool], list[list[int]]]
"""(an epoch's order of dataset indices, batch size, drop_last) -> the micro-batches, each a list of indices."""


@dataclass
class TrainPhase:
    """One stretch of the run on one dataset (pre-training: seq 128, then seq 512), sharing the LR schedule."""

    dataset: Dataset
    collate_fn: Callable[[list[Any]], Any] | None = None
    max_steps: int | None = None
    """Optimizer updates in this phase; None = the config's max_steps, else its epochs over this dataset."""
    batch_size: int | None = None
    """Micro-batch size of this phase; None = the config's batch_size."""
    name: str = "train"
    grad_accum_steps: int | None = None
    """Micro-batches per optimizer update in this phase; None = the config's grad_accum_steps."""
    batch_sampler: BatchSampler | None = None
    """How an epoch's shuffled order becomes micro-batches (`no_duplicate_batches`: no two examples of a batch
    share a text); None: batch_size consecutive samples at a time."""


def no_duplicate_batches(order: Sequence[int], batch_size: int, drop_last: bool,
                         keys: Sequence[Collection[Hashable]]) -> list[list[int]]:
    """Batches of `order` in which no two samples share a key (`keys[i]`: sample i's texts), for losses whose
    negatives are the batch's other samples (a duplicate of one's positive would be a false negative), as
    sentence-transformers' NoDuplicatesBatchSampler: each batch takes, in order, every sample that shares no key with
    it so far, until it is full; a skipped sample waits for a later batch; a short last batch ends the pass."""
    batches: list[list[int]] = []
    waiting: list[int] = []  # samples skipped so far, in order: each batch looks at them first
    upcoming = 0  # order[upcoming:] has not been looked at
    while waiting or upcoming < len(order):
        batch: list[int] = []
        seen: set[Hashable] = set()
        skipped: list[int] = []

        def offer(index: int) -> None:
            if seen.isdisjoint(keys[index]):
                batch.append(index)
                seen.update(keys[index])
            else:
                skipped.append(index)

        for position, index in enumerate(waiting):
            if len(batch) == batch_size:
                skipped.extend(waiting[position:])
                break
            offer(index)
        while len(batch) < batch_size and upcoming < len(order):
            offer(order[upcoming])
            upcoming += 1
        waiting = skipped
        if len(batch) == batch_size or not drop_last:
            batches.append(batch)
    return batches


@dataclass
class Position:
    """Where the data stream stands: next micro-batch is batch `batch` of epoch `epoch` of phase `phase`."""

    phase: int = 0
    epoch: int = 0
    batch: int = 0


Stream = Iterator[tuple[Any, Position, bool]]
"""(batch, position after it, whether it ended an epoch), the micro-batches of one phase across its epochs."""


def mix(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the given integers."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class Batches:
    """The phases of a run and the order of their micro-batches on this rank (`config`'s seed, batch sizes,
    shuffling, epochs or max_steps)."""

    def __init__(self, phases: Sequence[TrainPhase], config: TrainingConfig, dist: DistInfo) -> None:
        if not phases:
            raise ConfigError("Trainer: phases is empty")
        self.phases, self.config, self.dist = list(phases), config, dist
        for i, ph in enumerate(self.phases):
            if len(ph.dataset) == 0:  # type: ignore[arg-type]
                raise ConfigError(f"Trainer: phase {i} ({ph.name}) has an empty dataset")
        self.per_epoch = [len(self.epoch_batches(i, 0)) for i in range(len(self.phases))]
        self.phase_steps = [self._phase_steps(i) for i in range(len(self.phases))]
        self.total_steps = sum(self.phase_steps)

    def batch_size(self, phase: int) -> int:
        return self.phases[phase].batch_size or self.config.batch_size

    def accum_steps(self, phase: int) -> int:
        return self.phases[phase].grad_accum_steps or self.config.grad_accum_steps

    def epoch_batches(self, phase: int, epoch: int) -> list[list[int]]:
        """This rank's micro-batches (dataset indices) of one epoch: a pure function of (seed, phase, epoch). Rank r
        takes every world_size-th index of one permutation, so N ranks x batch B see the samples of 1 x N*B."""
        n = len(self.phases[phase].dataset)  # type: ignore[arg-type]
        if self.config.shuffle:
            g = torch.Generator().manual_seed(mix(self.config.seed, phase, epoch))
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        ws = self.dist.world_size
        if ws > 1:
            order = order[: n - n % ws][self.dist.rank :: ws]
        b = self.batch_size(phase)
        sampler = self.phases[phase].batch_sampler
        if sampler is not None:
            batches = sampler(order, b, self.config.drop_last)
        else:
            batches = [order[i : i + b] for i in range(0, len(order), b)]
        if self.config.drop_last and batches and len(batches[-1]) < b:
            batches.pop()
        return batches

    def _phase_steps(self, phase: int) -> int:
        steps = self.phases[phase].max_steps or self.config.max_steps
        if steps:
            return steps
        if self.per_epoch[phase] == 0:
            raise ConfigError(f"phase {phase}: fewer samples than one batch with drop_last")
        return max(1, math.ceil(self.config.epochs * self.per_epoch[phase] / self.accum_steps(phase)))

    def stream_at(self, step: int, position: Position, stream: Stream | None) -> tuple[Stream, Position]:
        """The stream for step `step` + 1 and its position: `stream` itself within a phase, a new one at the start
        and when a phase has ended (its position moved to the next phase's start)."""
        ends = np.cumsum(self.phase_steps).tolist()
        if stream is not None and step < ends[position.phase]:
            return stream, position
        while step >= ends[position.phase]:
            position = Position(position.phase + 1, 0, 0)
        return self.stream(position), position

    def stream(self, pos: Position) -> Stream:
        """The micro-batches from `pos` on, forever, across epochs of its phase."""
        phase = self.phases[pos.phase]
        collate = phase.collate_fn or default_collate
        epoch, start = pos.epoch, pos.batch
        while True:
            batches = self.epoch_batches(pos.phase, epoch)
            if not batches:
                raise ConfigError(f"phase {pos.phase}: no batches (dataset smaller than the batch with drop_last)")
            if hasattr(collate, "set_epoch"):  # dynamic masking: masks differ per epoch
                collate.set_epoch(epoch)
            loader = DataLoader(phase.dataset, batch_sampler=batches[start:], collate_fn=collate,
                                num_workers=self.config.num_workers, pin_memory=self.dist.device.type == "cuda",
                                generator=torch.Generator().manual_seed(mix(self.config.seed, pos.phase, epoch, 1)))
            for i, batch in enumerate(loader, start=start):
                yield batch, Position(pos.phase, epoch, i + 1), i + 1 == len(batches)
            epoch, start = epoch + 1, 0

    def epoch_float(self, pos: Position) -> float:
        """Epochs done in `pos`'s phase, as a fraction (for records and messages)."""
        return round(pos.epoch + pos.batch / max(1, self.per_epoch[pos.phase]), 4)

    def meta(self) -> dict[str, Any]:
        """Settings a resume must match (the data position and RNG states mean nothing otherwise)."""
        n = len(self.phases)
        return {"world_size": self.dist.world_size, "batch_sizes": [self.batch_size(i) for i in range(n)],
                "grad_accum_steps": [self.accum_steps(i) for i in range(n)], "seed": self.config.seed,
                "num_phases": n, "dataset_sizes": [len(p.dataset) for p in self.phases]}  # type: ignore[arg-type]

    def collate_generators(self) -> list[torch.Generator | None]:
        """The collate functions' own generators (dynamic masking), which a checkpoint keeps."""
        return [getattr(p.collate_fn, "generator", None) for p in self.phases]


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch's tensors on `device` (dicts, lists and tuples of them too)."""
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def count_tokens(batch: Any) -> int:
    """Real (non-padding) tokens of a batch, for tokens/s; the batch size when it has no token ids."""
    if isinstance(batch, dict):
        if "attention_mask" in batch:
            return int(batch["attention_mask"].sum())
        if "input_ids" in batch:
            return int(batch["input_ids"].numel())
        first = next(iter(batch.values()))
        return int(first.shape[0]) if isinstance(first, Tensor) else 1
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], Tensor):
        return int(batch[0].shape[0])
    return 1


def forward_loss(model: nn.Module, batch: Any) -> Tensor:
    """The model's loss on a batch: the batch's keys as keyword arguments (a list or tuple as positional ones), the
    loss read from the output's `.loss`, output['loss'], or the output itself when it is a tensor."""
    if isinstance(batch, dict):
        output = model(**batch)
    elif isinstance(batch, (list, tuple)):
        output = model(*batch)
    else:
        output = model(batch)
    loss = output if isinstance(output, Tensor) else getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        raise ConfigError("the model returned no loss: the training batches must carry labels")
    return loss
