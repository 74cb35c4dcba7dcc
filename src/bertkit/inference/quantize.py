"""Calibrated static int8 for the encoder's linear layers, with the layers that int8 hurts most kept in float32.

Every encoder matrix product (the fused Q/K/V projection, the attention output, the two feed-forward products of each
layer) is a "unit". Its weights are int8 with one scale per output channel; its input is quantized with one fixed
scale and zero point from its range over calibration text (`calibrate_int8`), after SmoothQuant's per-channel
smoothing (Xiao et al. 2023): BERT's LayerNorm outputs have a few channels tens of times larger than the rest, and
dividing input channel j by s_j (multiplying the weight's column j by it) moves that range into the per-channel weight
scales; each unit is smoothed or not, whichever its measured output error prefers. Embeddings, LayerNorm, attention,
GELU and pooling stay float32. A sensitivity sweep measures each unit's own int8 output error; units are then put
back in float32, most sensitive first, as many as it takes (by bisection) for the pooled embeddings to reach
`min_cosine` to float32 on that text. The plan is a plain dataclass: recomputed deterministically, or stored as JSON.

Texts of fewer than `MIN_INT8_DISTINCT_TOKENS` distinct token ids run in float32: int8's rounding errors of different
tokens partly cancel in a text's mean, but not in a text of a handful of tokens or of one word repeated, where int8
missed the 0.995 goal to float32 whatever else was tried (docs/results/int8-short-texts-*.md,
benchmarks/bench_int8_accuracy.py).

The int8 products run on one of two kernels, with the same plan and int8 numbers: "fbgemm"
(linear_with_input_q_dq_qweight_dq_output_fp32: quantize, u8 x s8 into int32, dequantize in one pass) or "onednn"
(quantize_per_tensor, then onednn.qlinear_pointwise, which uses VNNI and AMX tiles where the CPU has them). Their int32
sums are equal; the dequantization rounds once (fbgemm's fused multiply-add) or twice (oneDNN), so outputs can differ
in the last place and the two kernels' embeddings agree closely (min cosine above 0.999), not bit for bit
(tests/inference/test_int8_kernels.py). `choose_int8_kernel` picks oneDNN on CPUs with AMX, fbgemm elsewhere
(docs/results/int8-vnni-path-epyc-avx2-2026-11-25.md, embed-cpu-xeon-amx-2026-11-27.md); BERTKIT_INT8_KERNEL or
Encoder's int8_kernel overrides it.

Calibration text must not be the text you evaluate on; the default (`default_calibration_texts`) is drawn from the
shipped public-domain text of Austen's Persuasion.
"""

from __future__ import annotations

import copy
import gzip
import os
import re
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import runtime
from bertkit.errors import ConfigError
from bertkit.model.bert import BertSelfAttention

# On CPUs without VNNI, fbgemm multiplies u8 activations by s8 weights with vpmaddubsw, which sums pairs into int16:
# 255 x 127 x 2 saturates it (measured: docs/results/int8-epyc-avx2-2026-11-24.md). 7-bit weights
# (255 x 63 x 2 < 32767) avoid that and keep all 8 bits for the activations, whose outliers are where the error is.
ACTIVATION_LEVELS = 255
WEIGHT_LEVELS = 63
# s_j = max|x_j|^a / max|W_:,j|^(1-a). 0.5 is SmoothQuant's choice for BERT-sized models; it suits the LayerNorm-fed
# products but hurts the GELU-fed ones of early layers (measured), so calibration picks 0.5 or None (no smoothing)
# per unit, whichever gives the smaller output error.
SMOOTHING_CHOICES: tuple[float | None, ...] = (0.5, None)
FLOAT_BLOCK_ROWS = 64  # FloatLinear's rows per GEMM call, always exactly this many (see FloatLinear)
DEFAULT_MIN_COSINE = 0.997  # on the calibration text; a margin over the 0.995 goal on unseen text
# Fewer distinct token ids than this: the text runs in float32 (see the module docstring). The smallest count at which
# int8 kept the 0.995 goal on unseen texts: docs/results/int8-short-texts-epyc-avx2-2026-11-25.md.
MIN_INT8_DISTINCT_TOKENS = 10
DEFAULT_CALIBRATION_PARAGRAPHS = 24
DEFAULT_CALIBRATION_SENTENCES = 64
DEFAULT_CALIBRATION_REPEATS = 6
INT8_KERNELS = ("fbgemm", "onednn")  # see the module docstring
INT8_KERNEL_ENV = "BERTKIT_INT8_KERNEL"  # fbgemm, onednn or auto (the default): overrides the CPU-based choice
REPEATED_WORDS = 300  # a repeated calibration sentence fills about this many words: past 256 tokens, cut there
CALIBRATION_SOURCE = Path(__file__).resolve().parents[1] / "demo_data" / "austen_persuasion.txt.gz"

