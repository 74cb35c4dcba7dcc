"""The one trainer: pre-training and fine-tuning both run this loop.

A job contributes a model (any nn.Module whose forward takes the batch's keys and returns an output with
`.loss`), training data + collate function (or several `TrainPhase`s run as one schedule), and an
`evaluate(model) -> dict` callback. The loop: micro-batches with gradient accumulation under autocast, global
norm clipping, optimizer + LR schedule, metrics/plots, evaluation, best model, checkpoints, signals, DDP.

Two guards keep a run honest. A non-finite loss or gradient norm stops the run before its update (every DDP
rank agrees), so no checkpoint, best/ or final/ is ever written from NaN weights. And each checkpoint stores a
fingerprint of the run's data and settings (bertkit.training.provenance) that a resume must match.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, default_collate

from bertkit.errors import CheckpointError, ConfigError, TrainingError
from bertkit.io import folder_lock, make_dir
from bertkit.model.bert import set_activation_checkpointing
from bertkit.progress import progress_bar
from bertkit.runtime import cpu_has_native_bf16, keep_freed_memory
from bertkit.training.bf16_weights import Bf16Weights
import bertkit.training.checkpoint as ckpt
from bertkit.training.config import TrainingConfig
from bertkit.training.distributed import DistInfo, all_gather_objects, any_rank, barrier, setup_distributed
from bertkit.training.logging import MetricsLogger, read_metrics, truncate_metrics
from bertkit.training.optim import build_optimizer
from bertkit.training.plots import plot_metrics
from bertkit.training.profiling import StepProfiler
from bertkit.training.provenance import describe, differences, normalise, plain, training_fingerprint
from bertkit.training.schedule import build_scheduler, resolve_warmup

CHECKPOINTS = "checkpoints"
BEST = "best"
FINAL = "final"
CURVES = "curves.png"


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


@dataclass
class TrainResult:
    """What `Trainer.train` returns (on rank 0; other ranks get the same fields without metrics)."""

    global_step: int
    final_metrics: dict[str, Any] | None = None
    best_metrics: dict[str, Any] | None = None
    best_dir: Path | None = None
    final_dir: Path | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every record this run's metrics.jsonl holds (train and eval), in order."""
    interrupted: bool = False
    signal: int | None = None
    """The signal (SIGINT, SIGTERM) that stopped the run early, after its checkpoint was written."""
    resumes: list[dict[str, Any]] = field(default_factory=list)
    """One record per resume that led to this result: its step, checkpoint and the data or settings it changed
    (`changed`: name -> [checkpoint's, this run's]; empty for a plain resume)."""


@dataclass
class _Position:
    """Where the data stream stands: next micro-batch is batch `batch` of epoch `epoch` of phase `phase`."""

    phase: int = 0
    epoch: int = 0
    batch: int = 0


@dataclass
class TrainState:
    """The loop's own state: exactly what a checkpoint saves and a resume restores besides the model, optimizer,
    scheduler, loss scaler and RNG states (checkpoint key "trainer")."""

    step: int = 0
    position: _Position = field(default_factory=_Position)
    best_value: float | None = None
    best_step: int | None = None
    best_metrics: dict[str, Any] | None = None
    last_eval_step: int | None = None
    tokens_seen: int = 0

    def to_dict(self) -> dict[str, Any]:
        p = self.position
        return {"step": self.step, "position": [p.phase, p.epoch, p.batch], "best_value": self.best_value,
                "best_step": self.best_step, "best_metrics": self.best_metrics,
                "last_eval_step": self.last_eval_step, "tokens_seen": self.tokens_seen}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainState":
        return cls(step=int(d["step"]), position=_Position(*d["position"]), best_value=d["best_value"],
                   best_step=d["best_step"], best_metrics=d["best_metrics"], last_eval_step=d["last_eval_step"],
                   tokens_seen=int(d["tokens_seen"]))


@dataclass
class StepOutcome:
    """What one optimizer update did: its micro-batches' summed loss, their tokens, the LR it used."""

    loss_sum: Tensor
    micro_batches: int
    tokens: int
    lr: float
    grad_norm: Tensor | None
    epoch_ended: bool


