"""Calibrated static int8 (bertkit.inference.quantize): close to float32 on real text, deterministic, and only when
asked. The SST-2 accuracy check (int8 within 0.5 points of float32 on a fine-tuned classifier) is marked slow."""

from __future__ import annotations

import csv
import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from inference_helpers import DATA, minilm_folder, tokenizer_for, wikitext_paragraphs

from bertkit.inference.encoder import Encoder
from bertkit.inference.pooling import pad_batch
from bertkit.inference.precision import choose_precision
from bertkit.inference.quantize import Int8Linear, Int8Plan, calibration_paragraphs, default_calibration_texts
from bertkit.model import BertForSequenceClassification, BertModel


@pytest.fixture(scope="module")
def minilm():
    folder = minilm_folder()
    return BertModel.from_pretrained(folder), tokenizer_for(folder)


def test_int8_linear_is_close_to_float_without_avx2_saturation_or_outlier_damage() -> None:
    """Full-range activations (AVX2's int16 pair sums must not saturate) and one outlier channel 30x the others
    (as in BERT's LayerNorm outputs; smoothing keeps the other channels' resolution)."""
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(500, 384, generator=gen), torch.randn(1152, 384, generator=gen) * 0.05, torch.zeros(1152)
    x[:, 7] *= 30
    exact = F.linear(x, w, b)
    int8 = Int8Linear(w, b, (x.amin(0).tolist(), x.amax(0).tolist()))(x)
    assert (int8 - exact).norm() / exact.norm() < 0.03  # 0.09 with one activation scale and no smoothing


def test_int8_encoder_stays_close_to_fp32_on_unseen_text(minilm) -> None:
    """Calibrated on Austen (the default), evaluated on WikiText-2: a different text, as in use."""
    model, tok = minilm
    texts = wikitext_paragraphs(24)
    calibration = default_calibration_texts(8, 16, 2)
    ref = Encoder(model, tok, precision="fp32", max_length=256).encode(texts)
    enc = Encoder(model, tok, precision="int8", max_length=256, calibration=calibration)
    assert F.cosine_similarity(ref, enc.encode(texts)).min() >= 0.99
    plan = enc.int8_plan
    assert plan is not None and plan.min_cosine >= 0.997
    assert set(plan.sensitivity) == set(plan.smoothing) == set(plan.input_ranges)
    assert any(isinstance(m, Int8Linear) for m in enc.bert.modules())
    assert next(model.parameters()).dtype == torch.float32 and not any(isinstance(m, Int8Linear)
                                                                          for m in model.modules())
    # Stored or recomputed, the plan is the same, and so are the embeddings.
    again = Encoder(model, tok, precision="int8", max_length=256, calibration=calibration).int8_plan
    assert again == plan
    stored = Int8Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    same = Encoder(model, tok, precision="int8", max_length=256, calibration=stored)
    assert torch.equal(same.encode(texts[:4]), enc.encode(texts[:4]))


def test_calibration_text_longer_than_max_length_is_cut_without_a_warning(minilm) -> None:
    """The shipped calibration paragraphs run past short max_lengths; that is no news to the user (their own long
    texts still warn: test_encoder.py)."""
    model, tok = minilm
    calibration = calibration_paragraphs(2)
    assert all(len(tok.encode(t).input_ids) > 32 for t in calibration)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc = Encoder(model, tok, precision="int8", max_length=32, calibration=calibration)
    assert enc.int8_plan is not None
    with pytest.warns(UserWarning, match="1 of 1 texts were longer than 32 tokens"):
        enc.encode([calibration[0]])


def test_int8_is_used_only_when_asked(minilm, monkeypatch) -> None:
    from bertkit import runtime

    model, tok = minilm
    cpu = torch.device("cpu")
    for flags in ({"avx2"}, {"avx2", "avx512_vnni"}, {"avx2", "avx512_vnni", "amx_int8"}):
        monkeypatch.setattr(runtime, "cpu_flags", lambda f=flags: f)
        assert choose_precision("auto", cpu)[0] == "fp32"
    assert Encoder(model, tok, precision="auto").int8_plan is None


