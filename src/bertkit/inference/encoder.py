"""Fast sentence embeddings: sort by length, batch by a token budget, run only real tokens, pool packed.

What makes it fast on CPU (measured in benchmarks/bench_embed.py; the float32 matrix products are the wall):
- Length-sorted batches under a token budget: little padding, and large (tokens, hidden) matrices for the GEMMs.
- Packed end to end: embeddings, every linear layer, LayerNorm and GELU run on the (tokens, hidden) matrix of real
  tokens; only the attention product sees a padded (batch, heads, seq, head_dim) view, and with sorted batches its
  padding is a few percent. Pooling reads the packed matrix directly (a segment sum), nothing is unpacked at the end.
- Q, K and V weights are fused once into one matrix instead of being concatenated on every call.
- `torch.inference_mode`, optional int8 dynamic quantization of the linear layers (CPU), bfloat16 weights (GPU, or a
  CPU with native bf16 GEMMs), optional `torch.compile`.
In float32 the result equals the plain padded forward of BertModel + masked mean within 1e-5.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import ConfigError
from bertkit.inference.embed import POOLINGS, folder_defaults
from bertkit.inference.loading import base_model, load_model, load_tokenizer
from bertkit.model import BertModel, BertPreTrainedModel

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "int8")


# ----------------------------------------------------------------------------------------------------------------
# Packed batches.
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class PackedBatch:
    """Real tokens of several sequences, concatenated: what the fast encoder consumes."""

    input_ids: Tensor  # (tokens,)
    token_type_ids: Tensor  # (tokens,)
    positions: Tensor  # (tokens,) position of each token in its own sequence
    lengths: Tensor  # (batch,)
    pad_index: Tensor  # (tokens,) where each token sits in the flattened (batch * max_len) padded layout
    max_len: int

    @classmethod
    def from_ids(cls, ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]] | None = None,
                 device: str | torch.device = "cpu") -> "PackedBatch":
        """Pack a list of token-id lists (each one sequence)."""
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
        max_len = int(lengths.max())
        flat = torch.tensor([t for x in ids for t in x], dtype=torch.long)
        types = torch.zeros_like(flat) if type_ids is None else torch.tensor([t for x in type_ids for t in x])
        starts = torch.cumsum(lengths, 0) - lengths  # (batch,)
        seq_of_token = torch.repeat_interleave(torch.arange(len(ids)), lengths)  # (tokens,)
        positions = torch.arange(len(flat)) - starts[seq_of_token]
        pad_index = seq_of_token * max_len + positions
        return cls(flat.to(device), types.to(device), positions.to(device), lengths.to(device),
                   pad_index.to(device), max_len)

    @property
    def batch(self) -> int:
        return int(self.lengths.shape[0])

    def key_mask(self) -> Tensor | None:
        """(batch, 1, 1, max_len) True at real keys, or None when every sequence has the full length."""
        if bool((self.lengths == self.max_len).all()):
            return None
        arange = torch.arange(self.max_len, device=self.lengths.device)
        return (arange[None, :] < self.lengths[:, None])[:, None, None, :]

    def segment_ids(self) -> Tensor:
        """(tokens,) index of the sequence each token belongs to."""
        return torch.div(self.pad_index, self.max_len, rounding_mode="floor")


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens_per_batch: int | None) -> list[list[int]]:
    """Indices sorted by length (longest first), cut into batches of at most `batch_size` sequences and at most
    `max_tokens_per_batch` padded tokens (longest length x count), so every batch is nearly padding-free."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        too_many = len(current) >= batch_size
        too_long = max_tokens_per_batch is not None and longest * (len(current) + 1) > max_tokens_per_batch
        if current and (too_many or too_long):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


# ----------------------------------------------------------------------------------------------------------------
# The inference-only encoder over a BertModel's weights.
# ----------------------------------------------------------------------------------------------------------------


