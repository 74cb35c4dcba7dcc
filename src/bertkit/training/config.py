"""`TrainingConfig`: every setting of the one trainer, with the BERT paper's pre-training defaults.

Defaults follow Devlin et al. 2019, appendix A.2 ("Adam with learning rate of 1e-4, beta1 = 0.9, beta2 = 0.999,
L2 weight decay of 0.01, learning rate warmup over the first 10,000 steps, and linear decay of the learning rate")
and google-research/bert `optimization.py` (epsilon 1e-6, no decay on LayerNorm and bias, clipping at global norm
1.0). Fine-tuning jobs pass their own lr, epochs and warmup.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bertkit.dataclass_io import (  # noqa: F401 (re-exported: the trainer's configs are built with these)
    DEVICE,
    SEED_LIMIT,
    Config,
    config_from_dict,
    dump_config,
    field_docs,
    read_config_file,
    save_config,
    spec,
)
from bertkit.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SCHEDULES = ("linear", "cosine", "constant", "warmup-stable-decay")
TRACKERS = ("tensorboard", "mlflow", "wandb")
OPTIMIZERS = ("adamw", "lamb")
RESUME_MISMATCH = ("error", "warn")
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
MAX_STEPS = 10**12  # far beyond any run, well inside every integer type the schedule and the counters use


@dataclass
class TrainingConfig(Config):
    """How the trainer optimises a model: optimiser, schedule, batching, precision, evaluation, checkpoints."""

    output_dir: str = spec("runs/bertkit", empty=True)
    """Folder of checkpoints/, best/, final/, metrics.jsonl, curves.png (and the trackers' tensorboard/, mlruns/,
    wandb/)."""

    # --- optimiser (paper appendix A.2; google-research/bert optimization.py) ---
    optimizer: str = spec("adamw", choices=OPTIMIZERS)
    """'adamw' (decoupled weight decay, the paper's optimiser) or 'lamb' (You et al. 2019, for very large batches)."""
    lr: float = spec(1e-4, gt=0, le=1)
    """Peak learning rate after warm-up (paper pre-training: 1e-4; fine-tuning passes 2e-5..5e-5)."""
    weight_decay: float = spec(0.01, ge=0, le=1)
    """Decoupled weight decay; never applied to biases and LayerNorm weights (reference `exclude_from_weight_decay`)."""
    adam_beta1: float = spec(0.9, ge=0, lt=1)
    """First-moment decay (paper: 0.9)."""
    adam_beta2: float = spec(0.999, ge=0, lt=1)
    """Second-moment decay (paper: 0.999)."""
    adam_eps: float = spec(1e-6, gt=0, le=1e-3, why="Adam divides every update by sqrt(v) + eps: a large eps turns "
                           "the updates off (BERT uses 1e-6, torch 1e-8)")
    """Denominator epsilon; google-research/bert uses 1e-6, not torch's 1e-8."""
    max_grad_norm: float | None = spec(1.0, gt=0, le=1e6)
    """Clip the global gradient norm to this (reference: 1.0); None disables clipping."""
    head_lr_scale: float = spec(1.0, gt=0, le=1e4)
    """Multiplier of `lr` for the parameters outside the pre-trained encoder (`bert.`): a new task head, and the
    embeddings of a classifier's non-text columns. 1.0 is the paper's single rate; a freshly initialised layer fed
    by a few standardised numbers moves too slowly at a fine-tuning rate to use them (docs/guide/columns.md)."""

    # --- schedule ---
    schedule: str = spec("linear", choices=SCHEDULES)
    """The learning rate after warm-up (bertkit.training.schedule): 'linear' decay to 0 (the paper's), 'cosine'
    decay to 0, 'constant' at the peak, or 'warmup-stable-decay' (the peak until the last `decay` steps, then linear
    to 0: a run that can be extended or cut without restarting its schedule)."""
    warmup: float = spec(10_000, ge=0, le=MAX_STEPS)
    """Linear warm-up: a number of steps when >= 1 (paper: 10,000), a fraction of all steps when < 1 (e.g. 0.1)."""
    decay: float = spec(0.1, ge=0, le=MAX_STEPS)
    """The final decay of schedule 'warmup-stable-decay': a number of steps when >= 1, a fraction of all steps when
    < 1 (0.1: the last 10%, as MiniCPM, Hu et al. 2024). The other schedules ignore it."""
    max_steps: int | None = spec(None, ge=1, le=MAX_STEPS)
    """Optimizer updates to run (paper: 1,000,000); when set it overrides `epochs`."""
    epochs: float = spec(3.0, gt=0, le=1e6)
    """Passes over the training data when max_steps is None (fine-tuning's usual 2-4)."""

    # --- batching ---
    batch_size: int = spec(32, ge=1, le=2**20)
    """Sequences per micro-batch on each process. The paper's 256-sequence batch = batch_size x
    grad_accum_steps x processes (e.g. 32 x 8 x 1)."""
    grad_accum_steps: int = spec(1, ge=1, le=2**16)
    """Micro-batches whose gradients are summed before one optimizer update."""
    shuffle: bool = True
    """Shuffle the training data each epoch (the order is a pure function of seed and epoch)."""
    drop_last: bool = False
    """Drop the last incomplete batch of each epoch."""
    num_workers: int = spec(0, ge=0, le=256)
    """DataLoader worker processes (0 = load in the training process)."""

    # --- numerics and device ---
    precision: str = spec("auto", choices=PRECISIONS)
    """'auto' (bf16 autocast on a CUDA GPU that supports it, fp16 + loss scaling on older GPUs, fp32 on CPU),
    'fp32', 'bf16' (on a CPU too, fast only with bf16 matrix units, AVX512-BF16 or AMX: elsewhere PyTorch emulates
    it, many times slower than fp32, and the trainer warns) or 'fp16' (CUDA only)."""
    bf16_weights: bool = False
    """With bf16 precision: run the training steps on a bf16 copy of the model, the float32 weights kept as the
    optimizer's master copy (bertkit.training.precision), instead of autocast re-casting float32 weights and
    activations in every step. Activations, LayerNorms and the residual stream are then bf16 too (looser than
    autocast); the update, checkpoints and saved models stay float32. Gradients of a step's micro-batches add up in
    float32 (in bf16 under torch.distributed, where DDP reduces them)."""
    device: str = spec("auto", **DEVICE)
    """'auto' (the local CUDA GPU if any, else CPU), 'cpu', 'cuda', or 'cuda:N'."""
    activation_checkpointing: bool = False
    """Recompute each encoder layer's activations in the backward pass instead of keeping them: about a third more
    compute for far less activation memory (larger batches or longer sequences fit on one GPU)."""
    compile: str = spec("none", choices=COMPILE_MODES)
    """torch.compile the model for the training steps (evaluation stays eager): 'none', 'default', 'reduce-overhead'
    (CUDA graphs on a GPU: fixed shapes only; pre-training's `execution` group has the levers that fix them) or
    'max-autotune'. The first steps are slow while it compiles; the weights and checkpoints are the eager model's."""
    seed: int = spec(42, ge=0, le=SEED_LIMIT)
    """Seed of every random choice: shuffling, dropout, masking (each process adds its rank for dropout)."""

    # --- evaluation, checkpoints, logging ---
    eval_every: int | None = spec(None, ge=1, le=MAX_STEPS)
    """Evaluate every N optimizer steps; None = at the end of every epoch (and always at the end of training)."""
    eval_at_start: bool = False
    """Also evaluate once before the first step (not on resume): the starting score in metrics.jsonl, for a run that
    starts from a trained model (continued pre-training, fine-tuning), so its gain can be read off."""
    metric_for_best: str | None = spec("loss")
    """Evaluation metric that picks the `best/` model; None keeps no best model."""
    greater_is_better: bool = False
    """Whether a larger `metric_for_best` is better (False for a loss, True for an accuracy)."""
    early_stopping_patience: int | None = spec(None, ge=1, le=MAX_STEPS)
    """Stop the run when `metric_for_best` has not improved for this many evaluations in a row (then it ends as at
    its last step: checkpoint, final/; best/ holds the best model); None never stops early."""
    early_stopping_min_delta: float = spec(0.0, ge=0, le=1e12)
    """What counts as an improvement for early stopping: better than the best so far by more than this."""
    save_every: int | None = spec(None, ge=1, le=MAX_STEPS)
    """Write a training-state checkpoint every N steps; None = only at the end (see checkpoint_at_end) and on
    SIGINT/SIGTERM."""
    checkpoint_at_end: bool = True
    """Write a training-state checkpoint when the run ends (so a later run can resume it with more steps); False
    writes only the model (final/, best/), as transformers' save_strategy='no', and the output folder then takes no
    new run. A signal always writes one."""
    keep_last: int = spec(2, ge=1, le=10_000)
    """Training-state checkpoints kept in checkpoints/ (older ones are deleted)."""
    log_every: int = spec(10, ge=1, le=MAX_STEPS)
    """Append a training record (loss, lr, tokens/s) to metrics.jsonl every N steps, and after the first step."""
    report_to: list[str] = spec(default_factory=list, empty=True, choices=TRACKERS)
    """Trackers that also receive every record (bertkit.training.tracking): 'tensorboard' (events in
    output_dir/tensorboard), 'mlflow' (a run in MLFLOW_TRACKING_URI, else the local store output_dir/mlruns),
    'wandb' (offline unless WANDB_MODE says otherwise, in output_dir/wandb). Each needs its extra
    (pip install 'bertkit[mlflow]'); a missing one is a warning. metrics.jsonl and curves.png are always written."""
    progress_bar: bool = True
    """Show a tqdm progress bar (rank 0 only)."""
    profile_steps: int = spec(0, ge=0, le=10_000)
    """Profile this many optimizer steps with torch.profiler (the CPU's ops, and the GPU's on a GPU), one span around
    each step, its parts the loader's, the optimizer's and the rest: rank 0 writes profile.txt (time per step, the
    parts' shares, the top ops) and profile-trace.json (for ui.perfetto.dev) to output_dir
    (bertkit.training.profiling). 0 = off."""
    profile_from: int = spec(20, ge=0, le=MAX_STEPS)
    """The steps done before the profile starts (past the warm-up, compilation and the loader's start)."""
    resume_mismatch: str = spec("error", choices=RESUME_MISMATCH)
    """What a resume does when the data or a setting that changes the result differs from the checkpoint's
    (bertkit.training.provenance): 'error' refuses, naming each difference; 'warn' continues, printing the
    differences and noting them in metrics.jsonl (and results.json). Steps, epochs, evaluation/checkpoint cadence
    and display may always change."""

    def validate(self) -> None:
        """The rules between fields (each field's own range is declared beside it)."""
        if self.bf16_weights:
            check_bf16_weights(self.precision)
        if self.early_stopping_patience is not None and self.metric_for_best is None:
            raise ConfigError("TrainingConfig.early_stopping_patience is set but metric_for_best is None: early "
                              "stopping watches metric_for_best")
        for name in ("warmup", "decay"):
            value = getattr(self, name)
            if 1 < value and not float(value).is_integer():
                raise ConfigError(f"TrainingConfig.{name}: expected a step count >= 1 or a fraction in [0, 1), "
                                  f"found {value!r}")

    @classmethod
    def from_older(cls, d: dict[str, Any]) -> dict[str, Any]:
        """An older TrainingConfig's fields as today's: `tensorboard: true/false` is `report_to: [tensorboard]/[]`."""
        if "tensorboard" not in d:
            return d
        d = dict(d)
        on = d.pop("tensorboard")
        d.setdefault("report_to", ["tensorboard"] if on else [])
        return d


def check_bf16_weights(precision: str, resolved: str | None = None, device: str = "") -> None:
    """The one rule of TrainingConfig.bf16_weights: the steps must run in bf16. Checked when the config is built
    (an explicit 'fp32' or 'fp16') and by the trainer once 'auto' is resolved on its device."""
    actual = resolved or precision
    if actual in ("fp32", "fp16"):
        on = f" ({actual} on {device})" if actual != precision else ""
        raise ConfigError(f"TrainingConfig.bf16_weights = True with precision = {precision!r}{on}: bf16 weights need "
                          "precision 'bf16' (or 'auto' on a GPU that supports bf16)")
