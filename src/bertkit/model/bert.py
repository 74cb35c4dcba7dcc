"""BERT, top to bottom: embeddings, self-attention, feed-forward, encoder, pooler, then every task head.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding".
Submodule names are the published ones (`embeddings.word_embeddings`, `encoder.layer.{i}.attention.self.query`,
`cls.predictions.transform.dense`, ...) so the world's BERT checkpoints load by name.

Three speed choices; the first two are exact in float32 at every real token:
- No work on padding. When a batch has padding, the encoder packs the real tokens into one (tokens, hidden) matrix,
  runs every linear layer, LayerNorm and GELU on that, and pads back only around the attention product, on CPU
  group by group of similar lengths (`Packing`). Hidden states at padded positions are returned as zeros (they
  carry no meaning in any BERT).
- The masked-LM decoder (hidden x 30k vocabulary, the largest matrix product in pre-training) runs only at the
  masked positions when labels are given.
- Dropout draws 16 random bits per element instead of one random float (see `dropout`): on a CPU, torch's
  per-element random numbers cost more than the attention arithmetic they mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.data.dataset import IGNORE_INDEX
from bertkit.model.config import BertConfig


# ----------------------------------------------------------------------------------------------------------------
# Outputs: one dataclass per kind of head.
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class BertModelOutput:
    last_hidden_state: Tensor  # (batch, seq, hidden); zeros at padded positions
    pooler_output: Tensor | None  # (batch, hidden): tanh(W h_[CLS] + b)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer, each (batch, seq, hidden)
    attentions: tuple[Tensor, ...] | None = None  # each (batch, heads, seq, seq)


@dataclass
class BertForPreTrainingOutput:
    loss: Tensor | None  # MLM + NSP
    prediction_logits: Tensor  # (batch, seq, vocab); with labels: (num_masked, vocab) at the masked positions only
    seq_relationship_logits: Tensor  # (batch, 2); 0 = IsNext, 1 = NotNext
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput:
    loss: Tensor | None
    logits: Tensor  # (batch, seq, vocab); with labels: (num_masked, vocab)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class ClassifierOutput:
    """Sequence classification, NSP, token classification and multiple choice all return logits and a loss."""

    loss: Tensor | None
    logits: Tensor  # (batch, labels) | (batch, seq, labels) | (batch, choices)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    loss: Tensor | None  # mean of the start and end cross-entropies
    start_logits: Tensor  # (batch, seq)
    end_logits: Tensor  # (batch, seq)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


# ----------------------------------------------------------------------------------------------------------------
# The encoder.
# ----------------------------------------------------------------------------------------------------------------


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout: zero each element with probability p, scale the survivors by 1 / (1 - p).

    On CPU the mask costs one 64-bit random draw per four elements: each element gets 16 uniform random bits and
    is dropped when they fall below p * 2**16, so p is rounded to a multiple of 2**-16 (0.1 -> 0.100006) and the
    survivors are scaled by the rounded 1 / (1 - p): the expectation stays exact. Other devices use torch's own.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    drop = round(p * 65536)  # dropped bit patterns out of 2**16
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # uniform 64-bit words
    bits = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform over [-32768, 32767]
    keep = (bits >= drop - 32768).to(x.dtype).mul_(65536 / (65536 - drop))
    return x * keep


class Dropout(nn.Module):
    """nn.Dropout with bertkit's cheaper CPU mask (`dropout`)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def activation(name: str) -> nn.Module:
    """The feed-forward non-linearity: exact (erf) GELU as in the original code, its tanh approximation, or ReLU."""
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    return nn.ReLU()


