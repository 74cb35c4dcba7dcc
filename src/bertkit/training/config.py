"""`TrainingConfig`: every setting of the one trainer, with the BERT paper's pre-training defaults.

Defaults follow Devlin et al. 2019, appendix A.2 ("Adam with learning rate of 1e-4, beta1 = 0.9, beta2 = 0.999,
L2 weight decay of 0.01, learning rate warmup over the first 10,000 steps, and linear decay of the learning rate")
and google-research/bert `optimization.py` (AdamWeightDecayOptimizer: epsilon 1e-6, no decay on LayerNorm and
bias, gradient clipping at global norm 1.0). Fine-tuning jobs pass their own lr, epochs and warmup.

Configs are plain dataclasses that round-trip through JSON and YAML (bertkit.dataclass_io): a typo or a string
where a number belongs fails with the field's name.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bertkit.dataclass_io import (  # noqa: F401 (re-exported: the trainer's configs are built with these)
    config_from_dict,
    dump_config,
    field_docs,
    read_config_file,
    save_config,
)
from bertkit.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "lamb")
RESUME_MISMATCH = ("error", "warn")
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")



@dataclass
class TrainingConfig:
    """How the trainer optimises a model: optimiser, schedule, batching, precision, evaluation, checkpoints."""

    output_dir: str = "runs/bertkit"
    """Folder of checkpoints/, best/, final/, metrics.jsonl, curves.png (and tensorboard/)."""

    # --- optimiser (paper appendix A.2; google-research/bert optimization.py) ---
    optimizer: str = "adamw"
    """'adamw' (decoupled weight decay, the paper's optimiser) or 'lamb' (You et al. 2019, for very large batches)."""
    lr: float = 1e-4
    """Peak learning rate after warm-up (paper pre-training: 1e-4; fine-tuning passes 2e-5..5e-5)."""
    weight_decay: float = 0.01
    """Decoupled weight decay; never applied to biases and LayerNorm weights (reference `exclude_from_weight_decay`)."""
    adam_beta1: float = 0.9
    """First-moment decay (paper: 0.9)."""
    adam_beta2: float = 0.999
    """Second-moment decay (paper: 0.999)."""
    adam_eps: float = 1e-6
    """Denominator epsilon; google-research/bert uses 1e-6, not torch's 1e-8."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this (reference: 1.0); None disables clipping."""
    head_lr_scale: float = 1.0
    """Multiplier of `lr` for the parameters outside the pre-trained encoder (`bert.`): a new task head, and the
    embeddings of a classifier's non-text columns. 1.0 is the paper's single rate; a freshly initialised layer fed
    by a few standardised numbers moves too slowly at a fine-tuning rate to use them (docs/guide/columns.md)."""

    # --- schedule ---
    warmup: float = 10_000
    """Linear warm-up: a number of steps when >= 1 (paper: 10,000), a fraction of all steps when < 1 (e.g. 0.1)."""
    max_steps: int | None = None
    """Optimizer updates to run (paper: 1,000,000); when set it overrides `epochs`."""
    epochs: float = 3.0
    """Passes over the training data when max_steps is None (fine-tuning's usual 2-4)."""

    # --- batching ---
    batch_size: int = 32
    """Sequences per micro-batch on each process. The paper's 256-sequence batch = batch_size x
    grad_accum_steps x processes (e.g. 32 x 8 x 1)."""
    grad_accum_steps: int = 1
    """Micro-batches whose gradients are summed before one optimizer update."""
    shuffle: bool = True
    """Shuffle the training data each epoch (the order is a pure function of seed and epoch)."""
    drop_last: bool = False
    """Drop the last incomplete batch of each epoch."""
    num_workers: int = 0
    """DataLoader worker processes (0 = load in the training process)."""

    # --- numerics and device ---
    precision: str = "auto"
    """'auto' (bf16 autocast on a CUDA GPU that supports it, fp16 + loss scaling on older GPUs, fp32 on CPU),
    'fp32', 'bf16' (on a CPU too, fast only with bf16 matrix units, AVX512-BF16 or AMX: elsewhere PyTorch emulates
    it, many times slower than fp32, and the trainer warns) or 'fp16' (CUDA only)."""
    bf16_weights: bool = False
    """With bf16 precision: run the training steps on a bf16 copy of the model, the float32 weights kept as the
    optimizer's master copy (bertkit.training.bf16_weights), instead of autocast re-casting float32 weights and
    activations in every step. Activations, LayerNorms and the residual stream are then bf16 too (looser than
    autocast); the update, checkpoints and saved models stay float32. Gradients of a step's micro-batches add up in
    float32 (in bf16 under torch.distributed, where DDP reduces them)."""
    device: str = "auto"
    """'auto' (the local CUDA GPU if any, else CPU), 'cpu', 'cuda', or 'cuda:N'."""
    activation_checkpointing: bool = False
    """Recompute each encoder layer's activations in the backward pass instead of keeping them: about a third more
    compute for far less activation memory (larger batches or longer sequences fit on one GPU)."""
    compile: str = "none"
    """torch.compile the model for the training steps (evaluation stays eager): 'none', 'default', 'reduce-overhead'
    (CUDA graphs on a GPU: fixed shapes only, so pre-train with `unpadded: false` and sparse MLM in fixed slots,
    `mlm_slots`, or off) or 'max-autotune'. The first steps are slow while it compiles; the weights and
    checkpoints are the eager model's."""
    seed: int = 42
    """Seed of every random choice: shuffling, dropout, masking (each process adds its rank for dropout)."""

    # --- evaluation, checkpoints, logging ---
    eval_every: int | None = None
    """Evaluate every N optimizer steps; None = at the end of every epoch (and always at the end of training)."""
    eval_at_start: bool = False
    """Also evaluate once before the first step (not on resume): the starting score in metrics.jsonl, for a run that
    starts from a trained model (continued pre-training, fine-tuning), so its gain can be read off."""
    metric_for_best: str | None = "loss"
    """Evaluation metric that picks the `best/` model; None keeps no best model."""
    greater_is_better: bool = False
    """Whether a larger `metric_for_best` is better (False for a loss, True for an accuracy)."""
    save_every: int | None = None
    """Write a training-state checkpoint every N steps; None = only at the end (and on SIGINT/SIGTERM)."""
    keep_last: int = 2
    """Training-state checkpoints kept in checkpoints/ (older ones are deleted)."""
    log_every: int = 10
    """Append a training record (loss, lr, tokens/s) to metrics.jsonl every N steps."""
    tensorboard: bool = True
    """Also write TensorBoard events under output_dir/tensorboard when tensorboard is installed."""
    progress_bar: bool = True
    """Show a tqdm progress bar (rank 0 only)."""
    profile_steps: int = 0
    """Profile this many optimizer steps with torch.profiler (the CPU's ops, and the GPU's on a GPU), each step's
    parts marked (loader, copy to the device, forward, backward, finiteness check, optimizer): rank 0 writes
    profile.txt (time per step, the parts' shares, the top ops) and profile-trace.json (for ui.perfetto.dev) to
    output_dir (bertkit.training.profiling). 0 = off."""
    profile_from: int = 20
    """The steps done before the profile starts (past the warm-up, compilation and the loader's start)."""
    resume_mismatch: str = "error"
    """What a resume does when the data or a setting that changes the result differs from the checkpoint's
    (bertkit.training.provenance): 'error' refuses, naming each difference; 'warn' continues, printing the
    differences and noting them in metrics.jsonl (and results.json). Steps, epochs, evaluation/checkpoint cadence
    and display may always change."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first field that is out of range."""

        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"TrainingConfig.{name} = {getattr(self, name)!r}: expected {expected}")

        if self.optimizer not in OPTIMIZERS:
            raise bad("optimizer", f"one of {', '.join(OPTIMIZERS)}")
        if self.resume_mismatch not in RESUME_MISMATCH:
            raise bad("resume_mismatch", f"one of {', '.join(RESUME_MISMATCH)}")
        if self.precision not in PRECISIONS:
            raise bad("precision", f"one of {', '.join(PRECISIONS)}")
        if self.bf16_weights and self.precision in ("fp32", "fp16"):
            raise ConfigError(f"TrainingConfig.bf16_weights = True with precision = {self.precision!r}: bf16 weights "
                              "need precision 'bf16' (or 'auto' on a GPU that supports bf16)")
        if not self.lr > 0:
            raise bad("lr", "a positive number")
        if self.weight_decay < 0:
            raise bad("weight_decay", "a number >= 0")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise bad(name, "a number in [0, 1)")
        if not self.adam_eps > 0:
            raise bad("adam_eps", "a positive number")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise bad("max_grad_norm", "a positive number or null")
        if not self.head_lr_scale > 0:
            raise bad("head_lr_scale", "a positive number")
        if self.warmup < 0:
            raise bad("warmup", "a step count >= 1, a fraction in [0, 1), or 0")
        if self.max_steps is not None and self.max_steps < 1:
            raise bad("max_steps", "an integer >= 1 or null")
        if not self.epochs > 0:
            raise bad("epochs", "a positive number")
        for name in ("batch_size", "grad_accum_steps", "keep_last", "log_every"):
            if getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        for name in ("profile_steps", "profile_from"):
            if getattr(self, name) < 0:
                raise bad(name, "an integer >= 0")
        for name in ("eval_every", "save_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "an integer >= 1 or null")
        if self.num_workers < 0:
            raise bad("num_workers", "an integer >= 0")
        if self.compile not in COMPILE_MODES:
            raise bad("compile", f"one of {', '.join(COMPILE_MODES)}")

    # --- serialisation -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON/YAML-ready)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "TrainingConfig") -> "TrainingConfig":
        """Inverse of `to_dict`; unknown keys and wrong types are errors naming the field."""
        return config_from_dict(cls, d, where)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config atomically as JSON or YAML (by the file's suffix)."""
        save_config(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TrainingConfig":
        """Read a config written by `save` (JSON or YAML)."""
        return config_from_dict(cls, read_config_file(path), str(path))
