"""The one trainer: pre-training and fine-tuning both run this loop.

A job contributes a model (any nn.Module whose forward takes the batch's keys and returns an output with
`.loss`), training data (or several `TrainPhase`s run as one schedule) and an `evaluate(model) -> dict` function.
What varies is a component the loop calls, each in its own module of bertkit.training (precision, batches,
schedule, checkpoint, provenance, distributed, profiling); users extend a run with callbacks.

Two guards keep a run honest: a non-finite loss or gradient norm stops the run before its update (every DDP rank
agrees), so nothing is ever written from NaN weights; and a resume must match the fingerprint of the run's data
and settings that each checkpoint stores (bertkit.training.provenance).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
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
from torch.utils.data import Dataset

from bertkit.errors import CheckpointError, ConfigError, TrainingError
from bertkit.io import make_dir
from bertkit.model.bert import set_activation_checkpointing
from bertkit.progress import progress_bar
from bertkit.runtime import keep_freed_memory
import bertkit.training.checkpoint as ckpt
from bertkit.training.batches import Batches, Position, Stream, TrainPhase, count_tokens, forward_loss, to_device
from bertkit.training.callbacks import Callback, EarlyStopping
from bertkit.training.config import TrainingConfig
from bertkit.training.distributed import DistInfo, all_gather_objects, any_rank, barrier, setup_distributed
from bertkit.training.logging import MetricsLogger, read_metrics, truncate_metrics
from bertkit.training.optim import build_optimizer
from bertkit.training.plots import plot_metrics
from bertkit.training.precision import Precision
from bertkit.training.profiling import StepProfiler
from bertkit.training.provenance import check_resume, normalise, training_fingerprint
from bertkit.training.schedule import build_scheduler, resolve_warmup
from bertkit.training.tracking import trackers

CHECKPOINTS = "checkpoints"
BEST = "best"
FINAL = "final"
CURVES = "curves.png"


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
    """One record per resume that led to this result: its step, checkpoint and what it changed (`changed`: name ->
    [checkpoint's, this run's])."""
    stop_reason: str | None = None
    """Why a callback ended the run before its last step (early stopping: the metric and its patience)."""


@dataclass
class TrainState:
    """The loop's own state, as a checkpoint saves it (key "trainer") beside the model, optimizer, scheduler, loss
    scaler and RNG states."""

    step: int = 0
    position: Position = field(default_factory=Position)
    best_value: float | None = None
    best_step: int | None = None
    best_metrics: dict[str, Any] | None = None
    last_eval_step: int | None = None
    tokens_seen: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "position": list(dataclasses.astuple(self.position))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainState":
        return cls(**{**d, "position": Position(*d["position"])})


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


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel (or compiled) wrapper."""
    while hasattr(model, "module") and isinstance(getattr(model, "module"), nn.Module):
        model = model.module
    return model


