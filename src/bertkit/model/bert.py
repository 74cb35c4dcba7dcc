"""BERT, top to bottom: embeddings, self-attention, feed-forward, encoder, pooler. The task heads on top of it are in
`bertkit.model.heads`.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding".
Submodule names are the published ones (`embeddings.word_embeddings`, `encoder.layer.{i}.attention.self.query`,
`cls.predictions.transform.dense`, ...) so the world's BERT checkpoints load by name.

The encoder runs on the real tokens only (`Packing`), uses a cheaper dropout mask on CPU (`Dropout`) and a GELU whose
CPU kernels stay few (`GELU`); all live in `bertkit.model.kernels` and are exact where it matters (float32 outputs
at every real token). How a forward computes (on the real tokens or every position; the MLM heads' levers) is an
`Execution` plan (`bertkit.model.execution`) given at construction or to one forward call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.model.config import BertConfig
from bertkit.model.execution import Execution
from bertkit.model.kernels import GELU, Dropout, Packing, gather_places, keep_mask


@dataclass
class BertModelOutput:
    last_hidden_state: Tensor  # (batch, seq, hidden); zeros at padded positions
    pooler_output: Tensor | None  # (batch, hidden): tanh(W h_[CLS] + b)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer, each (batch, seq, hidden)
    attentions: tuple[Tensor, ...] | None = None  # each (batch, heads, seq, seq)


# ----------------------------------------------------------------------------------------------------------------
# The encoder.
# ----------------------------------------------------------------------------------------------------------------


def activation(name: str) -> nn.Module:
    """The feed-forward non-linearity: exact (erf) GELU as in the original code, its tanh approximation, or ReLU."""
    if name == "gelu":
        return GELU()
    if name == "gelu_tanh":
        return GELU(approximate="tanh")
    return nn.ReLU()


def fused_linear(x: Tensor, *layers: nn.Linear) -> Tensor:
    """Several linear layers on the same input in one matrix product, their outputs side by side."""
    return F.linear(x, torch.cat([m.weight for m in layers]), torch.cat([m.bias for m in layers]))


class BertEmbeddings(nn.Module):
    """Sum of word-piece, segment and learned absolute position embeddings, then LayerNorm and dropout.

    With a factorised embedding (config.embedding_size = E < hidden: ALBERT, ELECTRA-small), the three tables are E
    wide and one linear layer projects the normalised sum to the hidden size. Segments: BERT's A and B, one row
    added to every token whatever token_type_ids say (type_vocab_size 1: RoBERTa), or none (0: DistilBERT).
    Positions: 0, 1, 2, ..., or RoBERTa's, counted over the real tokens from pad_token_id + 1
    (config.padding_aware_positions)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        padding_idx = config.pad_token_id if config.padding_aware_positions else None  # as RoBERTa's table has it
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width, padding_idx=padding_idx)
        self.segments = config.type_vocab_size
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width) if self.segments else None
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        factorised = width != config.hidden_size
        self.projection = nn.Linear(width, config.hidden_size) if factorised else None
        self.pad_token_id = config.pad_token_id
        self.padding_aware = config.padding_aware_positions

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, packing: Packing | None = None) -> Tensor:
        """(batch, seq) ids -> (batch, seq, hidden); with `packing`, the real tokens' rows only, (tokens, hidden)."""
        positions = self.positions(input_ids)
        if packing is not None:
            positions = packing.pack(positions.expand_as(input_ids))
            input_ids, token_type_ids = packing.pack(input_ids), packing.pack(token_type_ids)
        x = self.word_embeddings(input_ids)
        if self.segments == 1:
            x = x + self.token_type_embeddings.weight[0]
        elif self.segments:
            x = x + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions)  # (batch, seq, E) or (tokens, E)
        x = self.dropout(self.LayerNorm(x))
        return x if self.projection is None else self.projection(x)  # (batch, seq, hidden) or (tokens, hidden)

    def positions(self, input_ids: Tensor) -> Tensor:
        """Position ids: (seq,) 0, 1, 2, ...; or RoBERTa's (batch, seq), fairseq's make_positions as transformers
        computes them: pad_token_id + the count of real tokens up to and including this one, pad_token_id at a pad
        token (from the ids, not the attention mask: a pad id inside the mask is a pad too)."""
        if not self.padding_aware:
            return torch.arange(input_ids.shape[1], device=input_ids.device)
        real = input_ids.ne(self.pad_token_id).int()
        return (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.pad_token_id


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017) over the non-padded keys: padded to the
    batch's width (`attend`), group by group of similar lengths (`Packing.groups`, on a CPU), or with queries at some
    places only (`attend_at`, the sparse last layer); the product itself through SDPA, or written out where
    attention probabilities or CPU dropout are wanted (`scaled_attention`)."""

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
        """(tokens, hidden) -> (tokens, 3 * hidden): Q, K and V in one matrix product."""
        return fused_linear(x, self.query, self.key, self.value)

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        # x: packed (tokens, hidden)
        qkv = self.project_qkv(x)  # (tokens, 3 * hidden)
        if packing.groups is None or output_attentions:
            context, probs = self.attend(packing.unpack(qkv), packing.key_mask, output_attentions)
            return packing.pack(context), probs
        parts = [self.attend(grid.view(g.size, g.width, -1), g.key_mask)[0].reshape(g.size * g.width, -1)
                 for g, grid in zip(packing.groups, packing.to_groups(qkv))]
        return packing.from_groups(parts), None

    def attend(self, qkv: Tensor, key_mask: Tensor | None, output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        """(batch, seq, 3 * hidden) -> the attention output (batch, seq, hidden), and the probabilities if asked."""
        batch, seq_len = qkv.shape[:2]
        qkv = qkv.view(batch, seq_len, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (batch, heads, seq, head_dim)
        mask = key_mask if self.alibi_slopes is None else self.alibi_bias(seq_len, key_mask, q.dtype)
        context, probs = self.scaled_attention(q, k, v, mask, output_attentions)
        return context.transpose(1, 2).reshape(batch, seq_len, -1), probs  # (batch, seq, hidden)

    def attend_at(self, x: Tensor, queries: Tensor, packing: Packing, places: Tensor) -> Tensor:
        """The attention output at `places` (batch, n) only, (batch, n, hidden): keys and values from every real
        token of packed x (tokens, hidden), queries from `queries` (batch, n, hidden), x's rows at those places."""
        batch, n = places.shape
        kv = packing.unpack(fused_linear(x, self.key, self.value))  # (batch, seq, 2 * hidden)
        seq_len = kv.shape[1]
        k, v = kv.view(batch, seq_len, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q = self.query(queries).view(batch, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, heads, n, d)
        mask = packing.key_mask
        if self.alibi_slopes is not None:
            mask = self.alibi_bias(seq_len, mask, q.dtype, places)
        context, _ = self.scaled_attention(q, k, v, mask)
        return context.transpose(1, 2).reshape(batch, n, -1)

    def scaled_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                         output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        """softmax(q k^T / sqrt(d) + mask) v, with attention dropout in training: q (batch, heads, n, head_dim)
        against k and v (batch, heads, seq, head_dim) -> (batch, heads, n, head_dim), and the probabilities
        (batch, heads, n, seq) if asked. `mask`: boolean (keys to attend) or additive, broadcast to the scores."""
        dropout_p = self.dropout_p if self.training else 0.0
        if output_attentions or (dropout_p > 0 and q.device.type == "cpu"):
            # Written out (torch's CPU attention kernels have no dropout and would fall back to this anyway): the
            # scale and the mask ride on the scores' matrix product (baddbmm), and dropout's 1 / (1 - p) on the
            # output, (n, head_dim) per head instead of (n, seq).
            batch, heads, n, head_dim = q.shape
            seq = k.shape[2]
            if mask is None:
                bias = q.new_zeros(())
            else:
                if mask.dtype == torch.bool:
                    mask = q.new_zeros(mask.shape).masked_fill_(~mask, torch.finfo(q.dtype).min)
                bias = mask.expand(batch, heads, -1, seq).reshape(batch * heads, -1, seq)
            scores = torch.baddbmm(bias, q.reshape(-1, n, head_dim), k.reshape(-1, seq, head_dim).mT,
                                   alpha=1 / math.sqrt(head_dim))  # (batch * heads, n, seq)
            probs = scores.softmax(-1)
            if dropout_p > 0:
                keep, scale = keep_mask(probs.shape, dropout_p, probs.dtype)
                context = torch.bmm(probs * keep, v.reshape(-1, seq, head_dim)).mul_(scale)
            else:
                context = torch.bmm(probs, v.reshape(-1, seq, head_dim))
            probs = probs.view(batch, heads, n, seq)
            return context.view(batch, heads, n, head_dim), probs if output_attentions else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None

    def alibi_bias(self, seq_len: int, key_mask: Tensor | None, dtype: torch.dtype,
                   places: Tensor | None = None) -> Tensor:
        """Additive scores -m_h * |i - j| for queries i (every position, or `places` (batch, n)) and keys j:
        (1 or batch, heads, seq or n, seq); masked keys get the dtype's minimum."""
        pos = torch.arange(seq_len, device=self.alibi_slopes.device)
        queries = pos[None, :] if places is None else places  # (1 or batch, n)
        distance = (pos[None, None, :] - queries[:, :, None]).abs().to(dtype)  # (1 or batch, n, seq)
        bias = -self.alibi_slopes.to(dtype)[None, :, None, None] * distance[:, None]  # (1 or batch, heads, n, seq)
        if key_mask is None:
            return bias
        return bias.masked_fill(~key_mask, torch.finfo(dtype).min)  # key_mask (batch, 1, 1, seq)


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
        out = self.dropout.add_to(self.dense(x), residual)  # residual + dropout(dense(x))
        return out if self.pre_ln else self.LayerNorm(out)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False,
                places: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Packed (tokens, hidden) -> packed; with `places` (batch, n), the outputs there only: (batch, n, hidden)."""
        if places is not None:  # queries from the places' rows (a pre-LN LayerNorm is per token, so it may run there)
            at = gather_places(packing.unpack(x), places)  # (batch, n, hidden)
            normalize = self.output.normalize_input
            return self.output(self.self.attend_at(normalize(x), normalize(at), packing, places), at), None
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

    def forward(self, x: Tensor, packing: Packing, output_attentions: bool = False,
                places: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Packed (tokens, hidden) -> packed; with `places` (batch, n), the outputs there only: (batch, n, hidden)
        (every token is still a key and value of the attention)."""
        x, probs = self.attention(x, packing, output_attentions, places)
        return self.output(self.intermediate(self.output.normalize_input(x)), x), probs


class BertEncoder(nn.Module):
    """The stack of layers; a pre-LN stack ends with one more LayerNorm (its residual stream is unnormalised)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        # ALBERT's cross-layer sharing keeps one layer and applies it num_hidden_layers times
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(1 if config.share_layers else
                                                                     config.num_hidden_layers))
        self.depth = config.num_hidden_layers
        self.shared = config.share_layers
        pre_ln = config.layer_norm_position == "pre"
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if pre_ln else None
        self.gradient_checkpointing = False

    def forward(self, x: Tensor, packing: Packing, output_hidden_states: bool = False, output_attentions: bool = False,
                places: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]:
        """Packed (tokens, hidden) -> packed, with every layer's states and attentions if asked. With `places`
        (batch, n), the last layer runs its queries, feed-forward block and LayerNorms at those places only and the
        output is (batch, n, hidden) (`BertModel.forward`'s output_at)."""
        hidden_states = [packing.unpack(x)] if output_hidden_states else None
        attentions = [] if output_attentions else None
        layers = [self.layer[0]] * self.depth if self.shared else list(self.layer)
        for i, layer in enumerate(layers):
            at = places if i == len(layers) - 1 else None
            if self.gradient_checkpointing and self.training:
                x, probs = torch.utils.checkpoint.checkpoint(layer, x, packing, output_attentions, at,
                                                             use_reentrant=False)
            else:
                x, probs = layer(x, packing, output_attentions, at)
            if hidden_states is not None:
                hidden_states.append(packing.unpack(x))
            if attentions is not None:
                attentions.append(probs)
        if self.LayerNorm is not None:
            x = self.LayerNorm(x)
            if hidden_states is not None:
                hidden_states[-1] = packing.unpack(x)  # the last entry is always last_hidden_state
        return (x, tuple(hidden_states) if hidden_states is not None else None,
                tuple(attentions) if attentions is not None else None)


POOLER_ACTIVATIONS = {"tanh": nn.Tanh, "gelu": GELU, "relu": nn.ReLU}


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation that NSP and classification heads read.
    With config.pooling = 'mean', the mean of the real tokens' vectors takes h_[CLS]'s place; config.pooler_act
    puts GELU (ELECTRA's classification head) or ReLU (DistilBERT's pre_classifier) in tanh's."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = POOLER_ACTIVATIONS[config.pooler_act]()
        self.mean = config.pooling == "mean"

    def forward(self, last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
        if self.mean:  # padded positions hold zeros (Packing), so the sum runs over the real tokens only
            count = attention_mask.sum(1, keepdim=True).clamp(min=1).to(last_hidden_state.dtype)
            return self.activation(self.dense(last_hidden_state.sum(1) / count))
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
        elif getattr(module, "zero_bias_at_init", False):  # a head's free-standing output bias (the MLM decoder's)
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

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, execution: Execution = Execution()) -> None:
        super().__init__()
        self.config = config
        self.execution = execution  # the plan of a forward that is given none (it reads `unpadded`)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False, output_at: Tensor | None = None,
                execution: Execution | None = None) -> BertModelOutput:
        """`output_at` (batch, n): distinct positions per sequence where the caller reads last_hidden_state (the
        pre-training heads' masked positions and [CLS], `sparse_last_layer`). The last layer then computes its
        outputs there only, the same as everywhere else at those places; last_hidden_state is zero elsewhere.
        `execution`: this call's plan (default: the one given at construction)."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.max_sequence_length:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds the {self.config.max_sequence_length} positions the "
                f"model has (max_position_embeddings {self.config.max_position_embeddings}"
                f"{', less pad_token_id + 1' if self.config.padding_aware_positions else ''}); truncate the input"
            )
        if output_at is not None and (output_hidden_states or output_attentions):
            raise ValueError("output_at computes the last layer at some positions only; hidden states and "
                             "attentions need every position")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        unpadded = (execution or self.execution).unpadded
        # ONNX export traces one graph for every padding: no data-dependent shapes there, same outputs (Packing)
        packing = Packing(attention_mask, padded=torch.onnx.is_in_onnx_export() or not unpadded)
        x = self.embeddings(input_ids, token_type_ids, packing)  # (tokens, hidden)
        x, hidden_states, attentions = self.encoder(x, packing, output_hidden_states, output_attentions, output_at)
        if output_at is None:
            last_hidden_state = packing.unpack(x)  # (batch, seq, hidden)
        else:  # x: (batch, n, hidden) at the places; a place past a sequence's end is padding (zero)
            x = x * gather_places(attention_mask, output_at)[..., None].to(x.dtype)
            index = output_at[..., None].expand(-1, -1, x.shape[-1])
            last_hidden_state = x.new_zeros(*input_ids.shape, x.shape[-1]).scatter(1, index, x)
        pooled = self.pooler(last_hidden_state, attention_mask) if self.pooler is not None else None
        return BertModelOutput(last_hidden_state, pooled, hidden_states, attentions)
