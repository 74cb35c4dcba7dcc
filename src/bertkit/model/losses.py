"""The losses that train sentence embeddings, as pure functions of the embeddings (any head, any trainer can call
them): in-batch negatives (InfoNCE) and CoSENT. Both compare cosine similarities multiplied by a scale (an inverse
temperature) and compute in float32 whatever the embeddings' precision.

- `in_batch_negatives_loss`: for each anchor (a query), its own positive must score above every other candidate of
  the batch: the other anchors' positives and every hard negative. The cross-entropy of the scaled cosines with the
  diagonal as the target: van den Oord et al. 2018 ("InfoNCE"), Henderson et al. 2017, sentence-transformers'
  MultipleNegativesRankingLoss (its default directions) and, with the same text twice through dropout, unsupervised
  SimCSE (Gao et al. 2021, temperature 0.05 = scale 20).
- `cosent_loss`: for scored pairs, log(1 + sum over pairs (i, j) with score_i > score_j of exp(s_j - s_i)), s the
  scaled cosine of each pair's two texts (Su 2022, "CoSENT"; sentence-transformers' CoSENTLoss): only the order of
  the similarities is trained, not their values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.model.pooling import DEFAULT_SCALE


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(n, dim), (m, dim) -> (n, m): the cosine similarity of every row of a with every row of b, in float32."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def in_batch_negatives_loss(anchors: Tensor, positives: Tensor, *negatives: Tensor,
                            scale: float | Tensor = DEFAULT_SCALE) -> Tensor:
    """Multiple negatives ranking (InfoNCE) over a batch: anchors, positives and each hard-negative column are
    (batch, dim), row i of each belonging to example i. Anchor i's candidates are every positive and negative of
    the batch, its own positive the right one: the mean over anchors of -log softmax(scale * cosines)[own positive]."""
    candidates = torch.cat([positives, *negatives])  # (batch * (1 + negatives), dim): positives first, as ST's
    scores = cosine_matrix(anchors, candidates) * scale  # (batch, batch * (1 + negatives))
    return F.cross_entropy(scores, torch.arange(len(anchors), device=scores.device))


def cosent_loss(a: Tensor, b: Tensor, scores: Tensor, scale: float | Tensor = DEFAULT_SCALE) -> Tensor:
    """CoSENT over a batch of scored pairs: a and b (batch, dim), scores (batch,) the gold similarity of each pair.
    log(1 + sum_{i, j: score_i > score_j} exp(s_j - s_i)), with s = scale * cos(a, b) of each pair."""
    s = (F.normalize(a.float(), dim=-1) * F.normalize(b.float(), dim=-1)).sum(-1) * scale  # (batch,)
    differences = s[None, :] - s[:, None]  # [i, j] = s_j - s_i
    ordered = scores[:, None] > scores[None, :]  # pairs (i, j) whose order the loss checks: score_i > score_j
    return torch.logsumexp(torch.cat([s.new_zeros(1), differences[ordered]]), dim=0)
