"""Packed execution: length-grouped attention gives the padded path's outputs and gradients, for any mask."""

from __future__ import annotations

import pytest
import torch

from bertkit.model import BertConfig, BertForPreTraining, BertModel
from bertkit.model.kernels import Packing


def _batch(lengths: list[int], width: int, left_padded: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 500, (len(lengths), width), generator=g)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    if left_padded:
        mask = mask.flip(1)
    return ids * mask, mask


@pytest.fixture()
def no_grouping(monkeypatch: pytest.MonkeyPatch):
    """Run the padded attention path by making grouping never worth it."""
    return lambda: monkeypatch.setattr(Packing, "GROUP_WORTH", 0.0)


def test_groups_form_for_varied_lengths() -> None:
    _, mask = _batch([3, 70, 71, 100, 128, 20, 64, 127], 128)
    packing = Packing(mask)
    assert packing.groups is not None
    assert sum(g.size for g in packing.groups) == 8
    assert [g.width for g in packing.groups] == sorted(g.width for g in packing.groups)
    # packing then unpacking restores the real tokens and zeroes the padding, in the grouped order too
    x = torch.randn(8, 128, 4)
    back = packing.unpack(packing.pack(x))
    assert torch.equal(back, x * mask[..., None])
    # equal lengths: nothing to group
    assert Packing(torch.ones(4, 16, dtype=torch.long)).groups is None
    _, similar = _batch([120, 124, 128, 126], 128)
    assert Packing(similar).groups is None


@pytest.mark.parametrize("left_padded", [False, True])
def test_grouped_attention_matches_padded(left_padded: bool, no_grouping) -> None:
    config = BertConfig.preset("tiny", vocab_size=500, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertModel(config).eval()
    ids, mask = _batch([3, 70, 71, 100, 128, 20, 64, 127, 1], 128, left_padded)
    assert Packing(mask).groups is not None
    with torch.no_grad():
        grouped = model(ids, mask)
        no_grouping()
        padded = model(ids, mask)
    assert torch.allclose(grouped.last_hidden_state, padded.last_hidden_state, atol=2e-6)
    assert torch.allclose(grouped.pooler_output, padded.pooler_output, atol=2e-6)
    assert torch.all(grouped.last_hidden_state[mask == 0] == 0)


def test_grouped_training_step_matches_padded(no_grouping) -> None:
    """Loss and every gradient of a pre-training step agree (dropout's rate rounds to zero, so the written-out
    training attention runs and draws the same masks)."""
    config = BertConfig.preset("tiny", vocab_size=500, hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-9)
    ids, mask = _batch([12, 64, 40, 64, 7, 33], 64)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    labels[1, 50] = ids[1, 50]
    nsp = torch.tensor([0, 1, 0, 1, 1, 0])

    def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = BertForPreTraining(config).train()
        loss = model(ids, mask, labels=labels, next_sentence_label=nsp).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    assert Packing(mask).groups is not None
    loss_grouped, grads_grouped = step()
    no_grouping()
    loss_padded, grads_padded = step()
    assert torch.allclose(loss_grouped, loss_padded, atol=1e-6)
    assert grads_grouped.keys() == grads_padded.keys()
    for name, grad in grads_grouped.items():
        assert torch.allclose(grad, grads_padded[name], atol=1e-6, rtol=1e-4), name


def test_groups_gather_every_real_row_once_and_give_its_gradient_back() -> None:
    """to_groups/from_groups round-trip the packed rows; a padded slot holds its sequence's first row, and the
    gradient read back from the real slots equals index_select's own (scatter-add) gradient when, as in attention,
    the padded slots receive none."""
    _, mask = _batch([3, 70, 71, 100, 128, 20, 64, 127, 1], 128)
    packing = Packing(mask)
    assert packing.groups is not None
    tokens = int(mask.sum())
    x = torch.randn(tokens, 6, requires_grad=True)
    grids = packing.to_groups(x)
    assert [grid.shape[0] for grid in grids] == [g.size * g.width for g in packing.groups]
    assert torch.equal(packing.from_groups(grids), x)
    flat = torch.cat(grids)
    real = torch.zeros(flat.shape[0], dtype=torch.bool)
    real[packing.group_real] = True
    assert torch.equal(flat[~real], x[packing.group_gather[~real]])  # padded slots: real rows, finite
    weights = torch.randn_like(flat) * real[:, None]  # no gradient at padded slots
    (grad,) = torch.autograd.grad((flat * weights).sum(), x)
    x_ref = x.detach().requires_grad_()
    (expected,) = torch.autograd.grad((x_ref.index_select(0, packing.group_gather) * weights).sum(), x_ref)
    assert torch.equal(grad, expected)