class BertEmbeddings(nn.Module):
    """Sum of word-piece, segment and learned absolute position embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        seq_len = input_ids.shape[1]
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions)  # (batch, seq, hidden)
        return self.dropout(self.LayerNorm(x))


@dataclass
class AttentionGroup:
    """Sequences of similar length that attend together, padded only to their own longest (see Packing)."""

    size: int  # sequences in the group
    width: int  # their longest length
    gather: Tensor  # (size * width,) rows of the packed tokens, with the extra zero row at padded slots
    real: Tensor  # (tokens in the group,) positions of the real tokens in the (size * width) grid, in packed order
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
        zero_row = int(sorted_lengths.sum())  # the extra row attention reads at padded slots
        self.groups = []
        bounds = torch.unique_consecutive(rounded[order], return_counts=True)[1].tolist()
        first = 0
        for size in bounds:
            lens, begin = sorted_lengths[first : first + size], starts[first : first + size]
            width = int(lens[-1])
            slots = torch.arange(width)
            valid = slots[None, :] < lens[:, None]  # (size, width)
            gather = torch.where(valid, begin[:, None] + slots[None, :], zero_row).reshape(-1)
            real = valid.reshape(-1).nonzero().squeeze(1)
            key_mask = None if bool(valid.all()) else valid[:, None, None, :]
            self.groups.append(AttentionGroup(size, width, gather, real, key_mask))
            first += size

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


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017) over the non-padded keys."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        # ALiBi slopes m_h = 2**(-8h/A), h = 1..A (Press et al. 2022); a buffer, so it follows .to(device)
        slopes = 2.0 ** (-8.0 * torch.arange(1, self.num_heads + 1) / self.num_heads) if config.alibi else None
        self.register_buffer("alibi_slopes", slopes, persistent=False)

    def project_qkv(self, x: Tensor) -> Tensor:
        """(tokens, hidden) -> (tokens, 3 * hidden): Q, K and V in one matrix product.

        An int8-quantized inference copy (bertkit.inference.encoder) has no float weights to concatenate and runs
        its three quantized products instead.
        """
        if isinstance(self.query, nn.Linear):
            w = torch.cat([self.query.weight, self.key.weight, self.value.weight])
            b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
            return F.linear(x, w, b)
        return torch.cat([self.query(x), self.key(x), self.value(x)], dim=-1)

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        # x: packed (tokens, hidden)
        qkv = self.project_qkv(x)  # (tokens, 3 * hidden)
        if packing.groups is None or output_attentions:
            context, probs = self.attend(packing.unpack(qkv), packing.key_mask, output_attentions)
            return packing.pack(context), probs
        qkv = F.pad(qkv, (0, 0, 0, 1))  # + one zero row, read at every padded slot
        parts = []
        for g in packing.groups:
            context, _ = self.attend(qkv.index_select(0, g.gather).view(g.size, g.width, -1), g.key_mask)
            parts.append(context.reshape(g.size * g.width, -1).index_select(0, g.real))
        return torch.cat(parts), None

    def attend(self, qkv: Tensor, key_mask: Tensor | None, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        """(batch, seq, 3 * hidden) -> the attention output (batch, seq, hidden), and the probabilities if asked."""
        batch, seq_len = qkv.shape[:2]
        qkv = qkv.view(batch, seq_len, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (batch, heads, seq, head_dim)
        dropout_p = self.dropout_p if self.training else 0.0
        mask = key_mask if self.alibi_slopes is None else self.alibi_bias(seq_len, key_mask, q.dtype)
        if output_attentions or (dropout_p > 0 and qkv.device.type == "cpu"):
            # Written out (torch's CPU attention kernels have no dropout and would fall back to this anyway).
            scores = (q / math.sqrt(self.head_dim)) @ k.transpose(-1, -2)  # (batch, heads, seq, seq)
            if mask is not None and mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            elif mask is not None:
                scores = scores + mask
            probs = scores.softmax(-1)
            context = dropout(probs, dropout_p) @ v
            probs = probs if output_attentions else None
        else:
            probs = None
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return context.transpose(1, 2).reshape(batch, seq_len, -1), probs  # (batch, seq, hidden)

    def alibi_bias(self, seq_len: int, key_mask: Tensor | None, dtype: torch.dtype) -> Tensor:
        """Additive scores -m_h * |i - j|, (1 or batch, heads, seq, seq); masked keys get the dtype's minimum."""
        pos = torch.arange(seq_len, device=self.alibi_slopes.device)
        distance = (pos[None, :] - pos[:, None]).abs().to(dtype)  # (seq, seq)
        bias = -self.alibi_slopes.to(dtype)[:, None, None] * distance  # (heads, seq, seq)
        if key_mask is None:
            return bias[None]
        return bias[None].masked_fill(~key_mask, torch.finfo(dtype).min)  # key_mask (batch, 1, 1, seq)


