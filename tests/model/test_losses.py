"""The embedding losses: hand-computed values, and sentence-transformers' MultipleNegativesRankingLoss and CoSENTLoss
on the same embeddings (same loss, same gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from bertkit.model.losses import cosent_loss, cosine_matrix, in_batch_negatives_loss


def _st_losses():  # noqa: ANN202 (sentence-transformers' two loss classes)
    st = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
    return st.MultipleNegativesRankingLoss, st.CoSENTLoss


def test_in_batch_negatives_loss_by_hand() -> None:
    """Two anchors, two positives at right angles: anchor 0 equals positive 0 (cosine 1) and is orthogonal to
    positive 1 (cosine 0); anchor 1 lies between both (cosines 1/sqrt 2). Scale 2."""
    anchors = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    positives = torch.tensor([[3.0, 0.0], [0.0, 5.0]])  # lengths do not matter: cosines
    c = 2 / math.sqrt(2)
    expected = (-math.log(math.exp(2) / (math.exp(2) + 1)) - math.log(math.exp(c) / (2 * math.exp(c)))) / 2
    assert in_batch_negatives_loss(anchors, positives, scale=2.0).item() == pytest.approx(expected, rel=1e-6)
    # A hard negative equal to anchor 1's positive direction joins every anchor's candidates.
    negatives = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    with_negatives = (-math.log(math.exp(2) / (math.exp(2) + 3)) - math.log(math.exp(c) / (4 * math.exp(c)))) / 2
    assert in_batch_negatives_loss(anchors, positives, negatives, scale=2.0).item() == pytest.approx(with_negatives,
                                                                                                     rel=1e-6)


def test_cosent_loss_by_hand() -> None:
    """Three pairs with cosines 1, 0 and -1 and scores 0.2, 0.9, 0.5: the ordered pairs (i, j) with score_i > score_j
    are (1, 0), (1, 2), (2, 0); the loss is log(1 + sum exp(scale * (cos_j - cos_i)))."""
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    scores = torch.tensor([0.2, 0.9, 0.5])
    s = [20.0, 0.0, -20.0]
    expected = math.log(1 + math.exp(s[0] - s[1]) + math.exp(s[2] - s[1]) + math.exp(s[0] - s[2]))
    assert cosent_loss(a, b, scores).item() == pytest.approx(expected, rel=1e-6)
    # Tied scores order nothing: a batch of equal scores has loss log(1) = 0.
    assert cosent_loss(a, b, torch.full((3,), 0.5)).item() == 0.0


def test_cosine_matrix_is_the_cosine_of_every_pair() -> None:
    a, b = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), torch.randn(4, 5)
    expected = torch.nn.functional.cosine_similarity(a[:, None], b[None], dim=-1)
    assert torch.allclose(cosine_matrix(a, b), expected, atol=1e-6)


def _leaves(*shapes: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).float().requires_grad_() for shape in shapes]


def _gradients(loss: torch.Tensor, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, leaves))


@pytest.mark.parametrize("negatives", [0, 1, 2])
@pytest.mark.parametrize("scale", [20.0, 7.5])
def test_in_batch_negatives_equals_sentence_transformers(negatives: int, scale: float) -> None:
    """Same embeddings in (anchors, positives, hard-negative columns) -> the same loss and the same gradients as
    MultipleNegativesRankingLoss.compute_loss_from_embeddings with its defaults (cos_sim, query_to_doc)."""
    mnrl, _ = _st_losses()
    leaves = _leaves(*[(8, 16)] * (2 + negatives), seed=negatives)
    ours = in_batch_negatives_loss(*leaves, scale=scale)
    theirs = mnrl(None, scale=scale).compute_loss_from_embeddings(leaves, torch.zeros(8))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    for g_ours, g_theirs in zip(_gradients(ours, leaves), _gradients(theirs, leaves)):
        assert torch.allclose(g_ours, g_theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("scores", ["distinct", "ties"])
def test_cosent_equals_sentence_transformers(scores: str) -> None:
    """Same pair embeddings and scores -> the same loss and gradients as CoSENTLoss (its sorted, log-cumulative
    form of the same sum), with distinct scores and with ties (tied pairs order nothing)."""
    _, cosent = _st_losses()
    a, b = _leaves((10, 16), (10, 16), seed=3)
    g = torch.Generator().manual_seed(4)
    gold = torch.rand(10, generator=g) if scores == "distinct" else torch.randint(0, 3, (10,), generator=g).float()
    ours = cosent_loss(a, b, gold)
    theirs = cosent(None).compute_loss_from_embeddings([a, b], gold)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)
    for g_ours, g_theirs in zip(_gradients(ours, [a, b]), _gradients(theirs, [a, b])):
        assert torch.allclose(g_ours, g_theirs, rtol=1e-4, atol=1e-7)