class Trainer:
    """Runs the training loop of a config over one or more phases; see the module docstring."""

    def __init__(self, model: nn.Module, config: TrainingConfig, train_data: Dataset | None = None,
                 collate_fn: Callable[[list[Any]], Any] | None = None,
                 evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
                 save_extra: Callable[[Path], None] | None = None, phases: Sequence[TrainPhase] | None = None,
                 dist_info: DistInfo | None = None, fingerprint: dict[str, Any] | None = None,
                 on_start: Callable[[], None] | None = None, callbacks: Sequence[Callback] = ()) -> None:
        """`fingerprint`: the job's data and settings a resume must match (the config's own are added here).
        `on_start`: writes the job's records on rank 0 once the run is known to start (after a resume was checked).
        `callbacks`: run after the built-in ones, on rank 0."""
        if phases is None:
            if train_data is None:
                raise ConfigError("Trainer needs train_data (or phases)")
            phases = [TrainPhase(train_data, collate_fn)]
        elif train_data is not None:
            raise ConfigError("Trainer: pass either train_data or phases, not both")
        self.config = config
        self.evaluate = evaluate
        self.save_extra = save_extra
        self.on_start = on_start
        self.fingerprint = normalise({**(fingerprint or {}), **training_fingerprint(config)})
        self.dist = dist_info or setup_distributed(config.device)
        self.device = self.dist.device
        self.precision = Precision(config.precision, self.device, config.bf16_weights)
        self.output_dir = Path(config.output_dir)
        self.model = model.to(self.device)
        if config.activation_checkpointing and not set_activation_checkpointing(self.model, True):
            raise ConfigError("training.activation_checkpointing: the model has no BERT encoder to checkpoint")
        self._stop_signal: int | None = None
        self._bar: Any = None  # the progress bar while a run shows one
        self.stop_reason: str | None = None
        self._job_callbacks = list(callbacks)
        self.callbacks: list[Callback] = []  # the built-in ones and the job's, chosen when a run starts
        self.batches = Batches(phases, config, self.dist)
        self.total_steps = self.batches.total_steps

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
    def save_checkpoint(self) -> Path:
        """Write checkpoints/step-N (every rank must call it: RNG states are gathered) and prune old ones."""
        self._check_weights_finite("a checkpoint")
        folder = ckpt.step_dir(self.output_dir / CHECKPOINTS, self.state.step)
        rng = ckpt.capture_rng_state()
        rng["collate"] = [ckpt.generator_state(g) for g in self.batches.collate_generators()]
        all_rng = all_gather_objects(rng, self.dist)
        if self.dist.is_main:
            state = {"model": unwrap(self.model).state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(), "scaler": self.precision.state_dict(),
                     "trainer": self.state.to_dict(), "rng": all_rng}
            meta = dict(self.batches.meta(), step=self.state.step, fingerprint=self.fingerprint)
            ckpt.save_training_state(folder, state, meta)
            ckpt.prune_checkpoints(self.output_dir / CHECKPOINTS, self.config.keep_last)
            self._call("on_save", folder)
        barrier()
        return folder

    def _load_checkpoint(self, folder: Path) -> None:
        """Restore everything `save_checkpoint` wrote (on every rank)."""
        state, meta = ckpt.load_training_state(folder)
        # First: it names the cause (other data) of a dataset size change.
        self._resume_record = check_resume(folder, meta, self.fingerprint, self.config.resume_mismatch, self._print)
        ckpt.check_compatible(folder, meta, self.batches.meta())
        path = folder / ckpt.STATE_FILE
        ckpt.load_model_state(unwrap(self.model), state["model"], path)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            sched = dict(state["scheduler"])
            # The schedule's shape comes from this run's config (max_steps may have grown), not the checkpoint.
            sched["lr_lambdas"] = [None] * len(self.scheduler.lr_lambdas)
            self.scheduler.load_state_dict(sched)
            self.precision.load_state_dict(state.get("scaler"))
        except (ValueError, KeyError, RuntimeError) as e:
            raise CheckpointError(f"{path}: optimizer/scheduler state does not match this model ({e})") from None
        self.state = TrainState.from_dict(state["trainer"])
        rng = state["rng"][self.dist.rank]
        ckpt.restore_rng_state(rng)
        for g, s in zip(self.batches.collate_generators(), rng.get("collate", [])):
            ckpt.set_generator_state(g, s)

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
    def _is_better(self, value: float) -> bool:
        best = self.state.best_value
        if not math.isfinite(value):
            return False  # a NaN score is never the best (and would never be beaten)
        return best is None or (value > best if self.config.greater_is_better else value < best)

    def run_evaluation(self) -> dict[str, Any] | None:
        """Evaluate on rank 0 (RNG untouched, eval mode), log, plot, and keep best/; all ranks wait."""
        self._check_weights_finite(f"{BEST}/")
        self.state.last_eval_step = self.state.step
        metrics = None
        if self.evaluate is not None and self.dist.is_main:
            model = unwrap(self.model)
            with ckpt.preserved_rng(), torch.no_grad(), self.precision.autocast():
                model.eval()
                try:
                    metrics = {k: (float(v) if isinstance(v, (int, float, Tensor)) else v)
                               for k, v in self.evaluate(model).items()}
                finally:
                    model.train()
            self._log({"step": self.state.step, "split": "eval", "epoch": self._epoch(), **metrics})
            self._plot()
            name = self.config.metric_for_best
            if name is not None:
                if name not in metrics:
                    raise ConfigError(f"TrainingConfig.metric_for_best = {name!r}, but evaluation returned only "
                                      f"{', '.join(metrics) or 'nothing'}")
                if self._is_better(float(metrics[name])):
                    st = self.state
                    st.best_value, st.best_step = float(metrics[name]), st.step
                    st.best_metrics = dict(metrics, step=st.step)
                    self._save_model_folder(self.output_dir / BEST)
            self.last_metrics = metrics
            self._call("on_evaluate", metrics)
        barrier()
        return metrics

    def _epoch(self) -> float:
        return self.batches.epoch_float(self.state.position)

    def _plot(self) -> None:
        if self.dist.is_main:
            plot_metrics(self.logger.path, self.output_dir / CURVES, title=self.output_dir.name)

    # --- the loop --------------------------------------------------------------------------------------------
    def _setup(self, resume: bool) -> None:
        c = self.config
        self.optimizer = build_optimizer(unwrap(self.model), c)
        self.scheduler = build_scheduler(self.optimizer, c.warmup, self.total_steps, c.schedule, c.decay)
        warmup_steps = resolve_warmup(c.warmup, self.total_steps)
        if warmup_steps >= self.total_steps:
            self._print(f"warning: TrainingConfig.warmup is {warmup_steps} steps but the run has {self.total_steps}: "
                        f"the learning rate never reaches its peak {c.lr:g} (give warmup as a fraction, e.g. 0.1)")
        for warning in [self.precision.warning()] + self._builtin_callbacks():
            if warning:
                self._print(warning)
        self.state = TrainState()
        self._resume_record: dict[str, Any] | None = None
        self.last_metrics: dict[str, Any] | None = None
        self.logger = MetricsLogger(self.output_dir, enabled=self.dist.is_main)
        if self.dist.is_main:
            ckpt.remove_leftovers(self.output_dir / CHECKPOINTS)  # of writes and deletions a kill interrupted
        latest = ckpt.latest_checkpoint(self.output_dir / CHECKPOINTS)
        if resume and latest is not None:
            self._load_checkpoint(latest)
            if self.dist.is_main:
                truncate_metrics(self.logger.path, self.state.step)
                self._print(f"resumed from {latest} at step {self.state.step}")
            return
        if latest is not None:
            raise ConfigError(f"{self.output_dir / CHECKPOINTS} already holds checkpoints ({latest.name}): resume "
                              "them (resume=True / --resume) or choose another output_dir")
        if (self.output_dir / FINAL).is_dir():  # a finished run that kept no checkpoint (checkpoint_at_end false)
            raise ConfigError(f"{self.output_dir / FINAL} holds a finished run's model and there is no checkpoint to "
                              "resume it from (it ended with checkpoint_at_end false): choose another output_dir, "
                              f"or remove {self.output_dir / FINAL} to train it again")
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
            if self._bar is not None:
                self._bar.write(text)  # above a terminal's bar
            else:
                print(text, file=sys.stderr, flush=True)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _steps_module(self) -> nn.Module:
        """The module the steps run: the model (or its bf16 working copy), under DDP and torch.compile as set."""
        model = self.precision.steps_module(self.model)  # made after a resume has loaded the weights
        if self.dist.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        mode = self.config.compile
        return model if mode == "none" else torch.compile(model, mode=None if mode == "default" else mode)

    def train(self, resume: bool = False) -> TrainResult:
        """Train to the end of the last phase (or until SIGINT/SIGTERM, or a callback's stop); `resume` continues the
        latest checkpoint. The output folder is locked for the run: a second job writing into it stops."""
        with ckpt.output_lock(self.output_dir, self.dist):
            return self._train(resume)

    def request_stop(self, reason: str) -> None:
        """End the run after the current step as at its last one (a callback's stop: early stopping)."""
        self.stop_reason = reason

    def _train(self, resume: bool) -> TrainResult:
        c = self.config
        keep_freed_memory()  # the steps and the loader's host batches reuse warm pages (bertkit.runtime)
        if self.dist.is_main:
            make_dir(self.output_dir)
        barrier()
        self._setup(resume)
        if self.on_start is not None and self.dist.is_main:
            self.on_start()
        self.profiler = StepProfiler(self.output_dir, c.profile_from, c.profile_steps, self.device,
                                     enabled=self.dist.is_main and self.state.step <= c.profile_from)
        if self.profiler.enabled and c.profile_from + c.profile_steps > self.total_steps:
            self._print(f"warning: TrainingConfig.profile_from + profile_steps = {c.profile_from + c.profile_steps} "
                        f"but the run has {self.total_steps} steps: the profile covers the steps there are")
        model = self._steps_module()
        model.train()
        st = self.state
        self._call("on_train_begin")
        self._bar = progress_bar(self.total_steps, self.output_dir.name, "step", initial=st.step,
                                 enabled=self.dist.is_main and c.progress_bar)
        try:
            if self._resume_record is not None:
                self._log(self._resume_record)
            if c.eval_at_start and st.step == 0:
                self.run_evaluation()  # the starting point's score (RNG untouched, like every evaluation)
            result = self._loop(model)
        except BaseException:
            self._close_bar()
            self.profiler.close()
            with contextlib.suppress(Exception):  # the run's own error is the one to raise
                self._call("on_train_end", None)
            raise
        self._call("on_train_end", result)
        return result

    def _loop(self, model: nn.Module) -> TrainResult:
        """The steps to the end of the last phase (or a callback's stop), the final evaluation, checkpoint and
        final/; or, after a signal, a checkpoint."""
        c, st = self.config, self.state
        window = _LogWindow(self.device)
        stream: Stream | None = None
        with self._signals():
            while st.step < self.total_steps:
                stream, st.position = self.batches.stream_at(st.step, st.position, stream)
                with self.profiler.step(st.step) as span:
                    outcome = self.train_step(model, stream)
                    span.tokens = outcome.tokens // self.dist.world_size
                st.step += 1
                if self._announce_profile():
                    window.start += self.profiler.write_seconds  # the logged tokens/s are the steps'
                self._bar.update(1)
                window.add(outcome)
                if st.step % c.log_every == 0 or st.step in (1, self.total_steps):  # the first step's: a curve at once
                    self._log_window(window, outcome)
                done = st.step >= self.total_steps
                due = (st.step % c.eval_every == 0) if c.eval_every else outcome.epoch_ended
                if due and not done:
                    self.run_evaluation()
                if c.save_every and st.step % c.save_every == 0 and not done:
                    self.save_checkpoint()
                if any_rank(self._stop_signal is not None or self.stop_reason is not None, self.dist):
                    if any_rank(self._stop_signal is not None, self.dist):
                        return self._stop()
                    self._print(f"stopped at step {st.step} of {self.total_steps}: {self.stop_reason}")
                    break
        self._close_bar()
        self.profiler.finish(note=f" (the run ended after {st.step - c.profile_from} of them)")
        self._announce_profile()
        if st.last_eval_step != st.step:
            self.run_evaluation()
        if c.checkpoint_at_end:
            self.save_checkpoint()
        final_dir = None
        if self.dist.is_main:
            final_dir = self.output_dir / FINAL
            self._save_model_folder(final_dir)
            self._plot()
        barrier()
        return self._result(final_dir=final_dir)

    def train_step(self, model: nn.Module, stream: Stream) -> StepOutcome:
        """One optimizer update: the phase's micro-batches with their gradients accumulated (DDP reduces them at the
        last one only), clipping, the finiteness guard, the optimizer and LR steps, computed as the Precision says."""
        st, precision = self.state, self.precision
        accum = self.batches.accum_steps(st.position.phase)
        loss_sum, tokens, epoch_ended = torch.zeros((), device=self.device), 0, False
        for micro in range(accum):
            batch, st.position, ended = next(stream)
            epoch_ended |= ended
            tokens += count_tokens(batch) * self.dist.world_size
            batch = to_device(batch, self.device)
            reduced = micro == accum - 1 or not self.dist.distributed
            with contextlib.nullcontext() if reduced else model.no_sync():
                with precision.autocast():
                    loss = forward_loss(model, batch)
                precision.backward(loss / accum, reduced)
            loss_sum += loss.detach().float()
        precision.unscale(self.optimizer)
        grad_norm = self._clip_gradients()
        self._stop_if_not_finite(loss_sum / accum, grad_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        precision.step(self.optimizer)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutcome(loss_sum, accum, tokens, lr, grad_norm, epoch_ended)

    def _clip_gradients(self) -> Tensor:
        """Clip the global gradient norm to max_grad_norm; the norm, measured when clipping is off too."""
        params = [p for p in unwrap(self.model).parameters() if p.requires_grad]
        if self.config.max_grad_norm is not None:
            return torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])

    def _stop_if_not_finite(self, loss: Tensor, grad_norm: Tensor) -> None:
        """Raise TrainingError on every rank, before the optimizer step, when any rank's loss (or, without fp16
        loss scaling, whose overflow signal an inf/NaN gradient is, its gradient norm) is inf or NaN."""
        checked = loss.detach().float().reshape(1)
        if not self.precision.scales_loss:
            checked = torch.cat([checked, grad_norm.detach().float().reshape(1).to(checked.device)])
        if not any_rank(~torch.isfinite(checked).all(), self.dist):
            return
        self.optimizer.zero_grad(set_to_none=True)
        st = self.state
        ph = self.batches.phases[st.position.phase]
        where = f"step {st.step + 1} (phase {st.position.phase} '{ph.name}', epoch {self._epoch()})"
        values = f"the loss is {float(loss):g}" + ("" if self.precision.scales_loss else
                                                    f", the gradient norm {float(grad_norm):g}")
        if bool(torch.isfinite(checked).all()):
            values = "the loss or gradient norm of another process is not finite"
        raise TrainingError(
            f"{self.output_dir}: training stopped at {where}: {values}. The weights were not updated with it and "
            f"nothing was saved from it. {self._kept()} Lower the learning rate (training.lr = {self.config.lr:g}), "
            "or look for extreme values in the training data.")

    def _log_window(self, window: _LogWindow, outcome: StepOutcome) -> None:
        """Append a training record (mean loss, LR, tokens/s since the last one) and show it on the bar."""
        st = self.state
        elapsed = time.perf_counter() - window.start
        mean_loss = float(window.loss_sum) / max(1, window.count)
        record = {"step": st.step, "split": "train", "epoch": self._epoch(), "phase": st.position.phase,
                  "loss": mean_loss, "lr": outcome.lr, "tokens_per_s": window.tokens / max(elapsed, 1e-9)}
        if outcome.grad_norm is not None:
            record["grad_norm"] = float(outcome.grad_norm)
        st.tokens_seen += window.tokens
        self._log(record)
        self._bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{outcome.lr:.2e}", tok_s=f"{record['tokens_per_s']:.0f}")
        window.reset()

    def _announce_profile(self) -> bool:
        """Say where the profile went, once, when its files have just been written."""
        written, self.profiler.written = self.profiler.written, None
        if written is not None:
            self._print(f"profile of steps {self.config.profile_from + 1}-{self.state.step} written to {written}")
        return written is not None

    def _stop(self) -> TrainResult:
        """A signal arrived: write a checkpoint and return an interrupted result."""
        signum = self._stop_signal or signal.SIGTERM
        self.profiler.close()
        folder = self.save_checkpoint()
        self._close_bar()
        self._print(f"stopped by signal {signum} at step {self.state.step}; checkpoint written to {folder}")
        return self._result(interrupted=True, signum=signum)

    def _result(self, interrupted: bool = False, signum: int | None = None,
                final_dir: Path | None = None) -> TrainResult:
        best_dir = self.output_dir / BEST
        history = read_metrics(self.logger.path) if self.dist.is_main else []
        return TrainResult(
            global_step=self.state.step, final_metrics=self.last_metrics, best_metrics=self.state.best_metrics,
            best_dir=best_dir if self.dist.is_main and best_dir.is_dir() else None, final_dir=final_dir,
            history=history, interrupted=interrupted, signal=signum, stop_reason=self.stop_reason,
            resumes=[r for r in history if r.get("split") == "resume"])

    # --- callbacks -------------------------------------------------------------------------------------------
    def _builtin_callbacks(self) -> list[str]:
        """Put the config's trackers and early stopping before the job's callbacks (rank 0); their warnings."""
        c = self.config
        if not self.dist.is_main:
            self.callbacks = []
            return []
        chosen, warnings = trackers(c.report_to)
        if c.early_stopping_patience is not None and c.metric_for_best is not None:
            chosen.append(EarlyStopping(c.metric_for_best, c.early_stopping_patience, c.early_stopping_min_delta,
                                        c.greater_is_better))
        self.callbacks = [*chosen, *self._job_callbacks]
        return warnings

    def _call(self, hook: str, *args: Any) -> None:
        """Call `hook` of every callback, in order (rank 0 only: the others have none)."""
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def _log(self, record: dict[str, Any]) -> None:
        """Append a record to metrics.jsonl and hand it to the callbacks."""
        self.logger.log(record)
        self._call("on_log", record)