class BertSelfOutput(nn.Module):
    """Projection of a sub-layer's output back to the hidden size, dropout, then the residual and the LayerNorm.

    Post-LN (the paper): LayerNorm(residual + dropout(dense(x))). Pre-LN (config.layer_norm_position = 'pre'):
    this LayerNorm normalises the sub-layer's input instead (`normalize_input`) and the output is
    residual + dropout(dense(x)), so the residual stream is never normalised inside the stack. The parameter keeps
    its published name either way. Used after attention (in = hidden) and, as BertOutput, after the feed-forward
    layer (in = intermediate).
    """

    def __init__(self, config: BertConfig, in_features: int | None = None) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features or config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.pre_ln = config.layer_norm_position == "pre"

    def normalize_input(self, x: Tensor) -> Tensor:
        """What the sub-layer reads: LayerNorm(x) in a pre-LN model, x itself in the paper's post-LN one."""
        return self.LayerNorm(x) if self.pre_ln else x

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        if self.pre_ln:
            return residual + self.dropout(self.dense(x))
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(self.output.normalize_input(x), packing, output_attentions)
        return self.output(context, x), probs


class BertIntermediate(nn.Module):
    """First half of the feed-forward block: hidden -> intermediate, then GELU."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class BertOutput(BertSelfOutput):
    """Second half of the feed-forward block: intermediate -> hidden, dropout, residual + LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, in_features=config.intermediate_size)


class BertLayer(nn.Module):
    """One Transformer encoder layer: self-attention sub-layer, then feed-forward sub-layer."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        x, probs = self.attention(x, packing, output_attentions)
        return self.output(self.intermediate(self.output.normalize_input(x)), x), probs


class BertEncoder(nn.Module):
    """The stack of layers; a pre-LN stack ends with one more LayerNorm (its residual stream is unnormalised)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        pre_ln = config.layer_norm_position == "pre"
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if pre_ln else None
        self.gradient_checkpointing = False

    def forward(
        self, x: Tensor, packing: Packing, output_hidden_states: bool = False, output_attentions: bool = False
    ) -> tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]:
        # x: packed (tokens, hidden)
        hidden_states = [packing.unpack(x)] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for layer in self.layer:
            if self.gradient_checkpointing and self.training:
                x, probs = torch.utils.checkpoint.checkpoint(layer, x, packing, output_attentions, use_reentrant=False)
            else:
                x, probs = layer(x, packing, output_attentions)
            if hidden_states is not None:
                hidden_states.append(packing.unpack(x))
            if attentions is not None:
                attentions.append(probs)
        if self.LayerNorm is not None:
            x = self.LayerNorm(x)
            if hidden_states is not None:
                hidden_states[-1] = packing.unpack(x)  # the last entry is always last_hidden_state
        return (
            x,
            tuple(hidden_states) if hidden_states is not None else None,
            tuple(attentions) if attentions is not None else None,
        )


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation that NSP and classification heads read."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, last_hidden_state: Tensor) -> Tensor:
        return self.activation(self.dense(last_hidden_state[:, 0]))


def set_activation_checkpointing(model: nn.Module, enabled: bool = True) -> int:
    """Switch activation checkpointing on or off in every BertEncoder inside `model`; returns how many it found."""
    encoders = [m for m in model.modules() if isinstance(m, BertEncoder)]
    for encoder in encoders:
        encoder.gradient_checkpointing = enabled
    return len(encoders)