Embed = Callable[[nn.Module], Tensor]  # a model -> the calibration text's pooled embeddings, (n, hidden)


def calibration_paragraphs(n: int = DEFAULT_CALIBRATION_PARAGRAPHS, min_words: int = 20) -> list[str]:
    """The first `n` paragraphs of at least `min_words` words of the shipped Persuasion (hard-wrapped lines joined)."""
    return [p for p in _persuasion_paragraphs() if len(p.split()) >= min_words][:n]


def default_calibration_texts(paragraphs: int = DEFAULT_CALIBRATION_PARAGRAPHS,
                              sentences: int = DEFAULT_CALIBRATION_SENTENCES,
                              repeats: int = DEFAULT_CALIBRATION_REPEATS) -> list[str]:
    """Every length of text that int8 runs, from the shipped Persuasion: its first `paragraphs` long paragraphs,
    `sentences` sentences of 4 to 20 words spread over the book (narration and dialogue), and `repeats` sentences of
    8 to 15 words each repeated to about REPEATED_WORDS words: on long paragraphs alone, calibration set input
    ranges that short texts overflow, and repeated sentences fell below the goal
    (docs/results/int8-short-texts-epyc-avx2-2026-11-25.md)."""
    split = [re.split(r"(?<=[.!?])\s+", p) for p in _persuasion_paragraphs()]
    pool = list(dict.fromkeys(s.strip("\"' ") for parts in split for s in parts))  # distinct, in book order
    medium = [s for s in pool if 4 <= len(s.split()) <= 20]
    repeatable = [s for s in pool if 8 <= len(s.split()) <= 15]
    repeated = [" ".join([s] * (REPEATED_WORDS // len(s.split()))) for s in _spread(repeatable, repeats)]
    return calibration_paragraphs(paragraphs) + _spread(medium, sentences) + repeated


def _persuasion_paragraphs() -> list[str]:
    """The shipped Persuasion's paragraphs, hard-wrapped lines joined."""
    text = gzip.decompress(CALIBRATION_SOURCE.read_bytes()).decode("utf-8")
    return [p for p in (" ".join(p.split()) for p in text.split("\n\n")) if p]


def _spread(items: Sequence[str], n: int) -> list[str]:
    """`n` of `items` at even steps from the first (all of them if there are not more)."""
    return [items[i * len(items) // n] for i in range(n)] if len(items) > n else list(items)


def runs_in_int8(ids: Sequence[int], min_distinct_tokens: int = MIN_INT8_DISTINCT_TOKENS) -> bool:
    """Whether int8 embeds a text of these token ids: it has at least `min_distinct_tokens` distinct ids."""
    return len(set(ids)) >= min_distinct_tokens


def smoothing_factors(weight: Tensor, input_range: tuple[list[float], list[float]], alpha: float | None) -> Tensor:
    """SmoothQuant's per-input-channel s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha) (all ones for alpha None):
    the input is divided by s and the weight's columns multiplied by it."""
    x_max = torch.maximum(torch.tensor(input_range[0]).abs(), torch.tensor(input_range[1]).abs()).clamp(min=1e-5)
    if alpha is None:
        return torch.ones_like(x_max)
    return (x_max**alpha / weight.abs().amax(dim=0).clamp(min=1e-5) ** (1 - alpha)).clamp(min=1e-5)


def choose_int8_kernel(kernel: str | None = None) -> tuple[str, str]:
    """The kernel the int8 products run on and why: `kernel` if given (or "auto"), else BERTKIT_INT8_KERNEL, else
    oneDNN where the CPU has AMX (fbgemm has no AMX kernels), fbgemm elsewhere (it has VNNI kernels of its own, and
    on AVX2 it measured as fast or faster: docs/results/int8-vnni-path-epyc-avx2-2026-11-25.md)."""
    asked = kernel or os.environ.get(INT8_KERNEL_ENV, "").strip() or "auto"
    if asked != "auto":
        if asked not in INT8_KERNELS:
            source = "int8_kernel" if kernel else INT8_KERNEL_ENV
            raise ConfigError(f"{source}: unknown int8 kernel {asked!r}; expected one of {', '.join(INT8_KERNELS)} "
                              f"or auto")
        return asked, f"asked for ({'option' if kernel else INT8_KERNEL_ENV})"
    flags = runtime.cpu_flags()
    if "amx_int8" in flags:
        return "onednn", "CPU has AMX (int8 tiles), which only oneDNN uses"
    return "fbgemm", "CPU has no AMX" + (" (fbgemm has AVX-512 VNNI kernels)" if "avx512_vnni" in flags else "")


def int8_weight(weight: Tensor) -> Tensor:
    """`weight` (out, in) quantized symmetrically with one scale per output channel, to WEIGHT_LEVELS levels."""
    w_scale = (weight.abs().amax(dim=1) / WEIGHT_LEVELS).clamp(min=1e-12).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors announce their deprecation
        return torch.quantize_per_channel(weight, w_scale, torch.zeros_like(w_scale, dtype=torch.long), 0, torch.qint8)


class Int8Linear(nn.Module):
    """y = x W^T + b with W quantized per output channel and x to 8 bits with a calibrated (static) scale."""

    ONEDNN_BLOCK_ROWS = 512  # rows per oneDNN call at most (see _onednn_in_blocks)
    ONEDNN_ROW_STEP = 64  # the last block is padded to a multiple of this many rows

    def __init__(self, weight: Tensor, bias: Tensor | None, input_range: tuple[list[float], list[float]],
                 alpha: float | None = SMOOTHING_CHOICES[0], kernel: str | None = None) -> None:
        super().__init__()
        weight = weight.detach().float()
        low, high = torch.tensor(input_range[0]), torch.tensor(input_range[1])  # per input channel
        smooth = smoothing_factors(weight, input_range, alpha)
        self.register_buffer("inv_smooth", 1 / smooth)
        weight = weight * smooth
        lo, hi = min(float((low / smooth).min()), 0.0), max(float((high / smooth).max()), 0.0)  # zero stays exact
        self.scale = max(hi - lo, 1e-8) / ACTIVATION_LEVELS
        self.zero_point = round(-lo / self.scale)
        self.kernel = choose_int8_kernel(kernel)[0]
        bias = None if bias is None else bias.detach().float()
        qweight = int8_weight(weight)
        if self.kernel == "onednn":
            self.register_buffer("bias", bias)
            self.register_buffer("w_scale", qweight.q_per_channel_scales().float())  # the float32 fbgemm uses too
            self.register_buffer("w_zero_point", torch.zeros(weight.shape[0], dtype=torch.int32))
            self.packed = torch.ops.onednn.qlinear_prepack(qweight.int_repr(), None)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # quantized tensors announce their deprecation
                self.packed = torch.ops.quantized.linear_prepack(qweight, bias)
        self.out_features = weight.shape[0]

    def forward(self, x: Tensor) -> Tensor:
        flat = (x.reshape(-1, x.shape[-1]).float() * self.inv_smooth).contiguous()
        if self.kernel == "onednn":
            # torch.quantize_per_tensor rounds as fbgemm's own input quantization does (the same u8 values)
            qx = torch.quantize_per_tensor(flat, self.scale, self.zero_point, torch.quint8).int_repr()
            y = self._onednn_in_blocks(qx)
        else:
            y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(flat, self.scale, self.zero_point,
                                                                                    self.packed)
        return y.view(*x.shape[:-1], self.out_features)

    def _onednn(self, qx: Tensor) -> Tensor:
        """oneDNN's int8 inner product of u8 rows `qx`, dequantized to float32 (one call)."""
        return torch.ops.onednn.qlinear_pointwise(qx, self.scale, self.zero_point, self.packed, self.w_scale,
                                                  self.w_zero_point, self.bias, 1.0, 0, torch.float32,  # output
                                                  "none", [], "")  # no fused activation

    def _onednn_in_blocks(self, qx: Tensor) -> Tensor:
        """`_onednn` over blocks of ONEDNN_BLOCK_ROWS rows, the last padded to a multiple of ONEDNN_ROW_STEP rows.

        oneDNN compiles and caches a kernel per shape, and the packed encoder's row count is new in nearly every
        batch, so without blocks its cache grew without bound. Every row is computed on its own (exact int32 sums,
        then the same dequantization), so the values do not change (tested)."""
        rows = qx.shape[0]
        padded = -(-rows // self.ONEDNN_ROW_STEP) * self.ONEDNN_ROW_STEP
        if padded != rows:  # rows of the zero point: an input of zeros, outputs dropped
            qx = torch.cat([qx, qx.new_full((padded - rows, qx.shape[1]), self.zero_point)])
        if padded <= self.ONEDNN_BLOCK_ROWS:
            return self._onednn(qx)[:rows]
        return torch.cat([self._onednn(block) for block in qx.split(self.ONEDNN_BLOCK_ROWS)])[:rows]


class FloatLinear(nn.Module):
    """y = x W^T + b in float32, in blocks of exactly FLOAT_BLOCK_ROWS rows (the last padded with zero rows, dropped).

    A unit the plan keeps in float32 feeds int8 units downstream, which round their input to a grid, so its rows
    must come out bit for bit the same however many rows share the product; MKL's float32 GEMM picks its kernel by
    the row count (measured: other last bits on AVX2 and AMX CPUs), while a row's bits never depend on its place
    within one call. So every call gets the same row count."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().float())
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    def forward(self, x: Tensor) -> Tensor:
        rows = x.shape[:-1].numel()
        padded = -(-rows // FLOAT_BLOCK_ROWS) * FLOAT_BLOCK_ROWS
        flat = F.pad(x.reshape(rows, x.shape[-1]), (0, 0, 0, padded - rows))
        out = flat.new_empty(padded, self.weight.shape[0])
        for block, o in zip(flat.split(FLOAT_BLOCK_ROWS), out.split(FLOAT_BLOCK_ROWS)):
            if self.bias is None:
                torch.mm(block, self.weight.t(), out=o)
            else:
                torch.addmm(self.bias, block, self.weight.t(), out=o)
        return out[:rows].view(*x.shape[:-1], -1)


@dataclass
class Int8Plan:
    """What calibration decided: each unit's input range, the sweep, and the units left in float32."""

    input_ranges: dict[str, tuple[list[float], list[float]]]  # unit -> per-channel input (min, max)
    sensitivity: dict[str, float] = field(default_factory=dict)  # unit -> relative error of its int8 output
    smoothing: dict[str, float | None] = field(default_factory=dict)  # unit -> SmoothQuant alpha (None: none)
    float_units: list[str] = field(default_factory=list)  # most sensitive first
    min_cosine: float = 1.0  # of the chosen mix to float32 on the calibration texts that int8 runs
    min_distinct_tokens: int = MIN_INT8_DISTINCT_TOKENS  # texts with fewer distinct token ids run in float32

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Int8Plan:
        """A plan from `to_dict`'s JSON; one stored without `min_distinct_tokens` gets today's float32 rule for short
        texts."""
        return cls({k: ([float(x) for x in v[0]], [float(x) for x in v[1]]) for k, v in data["input_ranges"].items()},
                   dict(data.get("sensitivity", {})), dict(data.get("smoothing", {})),
                   list(data.get("float_units", [])), float(data.get("min_cosine", 1.0)),
                   int(data.get("min_distinct_tokens", MIN_INT8_DISTINCT_TOKENS)))


def int8_units(bert: nn.Module) -> dict[str, tuple[Tensor, Tensor | None]]:
    """The quantizable matrix products of the encoder by module name: (weight, bias); Q/K/V as one fused matrix."""
    units: dict[str, tuple[Tensor, Tensor | None]] = {}
    for name, module in bert.named_modules():
        if isinstance(module, BertSelfAttention):
            units[name] = (torch.cat([module.query.weight, module.key.weight, module.value.weight]),
                           torch.cat([module.query.bias, module.key.bias, module.value.bias]))
        elif isinstance(module, nn.Linear) and name.startswith("encoder.") and ".attention.self." not in name:
            units[name] = (module.weight, module.bias)
    return units


def quantize_int8(bert: nn.Module, plan: Int8Plan, units: set[str] | None = None,
                  kernel: str | None = None) -> nn.Module:
    """A copy of `bert` with `units` (default: every unit not in plan.float_units) as Int8Linear on `kernel`
    (default: `choose_int8_kernel`'s) and the other units as FloatLinear; CPU only."""
    kernel = choose_int8_kernel(kernel)[0]
    if kernel == "fbgemm" and torch.backends.quantized.engine not in ("x86", "fbgemm"):
        raise ConfigError(f"int8 on fbgemm needs the x86 or fbgemm quantized engine, found "
                          f"{torch.backends.quantized.engine!r}")
    all_units = int8_units(bert)
    chosen = set(all_units) - set(plan.float_units) if units is None else units
    missing = chosen - set(plan.input_ranges)
    if missing:
        raise ConfigError(f"int8 plan has no input range for {min(missing)} (recalibrate for this model)")
    return replace_units(copy.deepcopy(bert).cpu().float(), {
        name: Int8Linear(*all_units[name], plan.input_ranges[name], plan.smoothing.get(name, SMOOTHING_CHOICES[0]),
                         kernel) if name in chosen else FloatLinear(*all_units[name]) for name in sorted(all_units)})


def replace_units(model: nn.Module, replacements: dict[str, nn.Module]) -> nn.Module:
    """Put each replacement in place of the unit of that name (an `int8_units` name) in `model`, in place; returns
    `model`. A BertSelfAttention unit gets one product for Q, K and V instead of its three float matrices."""
    modules = dict(model.named_modules())
    for name, unit in replacements.items():
        module = modules[name]
        if isinstance(module, BertSelfAttention):
            module.qkv = unit
            module.project_qkv = types.MethodType(_replaced_project_qkv, module)
            module.query = module.key = module.value = None
        else:
            parent, _, child = name.rpartition(".")
            setattr(modules[parent], child, unit)
    return model


def _replaced_project_qkv(self: BertSelfAttention, x: Tensor) -> Tensor:
    """BertSelfAttention.project_qkv after replace_units: (tokens, hidden) -> (tokens, 3 * hidden) in one product."""
    return self.qkv(x)


def calibrate_int8(bert: nn.Module, embed: Embed, min_cosine: float = DEFAULT_MIN_COSINE,
                   kernel: str | None = None) -> Int8Plan:
    """Measure each unit's input range and int8 sensitivity on the calibration text that `embed` runs, and choose the
    fewest float32 units (most sensitive first) that keep the min cosine to float32 at `min_cosine` or above; the
    int8 products run on `kernel` (default: `choose_int8_kernel`'s).

    Sensitivity is the relative error ||int8(x) - float(x)|| / ||float(x)|| of each unit's own output on the
    calibration inputs (one extra pass); the number of float32 units is then found by bisection over whole-model
    passes, assuming that putting more units back in float32 does not lower the cosine.
    """
    units = int8_units(bert)
    modules = dict(bert.named_modules())
    ranges: dict[str, tuple[Tensor, Tensor]] = {}
    errors: dict[str, dict[float | None, float]] = {name: dict.fromkeys(SMOOTHING_CHOICES, 0.0) for name in units}
    norms = dict.fromkeys(units, 0.0)

    def record_range(name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple) -> None:
            flat = args[0].reshape(-1, args[0].shape[-1])
            lo, hi = flat.amin(dim=0), flat.amax(dim=0)
            old = ranges.get(name, (lo, hi))
            ranges[name] = (torch.minimum(lo, old[0]), torch.maximum(hi, old[1]))
        return hook

    def record_error(name: str) -> Callable[..., None]:
        candidates = {a: Int8Linear(*units[name], plan.input_ranges[name], a, kernel) for a in SMOOTHING_CHOICES}

        def hook(_module: nn.Module, args: tuple) -> None:
            exact = F.linear(args[0], *units[name])
            for alpha, int8 in candidates.items():
                errors[name][alpha] += float((int8(args[0]) - exact).square().sum())
            norms[name] += float(exact.square().sum())
        return hook

    with _hooks(modules, {name: record_range(name) for name in units}):
        reference = embed(bert)
    plan = Int8Plan({name: (lo.tolist(), hi.tolist()) for name, (lo, hi) in ranges.items()})
    with _hooks(modules, {name: record_error(name) for name in units}):
        embed(bert)
    plan.smoothing = {name: min(SMOOTHING_CHOICES, key=errors[name].__getitem__) for name in units}
    plan.sensitivity = {name: (errors[name][plan.smoothing[name]] / max(norms[name], 1e-30)) ** 0.5 for name in units}
    order = sorted(units, key=lambda name: -plan.sensitivity[name])  # most sensitive first

    def score(keep: int) -> float:
        if keep == len(order):
            return 1.0
        mixed = quantize_int8(bert, plan, set(order[keep:]), kernel)
        return float(F.cosine_similarity(embed(mixed), reference).min())

    lo, hi, best = 0, len(order), 1.0  # the answer lies in [lo, hi]; hi always meets min_cosine
    while lo < hi:
        mid = (lo + hi) // 2
        cosine = score(mid)
        if cosine >= min_cosine:
            hi, best = mid, cosine
        else:
            lo = mid + 1
    plan.float_units, plan.min_cosine = order[:hi], best if hi < len(order) else 1.0
    return plan


@contextmanager
def _hooks(modules: dict[str, nn.Module], hooks: dict[str, Callable[..., None]]) -> Iterator[None]:
    """Forward pre-hooks on the named modules for the duration of a block."""
    handles = [modules[name].register_forward_pre_hook(hook) for name, hook in hooks.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


__all__ = ["INT8_KERNELS", "MIN_INT8_DISTINCT_TOKENS", "FloatLinear", "Int8Linear", "Int8Plan", "calibrate_int8",
           "calibration_paragraphs", "choose_int8_kernel", "default_calibration_texts", "int8_units", "int8_weight",
           "quantize_int8", "replace_units", "runs_in_int8", "smoothing_factors"]
