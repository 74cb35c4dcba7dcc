"""bertkit's CPU dropout (16 random bits per element): the rate, the scale, independence, gradients, seeding, and the
written-out training attention path it feeds."""

from __future__ import annotations

import pytest
import torch

from bertkit.model import BertConfig, BertModel
from bertkit.model.kernels import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(1_000_003)  # not a multiple of 4: the last 64-bit word is only partly used
    y = dropout(x, p)
    rounded = round(p * 65536) / 65536
    dropped = (y == 0).double().mean().item()
    # 1M Bernoulli draws: standard error <= 0.0005
    assert abs(dropped - rounded) < 0.003
    survivors = y[y != 0]
    assert torch.all(survivors == survivors[0])
    assert survivors[0].item() == pytest.approx(1 / (1 - rounded), rel=1e-6)
    assert y.double().mean().item() == pytest.approx(1.0, abs=0.01)  # unbiased


def test_masks_are_independent_across_positions() -> None:
    """Neighbouring elements (which share a 64-bit random word) are dropped independently."""
    torch.manual_seed(1)
    kept = (dropout(torch.ones(4_000_000), 0.5) != 0).double().view(-1, 4)
    for lane in range(3):
        corr = torch.corrcoef(torch.stack([kept[:, lane], kept[:, lane + 1]]))[0, 1].item()
        assert abs(corr) < 0.005
    # each of the four lanes of a word drops at the same rate
    assert torch.allclose(kept.mean(0), torch.full((4,), 0.5, dtype=torch.float64), atol=0.002)


def test_identity_when_off() -> None:
    x = torch.randn(64, 32)
    assert dropout(x, 0.1, training=False) is x
    assert dropout(x, 0.0) is x
    module = Dropout(0.3).eval()
    assert module(x) is x


def test_seeded_and_gradient() -> None:
    x = torch.randn(8, 300, requires_grad=True)
    torch.manual_seed(5)
    a = dropout(x, 0.1)
    torch.manual_seed(5)
    b = dropout(x, 0.1)
    torch.manual_seed(6)
    c = dropout(x, 0.1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    a.sum().backward()
    scale = 65536 / (65536 - round(0.1 * 65536))
    expected = torch.where(a != 0, torch.tensor(scale), torch.tensor(0.0))
    assert torch.allclose(x.grad, expected)


def test_training_attention_path_matches_eval_path() -> None:
    """With a dropout rate that rounds to zero, the written-out training attention (masking, softmax, dropout)
    gives the same outputs as the fused kernel used in evaluation, on a padded batch."""
    config = BertConfig.preset("tiny", vocab_size=500, hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-9)
    torch.manual_seed(0)
    model = BertModel(config)
    ids = torch.randint(5, 500, (3, 17))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    with torch.no_grad():
        trained = model.train()(ids, mask).last_hidden_state
        evaluated = model.eval()(ids, mask).last_hidden_state
    assert torch.allclose(trained, evaluated, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_is_ones_and_zeros_of_the_dtype(dtype: torch.dtype) -> None:
    from bertkit.model.kernels import keep_mask

    torch.manual_seed(0)
    keep, scale = keep_mask((300, 7), 0.25, dtype)
    assert keep.dtype == dtype and keep.shape == (300, 7)
    assert set(keep.unique().tolist()) == {0.0, 1.0}
    assert scale == 65536 / (65536 - round(0.25 * 65536))


def test_dropout_add_is_residual_plus_dropout() -> None:
    """The one-pass residual + dropout(x) draws the same mask as dropout and gives its sum, value and gradient."""
    from bertkit.model.kernels import dropout_add

    x = torch.randn(64, 300, requires_grad=True)
    residual = torch.randn(64, 300, requires_grad=True)
    torch.manual_seed(9)
    fused = dropout_add(x, residual, 0.1)
    fused.backward(torch.ones_like(fused))
    grads = x.grad.clone(), residual.grad.clone()
    x.grad = residual.grad = None
    torch.manual_seed(9)
    plain = residual + dropout(x, 0.1)
    plain.backward(torch.ones_like(plain))
    assert torch.allclose(fused, plain, atol=1e-6)
    assert torch.equal(grads[0], x.grad) and torch.equal(grads[1], residual.grad)
    assert torch.equal(dropout_add(x, residual, 0.1, training=False), residual + x)
