"""The int8 products' two kernels (bertkit.inference.quantize, issue 30): fbgemm (the path before issue 30) and oneDNN
(the one that takes VNNI/AMX where the CPU has them). On any CPU their int32 accumulations must be the exact integer
products of the same u8 inputs and s8 weights; the float32 outputs differ only in the dequantization's last rounding
(fbgemm: one fused multiply-add; oneDNN: the product, then the sum), which these tests pin down bit for bit."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from inference_helpers import minilm_folder, tokenizer_for, wikitext_paragraphs
from torch import Tensor

from bertkit import runtime
from bertkit.errors import ConfigError
from bertkit.inference.encoder import Encoder
from bertkit.inference.pooling import pad_batch
from bertkit.inference.quantize import (
    INT8_KERNELS,
    SMOOTHING_CHOICES,
    Int8Linear,
    Int8Plan,
    choose_int8_kernel,
    int8_units,
)
from bertkit.model import BertModel


def exact_accumulation(unit: Int8Linear, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The int32 accumulations computed in int64 from the u8 input and s8 weight that both kernels see, the input's
    float32 scale s_x and the weight's per output channel s_w."""
    flat = (x.reshape(-1, x.shape[-1]) * unit.inv_smooth).contiguous()
    qx = torch.quantize_per_tensor(flat, unit.scale, unit.zero_point, torch.quint8).int_repr().long()
    qweight = torch.ops.quantized.linear_unpack(unit.packed)[0] if unit.kernel == "fbgemm" else None
    assert qweight is not None, "pass the fbgemm unit"
    # float64 holds these integer sums exactly (far below 2**53) and multiplies them far faster than int64
    acc = ((qx - unit.zero_point).double() @ qweight.int_repr().double().T).long()
    assert acc.abs().max() < 2**24  # exact in float32 too
    return acc, torch.tensor(unit.scale, dtype=torch.float32), qweight.q_per_channel_scales().float()


def check_kernels_agree(weight: Tensor, bias: Tensor | None, x: Tensor, alpha: float | None,
                        calibration: Tensor | None = None) -> float:
    """Both kernels' outputs equal their dequantization of the exact accumulations bit for bit (input range from
    `calibration`, default `x`); returns the largest difference between the two kernels' outputs in units of the
    last place of the larger of acc * s_x * s_w and the bias, as a fraction of its bound (at most 1 when within)."""
    calibration = x if calibration is None else calibration
    input_range = (calibration.amin(0).tolist(), calibration.amax(0).tolist())
    fbgemm = Int8Linear(weight, bias, input_range, alpha, kernel="fbgemm")
    onednn = Int8Linear(weight, bias, input_range, alpha, kernel="onednn")
    acc, s_x, s_w = exact_accumulation(fbgemm, x)
    coef = s_x * s_w
    b = torch.zeros(weight.shape[0]) if bias is None else bias.float()
    y_fbgemm, y_onednn = fbgemm(x), onednn(x)
    # fbgemm: round(acc * coef + b) once (exact product in float64, then one rounding to float32)
    assert torch.equal(y_fbgemm, (acc.double() * coef.double() + b.double()).float())
    # oneDNN: the product, then the sum; its kernel for the CPU applies the two scales as one coefficient,
    # round(round(acc * coef) + b) (Xeon with AMX), or one after the other, round(round(round(acc * s_x) * s_w) + b)
    # (EPYC with AVX-512). One unit of acc moves the output by coef, thousands of last places: an accumulation that
    # is not exact fails both.
    one_coefficient = torch.equal(y_onednn, acc.float() * coef + b)
    assert one_coefficient or torch.equal(y_onednn, acc.float() * s_x * s_w + b)
    assert onednn(x.view(x.shape[0], 1, -1)).shape == (x.shape[0], 1, weight.shape[0])
    # in units of the last place of the larger term: where the product and the bias nearly cancel, one rounding of
    # the product is many last places of the small sum
    larger = torch.maximum((acc.double() * coef.double()).abs(), b.double().abs()).float()
    ulp = torch.finfo(torch.float32).eps * larger.clamp(min=torch.finfo(torch.float32).tiny)
    # the bound: fbgemm's rounding (half an ulp of the sum), oneDNN's product's (half an ulp, or one for two scales)
    # and its sum's (half an ulp, or a power of 2 more)
    return float(((y_onednn - y_fbgemm).abs() / ulp).max()) / (2 if one_coefficient else 3)


