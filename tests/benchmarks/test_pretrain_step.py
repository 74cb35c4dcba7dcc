"""bench_pretrain_step's work accounting: the model FLOPs per real token of the plain path and of the levers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_pretrain_step  # noqa: E402


def test_flops_per_token_by_hand() -> None:
    """L1 H2 I4 V10; two sequences of 2 and 1 tokens padded to 2, one masked token. Per position: 6 x (4 H^2 +
    2 H I) = 192 in the linear layers, 12 L H = 24 per (query, key) pair, 6 x (H^2 + H V) = 144 per MLM row."""
    shape = dict(num_hidden_layers=1, hidden_size=2, intermediate_size=4, vocab_size=10)
    batch = dict(input_ids=torch.tensor([[5, 6], [7, 0]]), attention_mask=torch.tensor([[1, 1], [1, 0]]),
                 labels=torch.tensor([[-100, 6], [-100, -100]]))
    f = bench_pretrain_step.flops_per_token
    assert f(shape, [batch], sparse_mlm=False, unpadded=False) == pytest.approx((192 * 4 + 24 * 8 + 144 * 4) / 3)
    assert f(shape, [batch], sparse_mlm=True, unpadded=True) == pytest.approx((192 * 3 + 24 * 5 + 144 * 1) / 3)
    assert f(shape, [batch], sparse_mlm=True, unpadded=False) == pytest.approx((192 * 4 + 24 * 8 + 144 * 1) / 3)
    # a fixed block of 3 MLM places per sequence: at most the width (2), so 2 rows x 2 places
    assert f(shape, [batch], sparse_mlm=True, unpadded=False, mlm_slots=3) == pytest.approx((192 * 4 + 24 * 8 + 144 * 4) / 3)
    assert f(shape, [batch], sparse_mlm=True, unpadded=False, mlm_slots=1) == pytest.approx((192 * 4 + 24 * 8 + 144 * 2) / 3)
    # the sparse last layer (here the only one): keys and values at every token, 6 x 2 H^2 = 48 each; queries,
    # output projections and feed-forward block, 192 - 48 = 144, at the most masked positions + [CLS] of a row (2)
    # in both rows; attention 24 per (place, key) pair: 2 rows x 2 places x width 2
    assert f(shape, [batch], sparse_mlm=True, unpadded=True, sparse_last_layer=True) == pytest.approx(
        (48 * 3 + 144 * 4 + 24 * 8 + 144 * 1) / 3)
    assert f(shape, [batch], sparse_mlm=True, unpadded=False, sparse_last_layer=True) == pytest.approx(
        (48 * 4 + 144 * 4 + 24 * 8 + 144 * 1) / 3)
    # without sparse MLM the heads read every position, so the last layer is whole
    assert f(shape, [batch], sparse_mlm=False, unpadded=False, sparse_last_layer=True) == pytest.approx(
        (192 * 4 + 24 * 8 + 144 * 4) / 3)


def test_load_batches_reads_the_folder_as_pretrain_does(tmp_path: Path, data_dir: Path, tokenizer) -> None:
    """--data: real instances through the training collator: each row predicts min(20, max(1, round(0.15 n))) of
    its n non-special tokens, widths are multiples of 8, the order is seeded, and too little data is refused."""
    from bertkit.data import PretrainingDataConfig, PretrainingDataset, prepare_pretraining

    out = tmp_path / "pt"
    prepare_pretraining([data_dir / "jane_austen" / "persuasion.txt"], out, tokenizer,
                        PretrainingDataConfig(max_length=64, dupe_factor=1, dynamic_masking=True))
    batches = bench_pretrain_step.load_batches(out, 3, 4)
    assert [b["input_ids"].shape[0] for b in batches] == [4, 4, 4]
    special = torch.tensor(sorted({tokenizer.vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]")}))
    for b in batches:
        assert b["input_ids"].shape[1] % 8 == 0 and b["input_ids"].shape[1] <= 64
        real = b["attention_mask"].bool()
        originals = torch.where(b["labels"] != -100, b["labels"], b["input_ids"])
        n = (real & ~torch.isin(originals, special)).sum(1)
        expected = torch.clamp(torch.round(n * 0.15), 1, 20)
        assert torch.equal((b["labels"] != -100).sum(1), expected.long())
    again = bench_pretrain_step.load_batches(out, 3, 4)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(batches, again))
    with pytest.raises(SystemExit, match="fewer than"):
        bench_pretrain_step.load_batches(out, len(PretrainingDataset(out)), 4)


def test_a_compiled_or_bf16_row_does_its_levers_work_and_transformers_the_plain_paths() -> None:
    assert bench_pretrain_step.lever_work("all, compiled") == bench_pretrain_step.lever_work("all") == dict(
        sparse_mlm=True, unpadded=True, mlm_slots=0, sparse_last_layer=True)
    assert bench_pretrain_step.lever_work("all, bf16") == bench_pretrain_step.lever_work("all")
    assert bench_pretrain_step.lever_work("all, bf16, compiled") == bench_pretrain_step.lever_work("all")
    assert bench_pretrain_step.lever_work("transformers") == dict(sparse_mlm=False, unpadded=False)
    assert bench_pretrain_step.lever_work("transformers, bf16") == dict(sparse_mlm=False, unpadded=False)
    assert bench_pretrain_step.lever_work("all, bf16 weights") == bench_pretrain_step.lever_work("all")
    assert bench_pretrain_step.lever_work("transformers, bf16 weights") == dict(sparse_mlm=False, unpadded=False)
    assert bench_pretrain_step.lever_work("+sparse MLM in 40 slots")["mlm_slots"] == 40


@pytest.mark.parametrize("lib", ["bertkit", "transformers"])
def test_a_bf16_weights_step_updates_the_float32_master_weights(lib: str, monkeypatch) -> None:
    """--bf16-weights rows: the step runs a bf16 copy and AdamW moves every float32 weight, for either library."""
    pytest.importorskip("transformers")
    from common import make_step

    shape = dict(vocab_size=1100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    monkeypatch.setitem(bench_pretrain_step.SIZES, "test", shape)  # random batches draw ids from 1000 up
    torch.manual_seed(0)
    model = bench_pretrain_step.build(lib, "test")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step = make_step(model, autocast_device="cpu", bf16_weights=True)
    step(bench_pretrain_step.make_batches(1, 4, 16, 1100)[0])
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and not torch.equal(p, before[name]), name
