"""How bertkit's BERT runs fast on a CPU without changing its numbers: packed execution and a cheaper dropout mask.

- No work on padding (`Packing`): linear layers, LayerNorm and GELU run on the real tokens packed into one
  (tokens, hidden) matrix; only the attention product is padded, on CPU group by group of similar lengths.
  Hidden states at padded positions are returned as zeros. Exact in float32 at every real token.
- Dropout draws 16 random bits per element instead of one random float (`dropout`).
- GELU runs in blocks of a fixed number of rows on CPU (`GELU`), so memory stays flat over a long job.

None of it knows anything about BERT. `first_places` and `gather_places` pick and read a few positions of a batch
(sparse MLM, the last layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype) -> tuple[Tensor, float]:
    """The CPU dropout mask: (keep, 1 or 0 of `dtype` in `shape`; the survivors' scale).

    It costs one 64-bit random draw per four elements: each element gets 16 uniform random bits and is dropped when
    they fall below p * 2**16, so p is rounded to a multiple of 2**-16 (0.1 -> 0.100006) and the scale is the
    rounded 1 / (1 - p): the expectation stays exact.
    """
    numel, drop = math.prod(shape), round(p * 65536)  # dropped bit patterns out of 2**16
    words = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # uniform 64-bit words
    bits = words.view(torch.int16)[:numel].view(shape)  # uniform over [-32768, 32767]
    # The comparison writes 1 or 0 of `dtype` straight away: a boolean mask and its conversion cost 5x more.
    keep = torch.ge(bits, drop - 32768, out=torch.empty(shape, dtype=dtype))
    return keep, 65536 / (65536 - drop)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout: zero each element with probability p, scale the survivors by 1 / (1 - p); on CPU with
    `keep_mask` (16 random bits per element instead of one random float), on other devices with torch's own."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    keep, scale = keep_mask(x.shape, p, x.dtype)
    return x * keep.mul_(scale)


def dropout_add(x: Tensor, residual: Tensor, p: float, training: bool = True) -> Tensor:
    """residual + dropout(x), on CPU in one pass (addcmul) instead of a multiply and an add."""
    if not training or p == 0.0 or x.device.type != "cpu" or not 0.0 < p < 1.0:
        return residual + dropout(x, p, training)
    keep, scale = keep_mask(x.shape, p, x.dtype)
    return torch.addcmul(residual, x, keep, value=scale)


class GELU(nn.Module):
    """nn.GELU (exact erf or tanh), computed on CPU in chunks of CHUNK_ROWS rows, then blocks of BLOCK_ROWS: the
    same values as one call.

    torch runs a float32 GELU on CPU through oneDNN, which compiles and caches one kernel per tensor shape. On the
    packed path (`Packing`) the row count is the batch's token count, new in nearly every batch, so memory grew with
    the length of a job (docs/results/embed-memory-epyc-avx2-2026-11-25.md). Whole chunks, whole blocks and the
    last partial block bound the shapes to BLOCK_ROWS + 1 per width. GELU is element-wise, so the pieces give the
    values of one call; the blocks (below torch's parallel grain) run on one thread, the chunks on all of them, and
    their gradients are those of one call with as many threads.
    """

    BLOCK_ROWS = 256
    CHUNK_ROWS = 8 * BLOCK_ROWS  # whole chunks first: above torch's parallel grain, so every thread works on them

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.shape[-1]) if x.dim() else x
        plain = (x.device.type != "cpu" or rows.dim() != 2 or rows.shape[0] <= self.BLOCK_ROWS
                 or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling())
        if plain:
            return F.gelu(x, approximate=self.approximate)
        whole = rows.shape[0] // self.CHUNK_ROWS * self.CHUNK_ROWS
        tail = rows.shape[0] - whole
        sizes = [self.CHUNK_ROWS] * (whole // self.CHUNK_ROWS) + [self.BLOCK_ROWS] * (tail // self.BLOCK_ROWS)
        sizes += [tail % self.BLOCK_ROWS] if tail % self.BLOCK_ROWS else []
        return _BlockGELU.apply(rows, self.approximate, sizes).view(x.shape)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class _BlockGELU(torch.autograd.Function):
    """GELU of (rows, width) and its gradient, computed block by block (`sizes` rows each) into one tensor."""

    @staticmethod
    def forward(ctx: Any, rows: Tensor, approximate: str, sizes: list[int]) -> Tensor:
        ctx.save_for_backward(rows)
        ctx.approximate, ctx.sizes = approximate, sizes
        out = torch.empty_like(rows)
        for b, o in zip(rows.split(sizes), out.split(sizes)):
            torch.ops.aten.gelu.out(b, approximate=approximate, out=o)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (rows,) = ctx.saved_tensors
        grad, out, sizes = grad.contiguous(), torch.empty_like(rows), ctx.sizes
        for g, b, o in zip(grad.split(sizes), rows.split(sizes), out.split(sizes)):
            torch.ops.aten.gelu_backward.grad_input(g, b, approximate=ctx.approximate, grad_input=o)
        return out, None, None


class _GatherRows(torch.autograd.Function):
    """x's rows at `index` (every row of x at least once), whose gradient is read back at `inverse`, the slot of
    each row of x that carries its gradient. Exact when every other slot receives a zero gradient: then one
    index_select replaces the zero-filled scatter-add of index_select's own backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, index: Tensor, inverse: Tensor) -> Tensor:
        ctx.save_for_backward(inverse)
        return x.index_select(0, index)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


class Dropout(nn.Module):
    """nn.Dropout with bertkit's cheaper CPU mask (`dropout`)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def add_to(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual + self(x), in one pass on CPU (`dropout_add`)."""
        return dropout_add(x, residual, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def first_places(flags: Tensor, n: int) -> Tensor:
    """(batch, seq) booleans -> (batch, n) positions: each row's flagged positions in order, then its unflagged
    ones from the start, cut at n. The places of a row are distinct (the first n of a permutation)."""
    return torch.sort(flags.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :n]


def gather_places(x: Tensor, places: Tensor) -> Tensor:
    """x (batch, seq, ...) at places (batch, n) -> (batch, n, ...)."""
    index = places.reshape(*places.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return x.gather(1, index)


@dataclass
class AttentionGroup:
    """Sequences of similar length that attend together, padded only to their own longest (see Packing)."""

    size: int  # sequences in the group
    width: int  # their longest length
    key_mask: Tensor | None  # (size, 1, 1, width), None when every sequence fills the width


class Packing:
    """Where the real tokens of a padded batch sit, to move between (batch, seq, ...) and packed (tokens, ...).

    With no padding in the batch, `indices` is None and both moves are reshapes. `padded=True` keeps every
    position (no data-dependent shapes, for graph export) and zeroes the padded ones on unpacking instead, so
    the outputs are the same as the packed path's.

    When the lengths vary enough on CPU, the sequences are packed shortest first and split into `groups` of
    similar length (lengths rounded up to 16), and attention runs group by group at each group's own width:
    a batch of lengths 64..128 then spends about 40% less on attention than padding everything to 128.
    """

    GROUP_ROUNDING = 16  # group lengths that round up to the same multiple of this
    GROUP_WORTH = 0.8  # group only when the attention area falls below this fraction of the padded one

    def __init__(self, attention_mask: Tensor, padded: bool = False) -> None:
        self.batch, self.seq_len = attention_mask.shape
        flat = attention_mask.reshape(-1).bool()
        self.keep = flat[:, None] if padded else None  # (batch * seq, 1), only in padded mode
        self.indices = None if padded or bool(flat.all()) else flat.nonzero().squeeze(1)  # (tokens,)
        # Boolean mask of the keys each query may attend to, (batch, 1, 1, seq); None when nothing is masked.
        masked = padded or self.indices is not None
        self.key_mask = attention_mask[:, None, None, :].bool() if masked else None
        self.groups: list[AttentionGroup] | None = None
        self.group_gather: Tensor | None = None  # with groups: see _group_by_length
        self.group_real: Tensor | None = None
        if self.indices is not None and attention_mask.device.type == "cpu":
            self._group_by_length(attention_mask.bool())

    def _group_by_length(self, mask: Tensor) -> None:
        lengths = mask.sum(1)
        r = self.GROUP_ROUNDING
        rounded = (lengths + r - 1) // r * r
        if float((rounded.double() ** 2).sum()) >= self.GROUP_WORTH * self.batch * self.seq_len**2:
            return
        order = torch.argsort(lengths, stable=True)  # shortest first
        rank = torch.empty_like(order)
        rank[order] = torch.arange(self.batch)
        # Re-pack the real tokens sequence by sequence in that order (token order within a sequence is kept).
        rows = self.indices // self.seq_len
        self.indices = self.indices[torch.argsort(rank[rows], stable=True)]
        sorted_lengths = lengths[order]
        starts = torch.cumsum(sorted_lengths, 0) - sorted_lengths  # first packed row of each sorted sequence
        self.groups, gathers, reals = [], [], []
        bounds = torch.unique_consecutive(rounded[order], return_counts=True)[1].tolist()
        first = grid_rows = 0
        for size in bounds:
            lens, begin = sorted_lengths[first : first + size], starts[first : first + size]
            width = int(lens[-1])
            slots = torch.arange(width)
            valid = slots[None, :] < lens[:, None]  # (size, width)
            # A padded slot reads its sequence's first row: a key the mask hides, a query whose output is dropped.
            gathers.append(torch.where(valid, begin[:, None] + slots[None, :], begin[:, None]).reshape(-1))
            reals.append(valid.reshape(-1).nonzero().squeeze(1) + grid_rows)
            key_mask = None if bool(valid.all()) else valid[:, None, None, :]
            self.groups.append(AttentionGroup(size, width, key_mask))
            first, grid_rows = first + size, grid_rows + size * width
        # One gather of every group's (size * width) grid, one after the other, and the real tokens' rows in them
        # in packed order: one copy each way (and one in the backward), whatever the number of groups.
        self.group_gather, self.group_real = torch.cat(gathers), torch.cat(reals)

    def to_groups(self, x: Tensor) -> list[Tensor]:
        """Packed (tokens, features) -> each group's (size * width, features) grid, padded slots holding a copy of
        their sequence's first row. The gradient comes back from the real slots only (`_GatherRows`), which is
        exact because attention gives padded slots none: the key mask hides them, and `from_groups` drops their
        outputs."""
        grid = _GatherRows.apply(x, self.group_gather, self.group_real)
        return list(grid.split([g.size * g.width for g in self.groups]))

    def from_groups(self, grids: list[Tensor]) -> Tensor:
        """The groups' (size * width, features) grids -> packed (tokens, features), the real slots' rows."""
        return torch.cat(grids).index_select(0, self.group_real)

    def pack(self, x: Tensor) -> Tensor:
        """(batch, seq, ...) -> (tokens, ...)"""
        x = x.reshape(self.batch * self.seq_len, *x.shape[2:])
        return x if self.indices is None else x.index_select(0, self.indices)

    def unpack(self, x: Tensor) -> Tensor:
        """(tokens, ...) -> (batch, seq, ...), zeros at padded positions."""
        if self.indices is not None:
            out = x.new_zeros(self.batch * self.seq_len, *x.shape[1:])
            x = out.index_copy(0, self.indices, x)
        elif self.keep is not None:
            x = x * self.keep.reshape(-1, *([1] * (x.dim() - 1))).to(x.dtype)
        return x.reshape(self.batch, self.seq_len, *x.shape[1:])
