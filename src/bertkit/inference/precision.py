"""`choose_precision`: the one place an Encoder's "auto" precision is resolved. The precisions themselves
(`PRECISIONS`, `DEFAULT_PRECISION`) are declared with the encoding options (bertkit.inference.options) and
re-exported here for the Encoder, `bertkit.load(...).encode`, `bertkit embed --precision` and the server."""

from __future__ import annotations

import torch

from bertkit.errors import ConfigError
from bertkit.inference.options import DEFAULT_PRECISION, PRECISIONS  # noqa: F401 (re-exported)
from bertkit.runtime import cpu_has_native_bf16


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
