"""Two levers tried for int8 on AVX2 and not adopted, measured against the shipped plan in one process.

    PYTHONPATH=benchmarks python docs/results/int8-epyc-avx2-2026-11-24/int8_levers.py [--limit 400] [--rounds 3]

A probe of the int8 report (docs/results/int8-epyc-avx2-2026-11-24.md), kept beside it; run from the checkout's
root with benchmarks/ on the path (its common.py).

bertkit's int8 (bertkit.inference.quantize) quantizes each unit's input with one calibrated (static) scale, after
SmoothQuant smoothing with alpha 0.5 or none (whichever errs less), and keeps the 9 units that hurt most in float32.
1. Per-token activation scales: CTranslate2 gives every token (row) its own scale, computed on the fly. Emulated
   with the same fbgemm product: each row is mapped onto [0, 1] (or [-1, 1], symmetric) by its own min/max before
   the per-tensor int8 product, and the output rows are mapped back (y = (x' W^T) * range + min * rowsum(W) + b).
2. A finer smoothing grid: each unit picks its alpha from FINE_ALPHAS, so calibration needs fewer float32 units.
It prints each unit's own relative output error on the calibration text (static vs per-token), then, for the same
400 WikiText-2 paragraphs as bench_embed.py, the min/mean cosine to float32 and the best-of-`rounds` time of
float32, the shipped plan, every unit per-token (asymmetric; symmetric), the shipped plan with its float32 units
per-token ("hybrid"), and the fine-grid plan. Under the Encoder's malloc setting (bertkit.runtime).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common import DATA, MAX_LEN, cpu_line, minilm_dir, wikitext_paragraphs

from bertkit.inference import quantize as Q

warnings.simplefilter("ignore")  # quantized tensors announce their deprecation

FINE_ALPHAS: tuple[float | None, ...] = (None, 0.5, 0.6, 0.7, 0.8, 0.9)


class PerTokenInt8Linear(nn.Module):
    """y = x W^T + b with W int8 per output channel and each row of x quantized with its own range."""

    def __init__(self, weight: Tensor, bias: Tensor, input_range: tuple[list[float], list[float]],
                 alpha: float | None, symmetric: bool) -> None:
        super().__init__()
        weight = weight.detach().float()
        smooth = Q.smoothing_factors(weight, input_range, alpha)
        self.inv_smooth = None if alpha is None else 1 / smooth
        weight = weight * smooth
        qweight = Q.int8_weight(weight)
        self.packed = torch.ops.quantized.linear_prepack(qweight, None)
        self.row_sum = qweight.dequantize().sum(1)  # (out,): what a row offset adds to every output
        self.bias = bias.detach().float()
        self.symmetric = symmetric
        self.out_features = weight.shape[0]

    def forward(self, x: Tensor) -> Tensor:
        product = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32
        flat = x.reshape(-1, x.shape[-1])
        if self.inv_smooth is not None:
            flat = flat * self.inv_smooth
        if self.symmetric:
            peak = flat.abs().amax(1, keepdim=True).clamp(min=1e-8)
            y = torch.addcmul(self.bias, product((flat / peak).contiguous(), 2 / 254, 127, self.packed), peak)
        else:
            low, high = torch.aminmax(flat, dim=1, keepdim=True)
            low = low.clamp(max=0)
            span = (high.clamp(min=0) - low).clamp(min=1e-8)
            scaled = torch.addcmul(-low / span, flat, 1 / span)  # each row onto [0, 1]
            y = product(scaled.contiguous(), 1 / 255, 0, self.packed)
            y = torch.addcmul(torch.addmm(self.bias, low, self.row_sum[None, :]), y, span)
        return y.view(*x.shape[:-1], self.out_features)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args()

    from bertkit.inference.encoder import Encoder

    print(cpu_line())
    folder = minilm_dir()
    shipped = Encoder(folder, precision="int8", device="cpu", max_length=MAX_LEN)
    plan = shipped.int8_plan
    choices, Q.SMOOTHING_CHOICES = Q.SMOOTHING_CHOICES, FINE_ALPHAS  # read by calibrate_int8 at call time
    try:
        fine = Encoder(folder, precision="int8", device="cpu", max_length=MAX_LEN)
    finally:
        Q.SMOOTHING_CHOICES = choices
    for label, p in (("shipped", plan), ("fine alpha grid", fine.int8_plan)):
        print(f"{label} plan: {len(p.input_ranges) - len(p.float_units)} of {len(p.input_ranges)} units in int8, "
              f"calibration min cosine {p.min_cosine:.5f}; float32: {', '.join(p.float_units)}")
    exact = Encoder(folder, precision="fp32", device="cpu", max_length=MAX_LEN)
    bert = exact.bert
    units = Q.int8_units(bert)
    calibration = exact.tokenize(Q.default_calibration_texts())
    texts = exact.tokenize(wikitext_paragraphs(Path(args.data) / "wikitext2" / "valid.txt", args.limit))

    def run(model: nn.Module, ids: list[list[int]]) -> Tensor:
        return exact._run(model, model, ids, "mean", 128, 8192)

    def per_token(name: str, kind: str) -> PerTokenInt8Linear:
        return PerTokenInt8Linear(*units[name], plan.input_ranges[name], 0.5, symmetric=kind == "symmetric")

    # Each unit's own output error on the calibration text.
    kinds = ("asymmetric", "symmetric")
    errors = {name: dict.fromkeys(("static", *kinds), 0.0) for name in units}
    norms = dict.fromkeys(units, 0.0)
    modules = dict(bert.named_modules())

    def record(name: str) -> Callable[..., None]:
        candidates = {"static": Q.Int8Linear(*units[name], plan.input_ranges[name], plan.smoothing[name]),
                      **{kind: per_token(name, kind) for kind in kinds}}

        def hook(_module: nn.Module, inputs: tuple) -> None:
            reference = F.linear(inputs[0], *units[name])
            for kind, unit in candidates.items():
                errors[name][kind] += float((unit(inputs[0]) - reference).square().sum())
            norms[name] += float(reference.square().sum())
        return hook

    with Q._hooks(modules, {name: record(name) for name in units}):
        run(bert, calibration)
    print("\n| unit | static (shipped) | per-token asymmetric | per-token symmetric | shipped plan "
          "| static, fine grid (alpha) | fine-grid plan |")
    print("|---|---|---|---|---|---|---|")
    fine_plan = fine.int8_plan
    for name in sorted(units, key=lambda n: -plan.sensitivity[n]):
        rel = [(errors[name][k] / norms[name]) ** 0.5 for k in ("static", *kinds)]
        where = "float32" if name in plan.float_units else "int8"
        fine_where = "float32" if name in fine_plan.float_units else "int8"
        print(f"| {name} | " + " | ".join(f"{r:.4f}" for r in rel) + f" | {where} | "
              f"{fine_plan.sensitivity[name]:.4f} ({fine_plan.smoothing[name]}) | {fine_where} |")

    def with_units(replacements: dict[str, nn.Module]) -> nn.Module:
        """A float32 copy of the model with the named units replaced."""
        return Q.replace_units(copy.deepcopy(bert), replacements)

    static_units = {n.removesuffix(".qkv"): m for n, m in shipped.bert.named_modules() if isinstance(m, Q.Int8Linear)}
    variants = {
        "float32": bert,
        f"shipped static int8 ({len(units) - len(plan.float_units)} of 24 units)": shipped.bert,
        "per-token asymmetric, all 24 units": with_units({n: per_token(n, "asymmetric") for n in units}),
        "per-token symmetric, all 24 units": with_units({n: per_token(n, "symmetric") for n in units}),
        f"hybrid: shipped + its {len(plan.float_units)} float32 units per-token asymmetric": with_units(
            {**static_units, **{n: per_token(n, "asymmetric") for n in plan.float_units}}),
        f"static, fine alpha grid ({len(units) - len(fine.int8_plan.float_units)} of 24 units)": fine.bert,
    }
    reference = run(bert, texts)
    best = dict.fromkeys(variants, float("inf"))
    cosines = {}
    for _ in range(args.rounds):
        for label, model in variants.items():
            start = time.perf_counter()
            out = run(model, texts)
            best[label] = min(best[label], time.perf_counter() - start)
            cosines[label] = F.cosine_similarity(out, reference)
    print(f"\n{len(texts)} WikiText-2 validation paragraphs, best of {args.rounds} interleaved rounds (model only)\n")
    print("| variant | seconds | vs float32 | min cosine | mean cosine |")
    print("|---|---|---|---|---|")
    for label in variants:
        print(f"| {label} | {best[label]:.2f} | {best['float32'] / best[label]:.2f}x | {cosines[label].min():.5f} "
              f"| {cosines[label].mean():.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