def sst2(split: str, limit: int | None = None) -> tuple[list[str], list[int]]:
    """SST-2 sentences and labels from the shared GLUE TSV."""
    with open(DATA / "sst2" / f"{split}.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:limit]
    return [r["sentence"] for r in rows], [int(r["label"]) for r in rows]


def classifier_logits(model: BertForSequenceClassification, tok, texts: list[str]) -> torch.Tensor:
    """The classifier's logits for every text (batches of 64, at most 128 tokens)."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), 64):
            ids = [tok.encode(t, max_length=128, truncation=True).input_ids for t in texts[start:start + 64]]
            batch = pad_batch(ids, [[0] * len(x) for x in ids], tok.pad_token_id)
            out.append(model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits)
    return torch.cat(out)


@pytest.mark.slow
def test_int8_sst2_accuracy_within_half_a_point_of_fp32() -> None:
    """Fine-tune MiniLM on 3,000 SST-2 training sentences for one epoch, then score all 872 dev sentences in float32
    and in int8 calibrated on other training sentences (never dev). The int8 run must really be int8: the plan's
    products are Int8Linear modules and the logits move, by little (a silent float32 fallback would pass the
    accuracy check alone)."""
    folder = minilm_folder()
    tok = tokenizer_for(folder)
    torch.manual_seed(0)  # the new head's initialisation and dropout draw from torch's global generator
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2)
    texts, labels = sst2("train", 3400)
    train_texts, train_labels, calibration = texts[:3000], labels[:3000], texts[3000:]
    gen = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    model.train()
    for step in torch.randperm(len(train_texts), generator=gen).split(32):
        ids = [tok.encode(train_texts[i], max_length=128, truncation=True).input_ids for i in step]
        batch = pad_batch(ids, [[0] * len(x) for x in ids], tok.pad_token_id)
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                    labels=torch.tensor([train_labels[i] for i in step]))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    dev_texts, dev_labels = sst2("dev")
    fp32_logits = classifier_logits(model, tok, dev_texts)
    encoder = Encoder(model, tok, precision="int8", max_length=128, calibration=calibration)
    model.bert = encoder.bert  # a copy, its products in int8 but those the plan keeps in float32
    plan = encoder.int8_plan
    in_int8 = [name for name, m in model.bert.named_modules() if isinstance(m, Int8Linear)]
    assert plan is not None and len(in_int8) == len(plan.input_ranges) - len(plan.float_units) > 0
    int8_logits = classifier_logits(model, tok, dev_texts)
    gold = torch.tensor(dev_labels)
    fp32, int8 = (100 * float((x.argmax(-1) == gold).float().mean()) for x in (fp32_logits, int8_logits))
    diff = (int8_logits - fp32_logits).abs()
    agree = float((int8_logits.argmax(-1) == fp32_logits.argmax(-1)).float().mean())
    print(f"SST-2 dev accuracy: fp32 {fp32:.2f}, int8 {int8:.2f} ({len(in_int8)} of {len(plan.input_ranges)} "
          f"products in int8); logits |int8 - fp32| max {float(diff.max()):.4f}, mean {float(diff.mean()):.4f} "
          f"(mean |fp32 logit| {float(fp32_logits.abs().mean()):.3f}); same label {100 * agree:.2f}%")
    assert len(dev_texts) == 872 and fp32 > 80
    assert abs(fp32 - int8) <= 0.5
    assert float(diff.max()) > 1e-3  # int8 ran: float32 twice gives the same logits
    assert float(diff.mean()) < 0.1 * float(fp32_logits.abs().mean()) and agree >= 0.98  # ... and stayed close


def test_a_float_unit_gives_each_row_the_same_bits_at_every_row_count() -> None:
    """FloatLinear feeds int8 units, so a row's output must not depend on how many rows share the product (issue 24,
    N11). MKL picks kernels by row count (on an AMX Xeon a 384 -> 1536 product gave other bits from 16 rows up):
    every call has FLOAT_BLOCK_ROWS rows, so each row's bits are those of the row alone."""
    from bertkit.inference.quantize import FLOAT_BLOCK_ROWS, FloatLinear

    torch.manual_seed(0)
    for out_features, in_features in ((1536, 384), (384, 1536)):
        unit = FloatLinear(torch.randn(out_features, in_features), torch.randn(out_features))
        x = torch.randn(3 * FLOAT_BLOCK_ROWS + 5, in_features)
        alone = torch.cat([unit(x[i : i + 1]) for i in range(8)])
        for rows in (8, 13, FLOAT_BLOCK_ROWS, FLOAT_BLOCK_ROWS + 1, len(x)):
            assert torch.equal(unit(x[:rows])[:8], alone), (out_features, rows)
        assert torch.allclose(unit(x), torch.nn.functional.linear(x, unit.weight, unit.bias), atol=1e-4)
        assert unit(x.view(1, -1, in_features)).shape == (1, len(x), out_features)
    no_bias = FloatLinear(torch.randn(4, 6), None)
    assert torch.allclose(no_bias(torch.ones(2, 6)), torch.ones(2, 6) @ no_bias.weight.t())