class BertPreTrainedModel(nn.Module):
    """Shared by the base model and every head: weight initialisation and folder load/save."""

    config: BertConfig

    def _init_weights(self, module: nn.Module) -> None:
        """The reference initialisation: N(0, initializer_range) weights, zero biases, LayerNorm 1 and 0."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)

    def post_init(self) -> None:
        """Initialise every weight, then tie the MLM decoder to the word embeddings where there is one."""
        self.apply(self._init_weights)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Heads with an MLM decoder share its weight with the input word embeddings (as in the paper)."""

    @classmethod
    def from_pretrained(cls, folder: str, **kwargs):  # noqa: ANN206 (returns an instance of cls)
        """Load a bertkit or Hugging Face model folder (config.json + model.safetensors or pytorch_model.bin)."""
        from bertkit.model.checkpoint import load_pretrained

        return load_pretrained(cls, folder, **kwargs)

    def save_pretrained(self, folder: str) -> None:
        """Write config.json + model.safetensors atomically, in the layout transformers also reads."""
        from bertkit.model.checkpoint import save_pretrained

        save_pretrained(self, folder)

    def set_activation_checkpointing(self, enabled: bool = True) -> None:
        """Recompute every encoder layer in the backward pass instead of storing its activations (training only)."""
        set_activation_checkpointing(self, enabled)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied weights counted once)."""
        params = {id(p): p for n, p in self.named_parameters() if not (exclude_embeddings and "embeddings" in n)}
        return sum(p.numel() for p in params.values())


class BertModel(BertPreTrainedModel):
    """The bidirectional Transformer encoder: returns every token's representation and the pooled [CLS] vector."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.export_padded = False  # True: no data-dependent shapes (ONNX export); same outputs
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> BertModelOutput:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds max_position_embeddings "
                f"({self.config.max_position_embeddings}); truncate the input"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        packing = Packing(attention_mask, padded=self.export_padded)
        x = packing.pack(self.embeddings(input_ids, token_type_ids))  # (tokens, hidden)
        x, hidden_states, attentions = self.encoder(x, packing, output_hidden_states, output_attentions)
        last_hidden_state = packing.unpack(x)  # (batch, seq, hidden)
        pooled = self.pooler(last_hidden_state) if self.pooler is not None else None
        return BertModelOutput(last_hidden_state, pooled, hidden_states, attentions)


# ----------------------------------------------------------------------------------------------------------------
# Pre-training heads.
# ----------------------------------------------------------------------------------------------------------------


class BertPredictionHeadTransform(nn.Module):
    """Dense + GELU + LayerNorm applied to a token's representation before the vocabulary decoder."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Masked-LM output: transform, then a decoder tied to the word embeddings plus a per-token output bias."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self.transform(x), self.decoder.weight, self.bias)  # (..., vocab)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def masked_lm_logits(head: BertLMPredictionHead, sequence: Tensor, labels: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """MLM logits and loss. With labels, the decoder runs only where a label is set: (num_masked, vocab)."""
    if labels is None:
        return head(sequence), None
    selected = labels.reshape(-1) != IGNORE_INDEX
    logits = head(sequence.reshape(-1, sequence.shape[-1])[selected])
    return logits, F.cross_entropy(logits.float(), labels.reshape(-1)[selected])


class _MLMHeadMixin:
    """Ties the MLM decoder weight to the input word embeddings."""

    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight


class BertForPreTraining(_MLMHeadMixin, BertPreTrainedModel):
    """BERT's pre-training model: masked LM over the tokens plus next-sentence prediction on [CLS]; loss = sum."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> BertForPreTrainingOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        prediction_logits, mlm_loss = masked_lm_logits(self.cls.predictions, out.last_hidden_state, labels)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (batch, 2)
        nsp_loss = None if next_sentence_label is None else F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]  # masked LM alone without NSP labels (RoBERTa)
        loss = losses[0] + losses[1] if len(losses) == 2 else losses[0] if losses else None
        return BertForPreTrainingOutput(loss, prediction_logits, nsp_logits, mlm_loss, nsp_loss,
                                        out.hidden_states, out.attentions)