class _LogWindow:
    """Loss and tokens/s over the steps since the last training record."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.reset()

    def reset(self) -> None:
        self.loss_sum.zero_()
        self.count, self.tokens, self.start = 0, 0, time.perf_counter()

    def add(self, outcome: StepOutcome) -> None:
        self.loss_sum += outcome.loss_sum
        self.count += outcome.micro_batches
        self.tokens += outcome.tokens


def _mix(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the given integers."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


_LOCKED: set[Path] = set()  # output folders this process holds the lock of


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, dist: DistInfo) -> Iterator[None]:
    """Lock a run's output folder (rank 0; see bertkit.io.folder_lock) for everything the job writes there: its
    records as well as the Trainer's files. Re-entrant in one process, so a job can take the lock before it
    validates anything and the Trainer it runs trains under the same lock. A folder the lock had to create is
    removed again when the job leaves nothing in it (a refused or failed start leaves no litter)."""
    key = Path(folder).resolve()
    if not dist.is_main or key in _LOCKED:
        yield
        return
    created = not key.exists()
    try:
        with folder_lock(folder):
            _LOCKED.add(key)
            try:
                yield
            finally:
                _LOCKED.discard(key)
    finally:
        if created:
            with contextlib.suppress(OSError):
                key.rmdir()  # only when empty


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel (or compiled) wrapper."""
    while hasattr(model, "module") and isinstance(getattr(model, "module"), nn.Module):
        model = model.module
    return model