@pytest.mark.parametrize(("rows", "inputs", "outputs", "with_bias"),
                         [(1, 384, 1152, True), (2, 384, 384, True), (31, 37, 53, True), (33, 1536, 384, True),
                          (700, 384, 1536, True), (5, 64, 16, False),
                          # oneDNN's row blocks (Int8Linear.ONEDNN_BLOCK_ROWS 512, last one padded to 64 rows)
                          (64, 48, 40, True), (512, 48, 40, True), (513, 48, 40, True), (1100, 48, 40, False)])
def test_kernels_accumulate_the_same_int32_on_edge_shapes(rows, inputs, outputs, with_bias) -> None:
    """Odd and tiny shapes, full-range inputs (AVX2's int16 pair sums must not saturate) and an outlier channel."""
    gen = torch.Generator().manual_seed(rows + inputs)
    x = torch.randn(rows + 3, inputs, generator=gen)  # the range from 3 more rows, so some inputs clamp below it
    x[:, inputs // 2] *= 30
    weight, bias = torch.randn(outputs, inputs, generator=gen) * 0.05, torch.randn(outputs, generator=gen)
    for alpha in SMOOTHING_CHOICES:  # inputs past the calibrated range saturate at 0 and 255
        assert check_kernels_agree(weight, bias if with_bias else None, x[:rows] * 1.5, alpha, x) <= 1


def test_onednn_products_see_a_bounded_set_of_shapes() -> None:
    """oneDNN compiles a kernel per shape: the packed encoder's ever-changing token counts must not reach it as such
    (memory grew without bound over a long int8 `bertkit embed` before the blocks)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Shapes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.rows: set[int] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if "qlinear_pointwise" in func._schema.name:
                self.rows.add(args[0].shape[0])
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 32, generator=gen)
    unit = Int8Linear(torch.randn(24, 32, generator=gen) * 0.1, torch.randn(24, generator=gen),
                      (x.amin(0).tolist(), x.amax(0).tolist()), None, kernel="onednn")
    with Shapes() as seen, torch.inference_mode():
        for rows in range(1, 2000, 13):
            assert unit(x[:rows]).shape == (rows, 24)
    step, block = Int8Linear.ONEDNN_ROW_STEP, Int8Linear.ONEDNN_BLOCK_ROWS
    assert seen.rows == set(range(step, block + 1, step))


@pytest.fixture(scope="module")
def minilm_unit_inputs():
    """all-MiniLM-L6-v2, its tokenizer, and every unit's real input (rows: the tokens of 2 WikiText-2 paragraphs)."""
    folder = minilm_folder()
    model, tok = BertModel.from_pretrained(folder).eval(), tokenizer_for(folder)
    modules = dict(model.named_modules())
    inputs: dict[str, Tensor] = {}

    def keep_input(name: str):
        def hook(_module: torch.nn.Module, args: tuple) -> None:
            inputs.setdefault(name, args[0].reshape(-1, args[0].shape[-1]).detach().clone())
        return hook

    handles = [modules[name].register_forward_pre_hook(keep_input(name)) for name in int8_units(model)]
    try:
        ids = [tok.encode(t, max_length=64, truncation=True).input_ids for t in wikitext_paragraphs(2)]
        batch = pad_batch(ids, [[0] * len(x) for x in ids], tok.pad_token_id)
        with torch.inference_mode():
            model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    finally:
        for handle in handles:
            handle.remove()
    return model, tok, inputs


def test_kernels_agree_on_real_minilm_layers(minilm_unit_inputs) -> None:
    """Every unit of all-MiniLM-L6-v2 on its real inputs: exact int32 accumulations on both kernels, outputs at most
    2 units in the last place (of the larger term) apart, 3 where oneDNN applies the two scales one after the other."""
    model, _tok, inputs = minilm_unit_inputs
    units = int8_units(model)
    assert set(inputs) == set(units) and len(units) == 24
    # 4 units a layer, smoothing choices alternating within a layer and between layers: each kind of unit gets both
    alphas = [SMOOTHING_CHOICES[(i // 4 + i) % 2] for i in range(len(units))]
    with torch.no_grad():
        worst = max(check_kernels_agree(weight.detach(), bias.detach(), inputs[name], alpha)
                    for (name, (weight, bias)), alpha in zip(units.items(), alphas))
    assert worst <= 1  # within 2 (one coefficient) or 3 (two scales) last places


def test_kernel_choice_follows_the_cpu_and_the_override(monkeypatch) -> None:
    monkeypatch.delenv("BERTKIT_INT8_KERNEL", raising=False)
    for flags, kernel in (({"avx2"}, "fbgemm"), ({"avx2", "avx512f"}, "fbgemm"),
                          ({"avx2", "avx512f", "avx512_vnni"}, "fbgemm"), ({"avx2", "avx512f", "amx_int8"}, "onednn"),
                          ({"avx2", "avx_vnni"}, "fbgemm")):
        monkeypatch.setattr(runtime, "cpu_flags", lambda f=flags: f)
        assert choose_int8_kernel()[0] == kernel, flags
    monkeypatch.setenv("BERTKIT_INT8_KERNEL", "onednn")
    assert choose_int8_kernel() == ("onednn", "asked for (BERTKIT_INT8_KERNEL)")
    assert choose_int8_kernel("fbgemm")[0] == "fbgemm"  # the option wins over the variable
    monkeypatch.setenv("BERTKIT_INT8_KERNEL", "vnni")
    with pytest.raises(ConfigError, match="BERTKIT_INT8_KERNEL: unknown int8 kernel 'vnni'; expected one of fbgemm, "
                                          "onednn or auto"):
        choose_int8_kernel()
    with pytest.raises(ConfigError, match="int8_kernel: unknown int8 kernel 'mkl'"):
        choose_int8_kernel("mkl")


def test_encoder_on_either_kernel_gives_the_same_embeddings_to_int8_rounding(minilm_unit_inputs) -> None:
    """One plan (every unit int8, ranges from the fixture's text), both kernels, other real text. An output one ulp
    apart sometimes moves a downstream int8 input across a rounding boundary, one level of that input's grid, which
    later layers carry on (as between batch widths in issue 24, N11): the embeddings are close, not bitwise equal,
    and equally close to float32."""
    model, tok, inputs = minilm_unit_inputs
    plan = Int8Plan({name: (x.amin(0).tolist(), x.amax(0).tolist()) for name, x in inputs.items()})
    texts = wikitext_paragraphs(9)[3:]
    encoders = {kernel: Encoder(model, tok, precision="int8", max_length=64, int8_kernel=kernel, calibration=plan)
                for kernel in INT8_KERNELS}
    assert {m.kernel for m in encoders["onednn"].bert.modules() if isinstance(m, Int8Linear)} == {"onednn"}
    assert {k: e.int8_kernel for k, e in encoders.items()} == {"fbgemm": "fbgemm", "onednn": "onednn"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long paragraphs cut at 64 tokens
        exact = Encoder(model, tok, precision="fp32", max_length=64).encode(texts)
        fbgemm, onednn = encoders["fbgemm"].encode(texts), encoders["onednn"].encode(texts)
    assert F.cosine_similarity(fbgemm, onednn).min() > 0.998  # every unit int8, the most sensitive ones too
    to_float = [float(F.cosine_similarity(e, exact).min()) for e in (fbgemm, onednn)]
    assert abs(to_float[0] - to_float[1]) < 0.002, to_float
