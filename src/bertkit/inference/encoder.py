"""Fast sentence embeddings: sort by length, batch by a token budget, and let BertModel skip the padding.

What makes it fast on CPU (benchmarks/bench_embed.py; the float32 matrix products are the wall):
- Length-sorted batches under a token budget, each of one width (WIDTH_STEP): little padding, large GEMMs, and a
  text's embedding that does not depend on its batch.
- BertModel's own packed execution (bertkit.model.kernels.Packing): linear layers, LayerNorm and GELU run on the real
  tokens only. This module runs the model; it does not re-implement it.
- glibc malloc told to keep freed memory (`bertkit.runtime.keep_freed_memory`): each batch allocates and frees tens of
  MB of activations, which glibc would otherwise unmap and page-fault in again (docs/results/embeddings-*.md).
- `torch.inference_mode`, optional calibrated static int8 (CPU; bertkit.inference.quantize), bfloat16 weights (GPU,
  or a CPU with native bf16 GEMMs), optional `torch.compile`.
In float32 the result equals the plain padded path (tests/inference/inference_helpers.py) within 1e-5.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.dataclass_io import check_value
from bertkit.errors import ConfigError
from bertkit.inference.options import EncodeOptions, check_window
from bertkit.inference.pooling import DEFAULT_POOLING, check_pooling, folder_defaults, pad_batch, pool_hidden
from bertkit.inference.precision import DEFAULT_PRECISION, choose_precision
from bertkit.inference.quantize import (
    DEFAULT_MIN_COSINE,
    MIN_INT8_DISTINCT_TOKENS,
    Int8Plan,
    calibrate_int8,
    choose_int8_kernel,
    default_calibration_texts,
    quantize_int8,
    runs_in_int8,
)
from bertkit.model import BertPreTrainedModel
from bertkit.model.execution import Execution
from bertkit.model.heads import base_model
from bertkit.runtime import keep_freed_memory

log = logging.getLogger(__name__)

# A batch is padded to its longest length rounded up to a multiple of this, and holds only sequences that round to
# the same width. Attention's arithmetic depends on the width a sequence is padded to (torch's CPU kernel blocks and
# sums by it), so this way an embedding depends on its sequence alone, not on its batch-mates; int8, which rounds
# every product's input to a grid, needs that (docs/results/int8-short-texts-epyc-avx2-2026-11-25.md).
WIDTH_STEP = 16
# bf16 on a CPU: a batch whose padding is at most this fraction of its positions runs every position (shapes that
# repeat, for oneDNN's per-shape kernels), one with more runs packed (docs/results/embed-cpu-xeon-amx-2026-11-27.md).
MAX_PADDING_TO_PAD = 0.125


def runs_padded(lengths: Sequence[int], width: int) -> bool:
    """Whether a bf16 CPU batch of sequences of these lengths, padded to `width`, runs every position."""
    return 1 - sum(lengths) / (width * len(lengths)) <= MAX_PADDING_TO_PAD


def padded_width(length: int, max_width: int | None = None) -> int:
    """The width a sequence of `length` tokens attends at: rounded up to a multiple of WIDTH_STEP, at most
    `max_width` (the longest sequence the model's positions cover, where that is no multiple) and never below
    `length`."""
    width = -(-length // WIDTH_STEP) * WIDTH_STEP
    return max(length, min(width, max_width)) if max_width is not None else width


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens_per_batch: int | None,
                 max_width: int | None = None) -> list[list[int]]:
    """Indices sorted by length (longest first), cut into batches of one `padded_width`, of at most `batch_size`
    sequences and at most `max_tokens_per_batch` padded tokens (width x count), so every batch is nearly
    padding-free and every sequence attends at a width of its own (see WIDTH_STEP)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = padded_width(lengths[current[0]] if current else lengths[i], max_width)
        too_many = len(current) >= batch_size
        too_long = max_tokens_per_batch is not None and width * (len(current) + 1) > max_tokens_per_batch
        other_width = padded_width(lengths[i], max_width) != width
        if current and (too_many or too_long or other_width):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class Encoder:
    """Turn texts into sentence embeddings quickly: `Encoder(folder).encode(texts)` -> (n, hidden) float32 tensor.

    precision: "auto" (the default): bf16 where the hardware has bf16 matrix units, else fp32, never int8
    (`choose_precision`); "fp32" (exact), "bf16" (bfloat16 weights and activations), "int8" (CPU only: calibrated
    static int8 in the linear layers, the most error-prone kept in float32, and texts of fewer than
    `int8_plan.min_distinct_tokens` distinct tokens run wholly in float32 by `float_bert`, a float32 copy).
    `precision` and `precision_reason` say what was chosen.
    defaults: pooling / normalize / max_length for what the call leaves unset (`folder_defaults`, read from the folder
    when `model` is one); else mean pooling, no normalisation, the position limit.
    calibration (int8 only): the texts to calibrate on (never those you evaluate on; default
    `default_calibration_texts`), or an `Int8Plan` computed before (`int8_plan` holds the one used). int8_kernel:
    "fbgemm" or "onednn" (default `choose_int8_kernel`'s; `int8_kernel` holds the one used).
    Embeddings do not depend on the batch size or the other texts of a batch, in int8 bit for bit (WIDTH_STEP).
    The linear layers run on the real tokens only (packed), except in bf16 on a CPU for a batch of little padding
    (`runs_padded`): oneDNN builds a kernel per matrix shape, and a packed token count is new in nearly every batch,
    while padded shapes (width x count) repeat.
    On CPU it also makes glibc malloc keep freed memory, process-wide (`keeps_freed_memory`; bertkit.runtime).
    """

    def __init__(
        self,
        model: str | Path | BertPreTrainedModel,
        tokenizer: Any = None,
        *,
        precision: str = DEFAULT_PRECISION,
        device: str | torch.device | None = None,
        compile: bool = False,
        max_length: int | None = None,
        defaults: dict[str, Any] | None = None,
        calibration: Sequence[str] | Int8Plan | None = None,
        int8_min_cosine: float = DEFAULT_MIN_COSINE,
        int8_kernel: str | None = None,
    ) -> None:
        precision = check_value(EncodeOptions, "precision", precision, "precision")
        max_length = check_value(EncodeOptions, "max_length", max_length, "max_length")
        if isinstance(device, str):
            device = check_value(EncodeOptions, "device", device, "device")
            device = None if device == "auto" else device
        if isinstance(model, (str, Path)):
            import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config naming only its task opens)
            from bertkit.model.folder import open_folder

            opened = open_folder(model)
            tokenizer = tokenizer if tokenizer is not None else opened.tokenizer
            model = opened.model
            defaults = folder_defaults(opened.path) if defaults is None else defaults
        if tokenizer is None:
            raise ConfigError("Encoder needs a tokenizer when given a model object (or pass a model folder)")
        bert = base_model(model)
        self.config = bert.config
        self.tokenizer = tokenizer
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        # On CPU, batches reuse warm freed pages instead of page-faulting them in (process-wide; BERTKIT_MALLOC=default
        # opts out). False on GPU, where it does not apply, or where the C library has no mallopt.
        self.keeps_freed_memory = self.device.type == "cpu" and keep_freed_memory()
        if self.keeps_freed_memory:
            log.info("malloc keeps freed memory for the next batch (process-wide; BERTKIT_MALLOC=default opts out)")
        precision, self.precision_reason = choose_precision(precision, self.device)
        self.precision = precision
        log.info("Encoder precision %s (%s)", precision, self.precision_reason)
        defaults = defaults or {}
        self.default_pooling: str = defaults.get("pooling", DEFAULT_POOLING)
        check_pooling(self.default_pooling)
        self.default_normalize: bool = defaults.get("normalize", False)
        self.max_length = check_window(max_length or defaults.get("max_length") or self.config.max_sequence_length,
                                       self.config)
        self.int8_plan: Int8Plan | None = None
        self.int8_kernel: str | None = None  # int8 only: "fbgemm" or "onednn" (choose_int8_kernel)
        self.float_bert: nn.Module | None = None  # int8 only: a float32 copy, for texts of few distinct tokens
        # bf16 on a CPU: batches of little padding run padded, for a bounded set of matrix shapes (class doc)
        self.pads_batches = precision == "bf16" and self.device.type == "cpu"
        if precision == "int8":
            if self.device.type != "cpu":
                raise ConfigError(f"precision 'int8' runs on CPU only, got device {self.device}")
            self.int8_kernel, kernel_reason = choose_int8_kernel(int8_kernel)
            log.info("int8 products on %s (%s)", self.int8_kernel, kernel_reason)
            self.int8_plan = calibration if isinstance(calibration, Int8Plan) else self.calibrate(
                bert, calibration or default_calibration_texts(), int8_min_cosine)
            self.float_bert = quantize_int8(bert, self.int8_plan, units=set())  # a float32 copy, rows as in int8
            bert = quantize_int8(bert, self.int8_plan, kernel=self.int8_kernel)
            log.info("int8: %d of %d matrix products in int8 (float32: %s); calibration min cosine %.5f; texts of "
                     "fewer than %d distinct tokens in float32", len(self.int8_plan.input_ranges)
                     - len(self.int8_plan.float_units), len(self.int8_plan.input_ranges),
                     ", ".join(self.int8_plan.float_units) or "none", self.int8_plan.min_cosine,
                     self.int8_plan.min_distinct_tokens)
        elif precision == "bf16":
            bert = copy.deepcopy(bert).to(torch.bfloat16)  # the caller's model stays float32
        self.bert = bert.to(self.device)
        self._forward = torch.compile(self.bert, dynamic=True) if compile else self.bert

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], cut to max_length (a warning counts the texts cut)."""
        ids, cut, limit = [], 0, self.max_length
        for text in texts:
            if not isinstance(text, str):
                raise ConfigError(f"texts must be strings, got {type(text).__name__}")
            enc = self.tokenizer.encode(text, max_length=limit, truncation=True, return_overflowing=True)
            cut += bool(getattr(enc, "overflowing", None))
            ids.append(list(enc.input_ids))
        if cut:
            warnings.warn(f"{cut} of {len(texts)} texts were longer than {limit} tokens and were truncated",
                          stacklevel=3)
        return ids

    def encode(self, texts: Sequence[str] | str, **options: Any) -> Tensor:
        """Embed texts, returned in the input order as a (n, hidden) float32 CPU tensor; `options` (pooling,
        normalize, batch_size, max_tokens_per_batch, on_batch) as `encode_ids` takes them."""
        return self.encode_ids(self.tokenize([texts] if isinstance(texts, str) else texts), **options)

    def encode_ids(
        self,
        ids: Sequence[Sequence[int]],
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 128,
        max_tokens_per_batch: int | None = 8192,
        on_batch: Callable[[int], None] | None = None,
    ) -> Tensor:
        """Embed already tokenized sequences (each with [CLS]/[SEP]); same order as the input.

        pooling/normalize default to the folder's sentence-transformers settings, else mean and no normalisation.
        on_batch(n) is called after each forward pass with its number of texts (a progress report).
        """
        pooling = pooling or self.default_pooling
        normalize = self.default_normalize if normalize is None else normalize
        check_pooling(pooling)
        batch_size = check_value(EncodeOptions, "batch_size", batch_size, "batch_size")
        plan = self.int8_plan
        if plan is None or self.float_bert is None:
            out = self._run(self.bert, self._forward, ids, pooling, batch_size, max_tokens_per_batch, on_batch)
        else:  # each text by its own token ids: int8, or float32 for few distinct tokens
            out = torch.empty(len(ids), self.config.hidden_size)
            int8 = [runs_in_int8(x, plan.min_distinct_tokens) for x in ids]
            for model, forward, wanted in ((self.bert, self._forward, True), (self.float_bert, self.float_bert, False)):
                rows = [i for i, flag in enumerate(int8) if flag == wanted]
                if rows:
                    out[rows] = self._run(model, forward, [ids[i] for i in rows], pooling, batch_size,
                                          max_tokens_per_batch, on_batch)
        return F.normalize(out, dim=-1) if normalize else out

    def _run(self, model: nn.Module, forward: Callable[..., Any], ids: Sequence[Sequence[int]], pooling: str,
             batch_size: int, max_tokens_per_batch: int | None,
             on_batch: Callable[[int], None] | None = None) -> Tensor:
        """Pooled last hidden states of `ids` through `forward` (`model` or its compiled form), in input order."""
        out = torch.empty(len(ids), self.config.hidden_size)
        if not ids:
            return out
        pad_id = self.tokenizer.pad_token_id
        max_width = self.config.max_sequence_length
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                for idx in plan_batches([len(x) for x in ids], batch_size, max_tokens_per_batch, max_width):
                    rows = [ids[i] for i in idx]
                    width = padded_width(len(rows[0]), max_width)  # the longest comes first
                    batch = pad_batch(rows, [[0] * len(x) for x in rows], pad_id, width)
                    batch = {k: v.to(self.device) for k, v in batch.items()}
                    hidden = forward(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                                     execution=self.batch_plan([len(x) for x in rows], width))
                    vectors = pool_hidden(hidden.last_hidden_state.float(), batch["attention_mask"], pooling)
                    out[torch.tensor(idx)] = vectors.cpu()
                    if on_batch is not None:
                        on_batch(len(idx))
        finally:
            model.train(was_training)
        return out

    def batch_plan(self, lengths: Sequence[int], width: int) -> Execution | None:
        """How the model computes a batch of sequences of these lengths padded to `width`: in bf16 on a CPU, every
        position when the batch has little padding (`runs_padded`), else its real tokens only; elsewhere the model's
        own plan (None)."""
        return Execution(unpadded=not runs_padded(lengths, width)) if self.pads_batches else None

    def calibrate(self, bert: nn.Module, texts: Sequence[str], min_cosine: float = DEFAULT_MIN_COSINE) -> Int8Plan:
        """The int8 plan of `bert` (float32, CPU) on the `texts` that int8 runs (`runs_in_int8`), scored on their
        mean-pooled embeddings."""
        if not texts:
            raise ConfigError("calibration needs at least one text, got none")
        with warnings.catch_warnings():  # cut calibration text is still calibration text: no warning for it
            warnings.filterwarnings("ignore", message=r"\d+ of \d+ texts were longer than", category=UserWarning)
            ids = [x for x in self.tokenize(texts) if runs_in_int8(x)]
        if not ids:
            raise ConfigError(f"calibration needs texts that int8 runs, of at least {MIN_INT8_DISTINCT_TOKENS} "
                              f"distinct tokens; none of the {len(texts)} given has as many")
        return calibrate_int8(bert, lambda model: self._run(model, model, ids, "mean", 128, 8192), min_cosine,
                              self.int8_kernel)

    def __call__(self, texts: Sequence[str], **kwargs: Any) -> Tensor:
        return self.encode(texts, **kwargs)


class Encoders:
    """A loaded model's Encoders, one per (precision, max_length, device) asked for, each built on first use and then
    kept: what `bertkit.load(...)` (so `bertkit embed`) and the server hold, so that an int8 encoder is calibrated
    (seconds) and a bf16 copy made once per loaded model, not once per `encode` call.

    An fp32 encoder runs the model's own weights; bf16 and int8 encoders hold copies made when they were built, so
    they do not follow later changes to the model's weights (build a new `Encoders` after changing them)."""

    def __init__(self, model: BertPreTrainedModel, tokenizer: Any, defaults: dict[str, Any] | None = None) -> None:
        self.model, self.tokenizer, self.defaults = model, tokenizer, defaults or {}
        self._built: dict[tuple[str, int | None, str], Encoder] = {}

    def get(self, precision: str = DEFAULT_PRECISION, max_length: int | None = None,
            device: str | torch.device | None = None) -> Encoder:
        """The Encoder for these options (device: the model's own by default), built the first time they are asked."""
        device = torch.device(device) if device is not None else next(self.model.parameters()).device
        key = (precision, max_length, str(device))
        if key not in self._built:
            self._built[key] = Encoder(self.model, self.tokenizer, precision=precision, device=device,
                                       max_length=max_length, defaults=self.defaults)
        return self._built[key]


__all__ = ["Encoder", "Encoders", "padded_width", "plan_batches"]