class BertForMaskedLM(_MLMHeadMixin, BertPreTrainedModel):
    """Masked LM alone (fill-mask); no pooler, as in the reference."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> MaskedLMOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits, loss = masked_lm_logits(self.cls.predictions, out.last_hidden_state, labels)
        return MaskedLMOutput(loss, logits, out.hidden_states, out.attentions)


class BertForNextSentencePrediction(BertPreTrainedModel):
    """Next-sentence prediction alone: is segment B the continuation of A? (0 = IsNext, 1 = NotNext)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.cls.seq_relationship(out.pooler_output)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.view(-1))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


# ----------------------------------------------------------------------------------------------------------------
# Fine-tuning heads: one output layer each on top of BertModel (paper, section 4).
# ----------------------------------------------------------------------------------------------------------------


def _classifier_dropout(config: BertConfig) -> Dropout:
    p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return Dropout(p)


def sequence_classification_loss(logits: Tensor, labels: Tensor, config: BertConfig) -> Tensor:
    """Regression (one output) -> MSE; multi-label (float targets) -> BCE; otherwise cross-entropy."""
    problem = config.problem_type
    if problem is None:
        if config.num_labels == 1:
            problem = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem = "single_label_classification"
        else:
            problem = "multi_label_classification"
    if problem == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1)) if config.num_labels == 1 \
            else F.mse_loss(logits.float(), labels.float())
    if problem == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
    return F.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1))


class _LinearHeadModel(BertPreTrainedModel):
    """BertModel, dropout and one linear layer: the shape shared by the sequence, token and choice classifiers."""

    reads_pooled_output: bool = True  # the pooled [CLS] vector (sentence-level) or every token (tagging)

    def __init__(self, config: BertConfig, out_features: int) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.reads_pooled_output)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, out_features)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        features = out.pooler_output if self.reads_pooled_output else out.last_hidden_state
        logits = self.classifier(self.dropout(features))
        loss = None if labels is None else self.loss(logits, labels)
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


class BertForSequenceClassification(_LinearHeadModel):
    """Single sentences or pairs (GLUE): a linear layer on the pooled [CLS] vector; logits (batch, labels)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.num_labels)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return sequence_classification_loss(logits, labels, self.config)


class BertForTokenClassification(_LinearHeadModel):
    """Tagging (NER): a linear layer on every token; no pooler, as in the reference; logits (batch, seq, labels)."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.num_labels)


class BertForMultipleChoice(_LinearHeadModel):
    """Multiple choice (SWAG): each (context, choice) pair scored from its pooled [CLS]; softmax over choices."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, 1)

    def forward(
        self,
        input_ids: Tensor,  # (batch, choices, seq)
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ClassifierOutput:
        num_choices = input_ids.shape[1]

        def flat(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.reshape(-1, t.shape[-1])  # (batch * choices, seq)

        out = super().forward(flat(input_ids), flat(attention_mask), flat(token_type_ids), None,
                              output_hidden_states, output_attentions)
        logits = out.logits.view(-1, num_choices)  # (batch, choices)
        loss = None if labels is None else self.loss(logits, labels)
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class BertForQuestionAnswering(BertPreTrainedModel):
    """Extractive QA (SQuAD): start and end logits for every token from one linear layer with two outputs."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> QuestionAnsweringOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        start_logits, end_logits = self.qa_outputs(out.last_hidden_state).unbind(-1)  # each (batch, seq)
        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the sequence are ignored, as in the reference.
            seq_len = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, seq_len)
            end = end_positions.view(-1).clamp(0, seq_len)
            loss = (F.cross_entropy(start_logits.float(), start, ignore_index=seq_len)
                    + F.cross_entropy(end_logits.float(), end, ignore_index=seq_len)) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


# Head classes by the name transformers gives them in config.json's "architectures".
MODEL_CLASSES: dict[str, type[BertPreTrainedModel]] = {
    cls.__name__: cls
    for cls in (
        BertModel,
        BertForPreTraining,
        BertForMaskedLM,
        BertForNextSentencePrediction,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertForQuestionAnswering,
        BertForMultipleChoice,
    )
}
