"""The precisions an Encoder computes in, declared once: the Encoder, `bertkit.load(...).encode`, `bertkit embed
--precision` and the server's settings read `PRECISIONS` and `DEFAULT_PRECISION` here, and `choose_precision` is the
one place "auto" is resolved."""

from __future__ import annotations

import torch

from bertkit.errors import ConfigError
from bertkit.runtime import cpu_has_native_bf16

PRECISIONS = ("auto", "fp32", "bf16", "int8")
DEFAULT_PRECISION = "auto"


def choose_precision(precision: str, device: torch.device) -> tuple[str, str]:
    """The precision an encoder runs in, and why. "auto" is bf16 where the hardware has bf16 matrix units (a
    CUDA GPU that supports it, a CPU with AVX512-BF16 or AMX) and fp32 otherwise; int8 is used only when asked."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision, "as asked"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", "auto: this GPU computes in bf16"
        return "fp32", "auto: this GPU has no bf16"
    if cpu_has_native_bf16():
        return "bf16", "auto: this CPU has bf16 matrix units (AVX512-BF16/AMX)"
    return "fp32", "auto: this CPU has no bf16 matrix units, where bf16 runs slower than fp32"