def resolve_precision(precision: str, device: torch.device) -> str:
    """'auto' -> bf16 on a CUDA GPU that supports it, fp16 on older GPUs, fp32 on CPU; checks the others."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("TrainingConfig.precision = 'fp16' needs a CUDA GPU (use 'bf16' or 'fp32' on CPU)")
    return precision


def batch_loss(output: Any) -> Tensor:
    """The loss of a model output: `.loss`, output['loss'], or the output itself when it is a tensor."""
    loss = output if isinstance(output, Tensor) else getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        raise ConfigError("the model returned no loss: the training batches must carry labels")
    return loss


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _count_tokens(batch: Any) -> int:
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


def _forward(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


class Trainer:
    """Runs the training loop of a config over one or more phases; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        config: TrainingConfig,
        train_data: Dataset | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        save_extra: Callable[[Path], None] | None = None,
        phases: Sequence[TrainPhase] | None = None,
        dist_info: DistInfo | None = None,
        fingerprint: dict[str, Any] | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        """`fingerprint`: the job's data and settings a resume must match (bertkit.training.provenance; the
        config's own are added here). `on_start`: writes the job's records (its config copy) on rank 0 once the
        run is known to start: under the folder's lock, after a resume was checked, before the first step."""
        if phases is None:
            if train_data is None:
                raise ConfigError("Trainer needs train_data (or phases)")
            phases = [TrainPhase(train_data, collate_fn)]
        elif train_data is not None:
            raise ConfigError("Trainer: pass either train_data or phases, not both")
        if not phases:
            raise ConfigError("Trainer: phases is empty")
        self.config = config
        self.phases = list(phases)
        self.evaluate = evaluate
        self.save_extra = save_extra
        self.on_start = on_start
        self.fingerprint = normalise({**(fingerprint or {}), **training_fingerprint(config)})
        self.dist = dist_info or setup_distributed(config.device)
        self.device = self.dist.device
        self.precision = resolve_precision(config.precision, self.device)
        if config.bf16_weights and self.precision != "bf16":
            raise ConfigError(f"TrainingConfig.bf16_weights = True, but precision {config.precision!r} is "
                              f"{self.precision} on {self.device}: bf16 weights need precision 'bf16'")
        self.output_dir = Path(config.output_dir)
        self.model = model.to(self.device)
        if config.activation_checkpointing and not set_activation_checkpointing(self.model, True):
            raise ConfigError("training.activation_checkpointing: the model has no BERT encoder to checkpoint")
        self._stop_signal: int | None = None
        self.bf16: Bf16Weights | None = None  # the bf16 working copy of a run with bf16_weights (made by train)
        for i, ph in enumerate(self.phases):
            if len(ph.dataset) == 0:  # type: ignore[arg-type]
                raise ConfigError(f"Trainer: phase {i} ({ph.name}) has an empty dataset")
        self._batches_per_epoch = [len(self.epoch_batches(i, 0)) for i in range(len(self.phases))]
        self.phase_steps = [self._phase_steps(i) for i in range(len(self.phases))]
        self.total_steps = sum(self.phase_steps)

    # --- data ------------------------------------------------------------------------------------------------
    def _batch_size(self, phase: int) -> int:
        return self.phases[phase].batch_size or self.config.batch_size

    def _accum_steps(self, phase: int) -> int:
        return self.phases[phase].grad_accum_steps or self.config.grad_accum_steps

    def epoch_batches(self, phase: int, epoch: int) -> list[list[int]]:
        """This rank's micro-batches (dataset indices) of one epoch: a pure function of (seed, phase, epoch).

        The global order is one permutation; rank r takes every world_size-th index of it (after dropping the
        tail that does not divide evenly), so N ranks x batch B see the same samples per step as 1 x N*B.
        """
        n = len(self.phases[phase].dataset)  # type: ignore[arg-type]
        if self.config.shuffle:
            g = torch.Generator().manual_seed(_mix(self.config.seed, phase, epoch))
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        ws = self.dist.world_size
        if ws > 1:
            order = order[: n - n % ws][self.dist.rank :: ws]
        b = self._batch_size(phase)
        batches = [order[i : i + b] for i in range(0, len(order), b)]
        if self.config.drop_last and batches and len(batches[-1]) < b:
            batches.pop()
        return batches

    def _phase_steps(self, phase: int) -> int:
        ph, c = self.phases[phase], self.config
        steps = ph.max_steps or c.max_steps
        if steps:
            return steps
        per_epoch = self._batches_per_epoch[phase]
        if per_epoch == 0:
            raise ConfigError(f"phase {phase}: fewer samples than one batch with drop_last")
        return max(1, math.ceil(c.epochs * per_epoch / self._accum_steps(phase)))

    def _micro_batches(self, pos: _Position) -> Iterator[tuple[Any, _Position, bool]]:
        """(batch, position after it, whether it ended an epoch), forever, across epochs of one phase."""
        phase = self.phases[pos.phase]
        collate = phase.collate_fn or default_collate
        epoch, start = pos.epoch, pos.batch
        while True:
            batches = self.epoch_batches(pos.phase, epoch)
            if not batches:
                raise ConfigError(f"phase {pos.phase}: no batches (dataset smaller than the batch with drop_last)")
            if hasattr(collate, "set_epoch"):  # dynamic masking: masks differ per epoch
                collate.set_epoch(epoch)
            loader = DataLoader(
                phase.dataset,
                batch_sampler=batches[start:],
                collate_fn=collate,
                num_workers=self.config.num_workers,
                pin_memory=self.device.type == "cuda",
                generator=torch.Generator().manual_seed(_mix(self.config.seed, pos.phase, epoch, 1)),
            )
            for i, batch in enumerate(loader, start=start):
                yield batch, _Position(pos.phase, epoch, i + 1), i + 1 == len(batches)
            epoch, start = epoch + 1, 0

    # --- signals ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM ask the loop to write a checkpoint and stop; a second SIGINT interrupts at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self._stop_signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._stop_signal = signum

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    # --- checkpoints -----------------------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        """Settings a resume must match (data position and RNG states mean nothing otherwise)."""
        return {
            "world_size": self.dist.world_size,
            "batch_sizes": [self._batch_size(i) for i in range(len(self.phases))],
            "grad_accum_steps": [self._accum_steps(i) for i in range(len(self.phases))],
            "seed": self.config.seed,
            "num_phases": len(self.phases),
            "dataset_sizes": [len(p.dataset) for p in self.phases],  # type: ignore[arg-type]
        }

    def _collate_generators(self) -> list[torch.Generator | None]:
        return [getattr(p.collate_fn, "generator", None) for p in self.phases]

    def save_checkpoint(self) -> Path:
        """Write checkpoints/step-N (every rank must call it: RNG states are gathered) and prune old ones."""
        self._check_weights_finite("a checkpoint")
        folder = ckpt.step_dir(self.output_dir / CHECKPOINTS, self.state.step)
        rng = ckpt.capture_rng_state()
        rng["collate"] = [ckpt.generator_state(g) for g in self._collate_generators()]
        all_rng = all_gather_objects(rng, self.dist)
        if self.dist.is_main:
            state = {
                "model": unwrap(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "trainer": self.state.to_dict(),
                "rng": all_rng,
            }
            meta = dict(self._meta(), step=self.state.step, fingerprint=self.fingerprint)
            ckpt.save_training_state(folder, state, meta)
            ckpt.prune_checkpoints(self.output_dir / CHECKPOINTS, self.config.keep_last)
        barrier()
        return folder

    def _load_checkpoint(self, folder: Path) -> None:
        """Restore everything `save_checkpoint` wrote (on every rank)."""
        state, meta = ckpt.load_training_state(folder)
        self._check_fingerprint(folder, meta)  # first: it names the cause (other data) of a dataset size change
        ckpt.check_compatible(folder, meta, self._meta())
        path = folder / ckpt.STATE_FILE
        ckpt.load_model_state(unwrap(self.model), state["model"], path)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            sched = dict(state["scheduler"])
            # The schedule's shape comes from this run's config (max_steps may have grown), not the checkpoint.
            sched["lr_lambdas"] = [None] * len(self.scheduler.lr_lambdas)
            self.scheduler.load_state_dict(sched)
            if self.scaler is not None and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
        except (ValueError, KeyError, RuntimeError) as e:
            raise CheckpointError(f"{path}: optimizer/scheduler state does not match this model ({e})") from None
        self.state = TrainState.from_dict(state["trainer"])
        rng = state["rng"][self.dist.rank]
        ckpt.restore_rng_state(rng)
        for g, s in zip(self._collate_generators(), rng.get("collate", [])):
            ckpt.set_generator_state(g, s)

    def _check_fingerprint(self, folder: Path, meta: dict[str, Any]) -> None:
        """Compare this run's data and settings with the checkpoint's: refuse a difference (CheckpointError naming
        each, checkpoint's value vs this run's) or, with resume_mismatch 'warn', print them and keep them for the
        run's records (the resume record in metrics.jsonl)."""
        path = folder / ckpt.META_FILE
        self._resume_record = {"step": int(meta.get("step", 0)), "split": "resume", "checkpoint": folder.name,
                               "changed": {}}
        old = meta.get("fingerprint")
        if old is None:
            self._print(f"warning: {path} holds no fingerprint of the run's data and settings (written by an older "
                        "bertkit): this resume cannot check that they are the same")
            self._resume_record["changed"] = None
            return
        diffs = differences(old, self.fingerprint)
        if not diffs:
            return
        lines = "".join(f"\n  {name}: {describe(a)} in the checkpoint, {describe(b)} now" for name, a, b in diffs)
        if self.config.resume_mismatch != "warn":
            raise CheckpointError(
                f"{path}: this run's data or settings differ from the checkpoint's:{lines}\nresume with the same "
                "ones, start a new output folder, or continue anyway with --resume-mismatch warn "
                "(training.resume_mismatch: warn), which notes the differences in the run's records")
        self._print(f"WARNING: resuming {folder} with data or settings that differ from the checkpoint's "
                    f"(training.resume_mismatch = warn):{lines}\nthe run's records (metrics.jsonl, results.json) "
                    f"note this at step {self._resume_record['step']}")
        self._resume_record["changed"] = {name: [plain(a), plain(b)] for name, a, b in diffs}

    def _check_weights_finite(self, what: str) -> None:
        """TrainingError (on every rank) instead of writing `what` from weights that hold inf or NaN."""
        params = list(unwrap(self.model).named_parameters())
        finite = torch.stack([torch.isfinite(p).all() for _, p in params]).all() if params else torch.tensor(True)
        if not any_rank(~finite, self.dist):
            return
        bad = next((name for name, p in params if not bool(torch.isfinite(p).all())), "a parameter of another rank")
        raise TrainingError(f"{self.output_dir}: after step {self.state.step} the weights hold inf or NaN values "
                            f"({bad}); {what} was not written from them. {self._kept()} Lower the learning rate "
                            f"(training.lr = {self.config.lr:g}).")

    def _kept(self) -> str:
        """What of the run is still on disk, for a message about a run that cannot go on."""
        latest = ckpt.latest_checkpoint(self.output_dir / CHECKPOINTS)
        text = (f"The last checkpoint, {latest}, is kept (--resume continues from it)." if latest is not None
                else "No checkpoint was written before it.")
        if self.state.best_step is not None:
            text += f" {BEST}/ holds the model of step {self.state.best_step}."
        return text

    def _save_model_folder(self, target: Path) -> None:
        """best/ or final/: a from_pretrained folder (plus save_extra's files), replacing any older one."""
        model = unwrap(self.model)
        with ckpt.atomic_replace_folder(target) as tmp:
            if hasattr(model, "save_pretrained"):
                model.save_pretrained(str(tmp))
            else:
                with ckpt.atomic_path(tmp / "model.pt") as f:
                    torch.save(model.state_dict(), f)
            if self.save_extra is not None:
                self.save_extra(tmp)

    # --- evaluation ------------------------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def _is_better(self, value: float) -> bool:
        best = self.state.best_value
        if not math.isfinite(value):
            return False  # a NaN score is never the best (and would never be beaten)
        if best is None:
            return True
        return value > best if self.config.greater_is_better else value < best

    def run_evaluation(self) -> dict[str, Any] | None:
        """Evaluate on rank 0 (RNG untouched, eval mode), log, plot, and keep best/; all ranks wait."""
        self._check_weights_finite(f"{BEST}/")
        self.state.last_eval_step = self.state.step
        metrics = None
        if self.evaluate is not None and self.dist.is_main:
            model = unwrap(self.model)
            with ckpt.preserved_rng(), torch.no_grad(), self._autocast():
                model.eval()
                try:
                    metrics = {k: (float(v) if isinstance(v, (int, float, Tensor)) else v)
                               for k, v in self.evaluate(model).items()}
                finally:
                    model.train()
            self.logger.log({"step": self.state.step, "split": "eval", "epoch": self._epoch_float(), **metrics})
            self._plot()
            name = self.config.metric_for_best
            if name is not None:
                if name not in metrics:
                    raise ConfigError(f"TrainingConfig.metric_for_best = {name!r}, but evaluation returned only "
                                      f"{', '.join(metrics) or 'nothing'}")
                if self._is_better(float(metrics[name])):
                    st = self.state
                    st.best_value, st.best_step, st.best_metrics = float(metrics[name]), st.step, dict(metrics, step=st.step)
                    self._save_model_folder(self.output_dir / BEST)
            self.last_metrics = metrics
        barrier()
        return metrics

    def _plot(self) -> None:
        if self.dist.is_main:
            plot_metrics(self.logger.path, self.output_dir / CURVES, title=self.output_dir.name)

    def _epoch_float(self) -> float:
        pos = self.state.position
        n = self._batches_per_epoch[pos.phase]
        return round(pos.epoch + pos.batch / max(1, n), 4)

    # --- the loop --------------------------------------------------------------------------------------------
    def _setup(self, resume: bool) -> None:
        c = self.config
        self.optimizer = build_optimizer(unwrap(self.model), c)
        self.scheduler = build_scheduler(self.optimizer, c.warmup, self.total_steps)
        warmup_steps = resolve_warmup(c.warmup, self.total_steps)
        if warmup_steps >= self.total_steps:
            self._print(f"warning: TrainingConfig.warmup is {warmup_steps} steps but the run has {self.total_steps}: "
                        f"the learning rate never reaches its peak {c.lr:g} (give warmup as a fraction, e.g. 0.1)")
        if self.precision == "bf16" and self.device.type == "cpu" and not cpu_has_native_bf16():
            self._print("warning: TrainingConfig.precision is 'bf16' but this CPU has no bf16 matrix units (no "
                        "avx512_bf16 or amx_bf16 in /proc/cpuinfo): PyTorch emulates bf16 here, and a training step "
                        "runs many times slower than in fp32 (benchmarks/bench_pretrain_step.py --bf16 measures it); "
                        "use precision 'fp32' or 'auto' on this machine")
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.state = TrainState()
        self._resume_record: dict[str, Any] | None = None
        self.last_metrics: dict[str, Any] | None = None
        self.logger = MetricsLogger(self.output_dir, enabled=self.dist.is_main, tensorboard=c.tensorboard)
        if self.dist.is_main:
            ckpt.remove_leftovers(self.output_dir / CHECKPOINTS)  # of writes and deletions a kill interrupted
        latest = ckpt.latest_checkpoint(self.output_dir / CHECKPOINTS)
        if resume and latest is not None:
            self._load_checkpoint(latest)
            if self.dist.is_main:
                truncate_metrics(self.logger.path, self.state.step)
                self.logger.log(self._resume_record)
                self._print(f"resumed from {latest} at step {self.state.step}")
            return
        if latest is not None:
            raise ConfigError(f"{self.output_dir / CHECKPOINTS} already holds checkpoints ({latest.name}): resume "
                              "them (resume=True / --resume) or choose another output_dir")
        if resume:
            self._print(f"no checkpoint in {self.output_dir / CHECKPOINTS}: starting from step 0")
        if self.dist.is_main:
            truncate_metrics(self.logger.path, -1)
        # Dropout differs per rank; shuffling and masking come from their own seeded generators.
        seed = c.seed + self.dist.rank
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _print(self, text: str) -> None:
        if self.dist.is_main:
            bar = getattr(self, "_bar", None)
            if bar is not None:
                bar.write(text)  # above a terminal's bar
            else:
                print(text, file=sys.stderr, flush=True)

    def _compiled(self, model: nn.Module) -> nn.Module:
        """`model` under torch.compile as TrainingConfig.compile says (the training steps' module only)."""
        mode = self.config.compile
        if mode == "none":
            return model
        return torch.compile(model, mode=None if mode == "default" else mode)

    def _wrap_ddp(self, model: nn.Module) -> nn.Module:
        if not self.dist.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(model, device_ids=ids)

    def train(self, resume: bool = False) -> TrainResult:
        """Train to the end of the last phase (or until SIGINT/SIGTERM); `resume` continues the latest checkpoint.

        The output folder is locked for the run: a second job writing into it stops with an error."""
        with output_lock(self.output_dir, self.dist):
            return self._train(resume)

    def _train(self, resume: bool) -> TrainResult:
        c = self.config
        # Steady-state steps on a CPU, and the batches the loader builds on the host for any device (in this process
        # or in the DataLoader workers forked from it), reuse warm pages instead of page-faulting (bertkit.runtime).
        keep_freed_memory()
        if self.dist.is_main:
            make_dir(self.output_dir)
        barrier()
        self._setup(resume)
        if self.on_start is not None and self.dist.is_main:
            self.on_start()
        # The module the steps run: the model, or its bf16 working copy (made after a resume has loaded the weights)
        self.bf16 = Bf16Weights(self.model) if c.bf16_weights else None
        self.profiler = StepProfiler(self.output_dir, c.profile_from, c.profile_steps, self.device,
                                     enabled=self.dist.is_main and self.state.step <= c.profile_from)
        if self.profiler.enabled and c.profile_from + c.profile_steps > self.total_steps:
            self._print(f"warning: TrainingConfig.profile_from + profile_steps = {c.profile_from + c.profile_steps} "
                        f"but the run has {self.total_steps} steps: the profile covers the steps there are")
        model = self._compiled(self._wrap_ddp(self.bf16.working if self.bf16 is not None else self.model))
        model.train()
        st = self.state
        bar = self._bar = progress_bar(self.total_steps, self.output_dir.name, "step", initial=st.step,
                                       enabled=self.dist.is_main and c.progress_bar)
        try:
            if c.eval_at_start and st.step == 0:
                self.run_evaluation()  # the starting point's score (RNG untouched, like every evaluation)
            return self._loop(model, bar)
        except BaseException:
            bar.close()
            self._bar = None
            self.profiler.close()
            self.logger.close()
            raise

    def _loop(self, model: nn.Module, bar: Any) -> TrainResult:
        """The steps to the end of the last phase, the final evaluation, checkpoint and final/ (or a stop)."""
        c, st = self.config, self.state
        window = _LogWindow(self.device)
        stream: Iterator[tuple[Any, _Position, bool]] | None = None
        with self._signals():
            while st.step < self.total_steps:
                stream = self._stream_at(st, stream)
                self.profiler.begin(st.step)
                outcome = self.train_step(model, stream)
                st.step += 1
                self.profiler.end(outcome.tokens // self.dist.world_size)
                if self._announce_profile():
                    window.start += self.profiler.write_seconds  # the logged tokens/s are the steps'
                bar.update(1)
                window.add(outcome)
                if st.step % c.log_every == 0 or st.step == self.total_steps:
                    self._log_window(window, outcome, bar)
                done = st.step >= self.total_steps
                due = (st.step % c.eval_every == 0) if c.eval_every else outcome.epoch_ended
                if due and not done:
                    self.run_evaluation()
                if c.save_every and st.step % c.save_every == 0 and not done:
                    self.save_checkpoint()
                if any_rank(self._stop_signal is not None, self.dist):
                    return self._stop(bar)
        bar.close()
        self._bar = None
        self.profiler.finish(note=f" (the run ended after {st.step - c.profile_from} of them)")
        self._announce_profile()
        if st.last_eval_step != st.step:
            self.run_evaluation()
        self.save_checkpoint()
        final_dir = None
        if self.dist.is_main:
            final_dir = self.output_dir / FINAL
            self._save_model_folder(final_dir)
            self._plot()
        barrier()
        self.logger.close()
        return self._result(final_dir=final_dir)

    def _stream_at(self, st: TrainState, stream: Iterator | None) -> Iterator[tuple[Any, _Position, bool]]:
        """The micro-batch stream for the next step: a new one at the start and when a phase has ended."""
        ends = np.cumsum(self.phase_steps).tolist()
        if stream is not None and st.step < ends[st.position.phase]:
            return stream
        while st.step >= ends[st.position.phase]:
            st.position = _Position(st.position.phase + 1, 0, 0)
        return self._micro_batches(st.position)

    def train_step(self, model: nn.Module, stream: Iterator[tuple[Any, _Position, bool]]) -> StepOutcome:
        """One optimizer update: the phase's micro-batches with gradients accumulated (DDP syncs on the last one
        only), then unscaling (fp16), clipping, the optimizer, scheduler and scaler steps. With bf16 weights `model`
        runs the working copy, whose gradients go to the float32 weights, which the optimizer updates."""
        c, st = self.config, self.state
        accum = self._accum_steps(st.position.phase)
        loss_sum, tokens, epoch_ended = torch.zeros((), device=self.device), 0, False
        part = self.profiler.part
        for micro in range(accum):
            with part("load"):
                batch, st.position, ended = next(stream)
            epoch_ended |= ended
            tokens += _count_tokens(batch) * self.dist.world_size
            with part("to_device"):
                batch = _to_device(batch, self.device)
            last = micro == accum - 1
            with contextlib.nullcontext() if last or not self.dist.distributed else model.no_sync():
                with part("forward"), self._autocast():
                    loss = batch_loss(_forward(model, batch))
                scaled = loss / accum
                with part("backward"):
                    (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            if self.bf16 is not None and (last or not self.dist.distributed):  # DDP reduces what it holds at the last
                with part("backward"):
                    self.bf16.take_gradients()
            loss_sum += loss.detach().float()
        with part("optimizer"):
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            params = [p for p in unwrap(self.model).parameters() if p.requires_grad]
            if c.max_grad_norm is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
            else:  # still measured: a non-finite gradient must stop the run, clipped or not
                grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        with part("finite_check"):
            self._stop_if_not_finite(loss_sum / accum, grad_norm)
        with part("optimizer"):
            lr = self.optimizer.param_groups[0]["lr"]
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            if self.bf16 is not None:
                self.bf16.refresh()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        return StepOutcome(loss_sum, accum, tokens, lr, grad_norm, epoch_ended)

    def _stop_if_not_finite(self, loss: Tensor, grad_norm: Tensor) -> None:
        """Raise TrainingError on every rank, before the optimizer step, when any rank's loss (or, without fp16
        loss scaling, its gradient norm) is inf or NaN. With loss scaling an inf/NaN gradient is the scaler's
        overflow signal (it skips that step and lowers the scale), so only a non-finite unscaled loss stops the
        run. One synchronisation per step, as GradScaler's own check makes."""
        checked = loss.detach().float().reshape(1)
        if self.scaler is None:
            checked = torch.cat([checked, grad_norm.detach().float().reshape(1).to(checked.device)])
        if not any_rank(~torch.isfinite(checked).all(), self.dist):
            return
        self.optimizer.zero_grad(set_to_none=True)
        st = self.state
        ph = self.phases[st.position.phase]
        where = f"step {st.step + 1} (phase {st.position.phase} '{ph.name}', epoch {self._epoch_float()})"
        values = f"the loss is {float(loss):g}" + ("" if self.scaler is not None else
                                                    f", the gradient norm {float(grad_norm):g}")
        if bool(torch.isfinite(checked).all()):
            values = "the loss or gradient norm of another process is not finite"
        raise TrainingError(
            f"{self.output_dir}: training stopped at {where}: {values}. The weights were not updated with it and "
            f"nothing was saved from it. {self._kept()} Lower the learning rate (training.lr = {self.config.lr:g}), "
            "or look for extreme values in the training data.")

    def _log_window(self, window: _LogWindow, outcome: StepOutcome, bar: Any) -> None:
        """Append a training record (mean loss, LR, tokens/s since the last one) and show it on the bar."""
        st = self.state
        elapsed = time.perf_counter() - window.start
        mean_loss = float(window.loss_sum) / max(1, window.count)
        record = {"step": st.step, "split": "train", "epoch": self._epoch_float(), "phase": st.position.phase,
                  "loss": mean_loss, "lr": outcome.lr, "tokens_per_s": window.tokens / max(elapsed, 1e-9)}
        if outcome.grad_norm is not None:
            record["grad_norm"] = float(outcome.grad_norm)
        st.tokens_seen += window.tokens
        self.logger.log(record)
        bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{outcome.lr:.2e}", tok_s=f"{record['tokens_per_s']:.0f}")
        window.reset()

    def _announce_profile(self) -> bool:
        """Say where the profile went, once, when its files have just been written."""
        written, self.profiler.written = self.profiler.written, None
        if written is not None:
            self._print(f"profile of steps {self.config.profile_from + 1}-{self.state.step} written to {written}")
        return written is not None

    def _stop(self, bar: Any) -> TrainResult:
        """A signal arrived: write a checkpoint and return an interrupted result."""
        signum = self._stop_signal or signal.SIGTERM
        self.profiler.close()
        folder = self.save_checkpoint()
        bar.close()
        self._bar = None
        self._print(f"stopped by signal {signum} at step {self.state.step}; checkpoint written to {folder}")
        self.logger.close()
        return self._result(interrupted=True, signum=signum)

    def _result(self, interrupted: bool = False, signum: int | None = None, final_dir: Path | None = None) -> TrainResult:
        best_dir = self.output_dir / BEST
        history = read_metrics(self.logger.path) if self.dist.is_main else []
        return TrainResult(
            global_step=self.state.step,
            final_metrics=self.last_metrics,
            best_metrics=self.state.best_metrics,
            best_dir=best_dir if self.dist.is_main and best_dir.is_dir() else None,
            final_dir=final_dir,
            history=history,
            interrupted=interrupted,
            signal=signum,
            resumes=[r for r in history if r.get("split") == "resume"],
        )