class _FastLayer(nn.Module):
    """One encoder layer rebuilt for inference: a fused QKV linear, the layer's own LayerNorms and feed-forward
    (shared, not copied: the QKV matrix is a snapshot of the weights at construction)."""

    def __init__(self, layer: nn.Module, num_heads: int) -> None:
        super().__init__()
        sa = layer.attention.self
        hidden = sa.query.in_features
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        with torch.no_grad():
            self.qkv.weight.copy_(torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]))
            self.qkv.bias.copy_(torch.cat([sa.query.bias, sa.key.bias, sa.value.bias]))
        self.attn_out = layer.attention.output.dense
        self.attn_norm = layer.attention.output.LayerNorm
        self.ffn_in = layer.intermediate.dense
        self.act = layer.intermediate.act
        self.ffn_out = layer.output.dense
        self.ffn_norm = layer.output.LayerNorm

    def forward(self, x: Tensor, batch: PackedBatch, key_mask: Tensor | None) -> Tensor:
        # x: (tokens, hidden)
        tokens, hidden = x.shape
        qkv = self.qkv(x)  # (tokens, 3 * hidden)
        if key_mask is None and tokens == batch.batch * batch.max_len:
            padded = qkv
        else:
            padded = qkv.new_zeros(batch.batch * batch.max_len, 3 * hidden).index_copy_(0, batch.pad_index, qkv)
        q, k, v = padded.view(batch.batch, batch.max_len, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # (batch, heads, seq, head_dim)
        context = context.transpose(1, 2).reshape(batch.batch * batch.max_len, hidden)
        if padded is not qkv:
            context = context.index_select(0, batch.pad_index)  # (tokens, hidden)
        x = self.attn_norm(self.attn_out(context) + x)
        return self.ffn_norm(self.ffn_out(self.act(self.ffn_in(x))) + x)


class FastBert(nn.Module):
    """BertModel's encoder for inference on packed batches: returns the last layer's (tokens, hidden) states."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        emb = bert.embeddings
        self.word_embeddings = emb.word_embeddings
        self.position_embeddings = emb.position_embeddings
        self.token_type_embeddings = emb.token_type_embeddings
        self.embed_norm = emb.LayerNorm
        heads = bert.config.num_attention_heads
        self.layers = nn.ModuleList(_FastLayer(layer, heads) for layer in bert.encoder.layer)
        self.eval()

    def forward(self, batch: PackedBatch) -> Tensor:
        # Same sum order as BertEmbeddings so float32 results match it bit for bit.
        x = self.word_embeddings(batch.input_ids) + self.token_type_embeddings(batch.token_type_ids)
        x = self.embed_norm(x + self.position_embeddings(batch.positions))  # (tokens, hidden)
        key_mask = batch.key_mask()
        for layer in self.layers:
            x = layer(x, batch, key_mask)
        return x


def pool(hidden: Tensor, batch: PackedBatch, pooling: str) -> Tensor:
    """(tokens, hidden) packed states -> (batch, hidden): mean over each sequence's tokens, or its [CLS] state."""
    hidden = hidden.float()
    if pooling == "cls":
        starts = torch.cumsum(batch.lengths, 0) - batch.lengths
        return hidden.index_select(0, starts)
    sums = hidden.new_zeros(batch.batch, hidden.shape[1]).index_add_(0, batch.segment_ids(), hidden)
    return sums / batch.lengths[:, None].to(hidden.dtype)


# ----------------------------------------------------------------------------------------------------------------
# The user-facing encoder.
# ----------------------------------------------------------------------------------------------------------------


class Encoder:
    """Turn texts into sentence embeddings quickly: `Encoder(folder).encode(texts)` -> (n, hidden) float32 tensor.

    precision: "fp32" (exact), "bf16" (bfloat16 weights and activations; fast on GPUs and on CPUs with native bf16
    matrix units), "int8" (dynamic int8 quantization of every linear layer; CPU only).
    """

    def __init__(
        self,
        model: str | Path | BertPreTrainedModel,
        tokenizer: Any = None,
        *,
        precision: str = "fp32",
        device: str | torch.device | None = None,
        compile: bool = False,
        max_seq_length: int | None = None,
    ) -> None:
        folder = None
        if isinstance(model, (str, Path)):
            folder = Path(model)
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(folder)
            model = load_model(folder)
        if tokenizer is None:
            raise ConfigError("Encoder needs a tokenizer when given a model object (or pass a model folder)")
        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        bert = base_model(model)
        self.config = bert.config
        self.tokenizer = tokenizer
        self.precision = precision
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        defaults = folder_defaults(folder) if folder is not None else {}
        self.default_pooling: str = defaults.get("pooling", "mean")
        self.default_normalize: bool = defaults.get("normalize", False)
        self.max_seq_length = max_seq_length or defaults.get("max_length") or self.config.max_position_embeddings
        if self.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length {self.max_seq_length} exceeds the model's max_position_embeddings "
                              f"({self.config.max_position_embeddings})")
        fast = FastBert(bert)
        if precision == "int8":
            if self.device.type != "cpu":
                raise ConfigError("precision 'int8' (dynamic quantization) runs on CPU only")
            fast = _quantize_dynamic(fast)
        elif precision == "bf16":
            fast = copy.deepcopy(fast).to(torch.bfloat16)  # the model's own modules stay float32
        self.fast = fast.to(self.device)
        self._forward = torch.compile(self.fast, dynamic=True) if compile else self.fast

    # --- tokenization ----------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], cut to max_seq_length (a warning counts the texts cut)."""
        ids = []
        cut = 0
        limit = self.max_seq_length
        for text in texts:
            if not isinstance(text, str):
                raise ConfigError(f"texts must be strings, got {type(text).__name__}")
            enc = self.tokenizer.encode(text, max_length=limit, truncation=True, return_overflowing=True)
            cut += bool(getattr(enc, "overflowing", None))
            ids.append(list(enc.input_ids))
        if cut:
            warnings.warn(f"{cut} of {len(texts)} texts were longer than {limit} tokens and were truncated",
                          stacklevel=3)
        return ids

    # --- encoding --------------------------------------------------------------------------------------------
    def encode(
        self,
        texts: Sequence[str] | str,
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 128,
        max_tokens_per_batch: int | None = 8192,
    ) -> Tensor:
        """Embed texts, returned in the input order as a (n, hidden) float32 CPU tensor.

        pooling/normalize default to the folder's sentence-transformers settings, else mean and no normalisation.
        """
        if isinstance(texts, str):
            texts = [texts]
        return self.encode_ids(self.tokenize(texts), pooling, normalize, batch_size, max_tokens_per_batch)

    def encode_ids(
        self,
        ids: Sequence[Sequence[int]],
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 128,
        max_tokens_per_batch: int | None = 8192,
    ) -> Tensor:
        """Embed already tokenized sequences (each with [CLS]/[SEP]); same order as the input."""
        pooling = pooling or self.default_pooling
        normalize = self.default_normalize if normalize is None else normalize
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        out = torch.empty(len(ids), self.config.hidden_size)
        if not ids:
            return out
        with torch.inference_mode():
            for idx in plan_batches([len(x) for x in ids], batch_size, max_tokens_per_batch):
                batch = PackedBatch.from_ids([ids[i] for i in idx], device=self.device)
                vectors = pool(self._forward(batch), batch, pooling)
                out[torch.tensor(idx)] = vectors.cpu()
        return F.normalize(out, dim=-1) if normalize else out

    def __call__(self, texts: Sequence[str], **kwargs: Any) -> Tensor:
        return self.encode(texts, **kwargs)


def _quantize_dynamic(module: FastBert) -> nn.Module:
    """A copy with int8 per-channel weights and per-batch int8 activations (fbgemm) in the linear layers.

    The feed-forward output projection stays float32: its GELU input has outliers that per-tensor activation
    scales flatten (MiniLM on WikiText: min cosine to float32 0.958 with it quantized, 0.981 without).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its move to torchao
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        names = {name for name, m in module.named_modules() if isinstance(m, nn.Linear) and
                 not name.endswith("ffn_out")}
        return quantize_dynamic(module, {name: per_channel_dynamic_qconfig for name in names}, dtype=torch.qint8)


__all__ = ["Encoder", "FastBert", "PackedBatch", "plan_batches", "pool", "POOLINGS",
           "PRECISIONS"]
