"""The task heads on top of BertModel: pre-training (masked LM + next sentence) and one output layer per fine-tuning
task (paper, section 4), with their outputs and the registry of head classes by name.

Every head shares one opening (`BertHeadModel`): its config, a `bert` BertModel (with or without the pooler) and the
reference initialisation; its forward runs the encoder, then its own layer and loss.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.data.dataset import IGNORE_INDEX
from bertkit.dataclass_io import Config, config_from_dict, spec
from bertkit.errors import ConfigError
from bertkit.model.bert import BertModel, BertPreTrainedModel, activation
from bertkit.model.config import BertConfig
from bertkit.model.kernels import Dropout, Packing, first_places, gather_places


# ----------------------------------------------------------------------------------------------------------------
# Outputs: one dataclass per kind of head.
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class BertForPreTrainingOutput:
    loss: Tensor | None  # MLM + NSP
    prediction_logits: Tensor  # (batch, seq, vocab); with labels and sparse_mlm: (num_masked, vocab) at those only,
    # or (batch * mlm_slots, vocab) in a training step with mlm_slots
    seq_relationship_logits: Tensor  # (batch, 2); 0 = IsNext, 1 = NotNext
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput:
    loss: Tensor | None
    logits: Tensor  # (batch, seq, vocab); with labels and sparse_mlm: (num_masked, vocab),
    # or (batch * mlm_slots, vocab) in a training step with mlm_slots
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
# Pre-training heads.
# ----------------------------------------------------------------------------------------------------------------


class BertPredictionHeadTransform(nn.Module):
    """Dense + GELU + LayerNorm applied to a token's representation before the vocabulary decoder (hidden -> the
    embedding width, which is hidden unless the embedding is factorised)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.transform_act_fn = activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Masked-LM output: transform, then a decoder tied to the word embeddings plus a per-token output bias."""

    zero_bias_at_init = True  # BertPreTrainedModel._init_weights starts `bias` at zero

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.embedding_width, config.vocab_size, bias=False)
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


def masked_lm_logits(head: BertLMPredictionHead, sequence: Tensor, labels: Tensor | None,
                     sparse: bool = True, slots: int = 0) -> tuple[Tensor, Tensor | None]:
    """MLM logits and loss. With labels and `sparse`, the transform and decoder run only where a label is set:
    logits (num_masked, vocab), the loss the same as the dense one (NVIDIA's BERT and MosaicBERT do the same).
    With `slots` as well, a fixed block of that many places per sequence, the masked positions first, so that every
    step has the same shapes (torch.compile, CUDA graphs): logits (batch * slots, vocab), the places past a
    sequence's masked positions ignored by the loss, which is still the dense one; more masked positions in a
    sequence than `slots` is an error (checked on the device, without waiting for it).
    Without labels, or not `sparse`, every position: (batch, seq, vocab), as transformers computes them."""
    if labels is None:
        return head(sequence), None
    if not sparse:
        logits = head(sequence)
        return logits, F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))
    if slots:
        masked = labels != IGNORE_INDEX  # (batch, seq)
        torch._assert_async(masked.sum(1).max() <= slots, "a sequence has more masked positions than mlm_slots")
        # the masked positions of each row first, in order (a stable sort of the flags), then the first `slots`
        places = first_places(masked, slots)
        logits = head(gather_places(sequence, places).reshape(-1, sequence.shape[-1]))
        return logits, F.cross_entropy(logits.float(), labels.gather(1, places).reshape(-1))
    selected = labels.reshape(-1) != IGNORE_INDEX
    logits = head(sequence.reshape(-1, sequence.shape[-1])[selected])
    return logits, F.cross_entropy(logits.float(), labels.reshape(-1)[selected])


class BertHeadModel(BertPreTrainedModel):
    """The opening every head shares: its config and a `bert` encoder, with the pooler when the head reads the
    pooled [CLS] vector. A subclass adds its layers in __init__ and then calls `post_init()`."""

    reads_pooled_output: bool = True  # the pooled [CLS] vector (sentence-level) or every token (tagging, MLM, QA)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.reads_pooled_output)


def base_model(model: BertPreTrainedModel) -> BertModel:
    """The BertModel inside a head (or the model itself)."""
    return model if isinstance(model, BertModel) else model.bert  # type: ignore[return-value]


class _MLMHeadMixin:
    """Ties the MLM decoder weight to the input word embeddings, and says where a step with labels reads the
    encoder (`set_execution`)."""

    sparse_mlm: bool = True  # with labels, MLM logits at the masked positions only (`masked_lm_logits`)
    mlm_slots: int = 0  # with sparse_mlm, in training mode: a fixed block of this many places per sequence
    sparse_last_layer: bool = True  # with sparse_mlm and labels, the last layer only where the heads read it
    reads_cls: bool = False  # the head reads the pooled [CLS] vector too (NSP)

    def _slots(self) -> int:
        """The fixed MLM block of a training step (0: the masked positions as they come); evaluation, whose
        callers read the logits at the masked positions, always takes those."""
        return self.mlm_slots if self.training else 0  # type: ignore[attr-defined]

    def _read_places(self, labels: Tensor | None, every_layer: bool) -> Tensor | None:
        """Where this forward reads the last layer, for BertModel's output_at: with labels, sparse MLM and
        `sparse_last_layer`, the masked positions and [CLS] when the head reads it (batch, n), n the most in a
        sequence or the fixed slots (+ 1); None (every position) otherwise, or when every layer's states or
        attentions are asked for (`every_layer`), or when the pooler averages every token."""
        config: BertConfig = self.config  # type: ignore[attr-defined]
        if labels is None or every_layer or not (self.sparse_mlm and self.sparse_last_layer):
            return None
        if self.reads_cls and config.pooling == "mean":
            return None
        wanted = labels != IGNORE_INDEX  # (batch, seq)
        if self.reads_cls:
            wanted = torch.cat([torch.ones_like(wanted[:, :1]), wanted[:, 1:]], 1)
        slots = self._slots()
        n = min(slots + self.reads_cls, labels.shape[1]) if slots else int(wanted.sum(1).max())
        return first_places(wanted, n) if n else None

    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight


def set_execution(model: nn.Module, sparse_mlm: bool | None = None, unpadded: bool | None = None,
                  attention: str | None = None, mlm_slots: int | None = None,
                  sparse_last_layer: bool | None = None) -> None:
    """Choose how every BERT inside `model` computes a training step; None leaves a setting as it is. None of them
    changes the weights, config.json or the loss (parity tests: tests/model/test_execution.py):

    - `sparse_mlm` (default True): the MLM transform and decoder only at the masked positions;
    - `mlm_slots` (default 0): with `sparse_mlm`, N > 0 takes a fixed N places per sequence in training steps
      (static shapes for torch.compile and CUDA graphs), N at least the data's max_predictions_per_seq;
    - `sparse_last_layer` (default True): with `sparse_mlm`, the last encoder layer computes its queries,
      feed-forward block and LayerNorms only where the heads read it (the masked positions and [CLS]); every token
      stays a key and value of its attention. Nothing else reads that layer's other outputs in a step with labels;
    - `unpadded` (default True): linear layers, LayerNorm and GELU on the real tokens only (`Packing`);
    - `attention` (for padded batches, with `unpadded`): "auto" (default; grouped by length on CPU), "padded",
      or "jagged" (PyTorch's variable-length attention on nested tensors; not with ALiBi).
    """
    if attention is not None and attention not in Packing.ATTENTION:
        raise ConfigError(f"attention = {attention!r}: expected one of {', '.join(Packing.ATTENTION)}")
    if mlm_slots is not None and mlm_slots < 0:
        raise ConfigError(f"mlm_slots = {mlm_slots}: expected 0 (the masked positions as they come) or a count > 0")
    for module in model.modules():
        if isinstance(module, _MLMHeadMixin):
            if sparse_mlm is not None:
                module.sparse_mlm = sparse_mlm
            if mlm_slots is not None:
                module.mlm_slots = mlm_slots
            if sparse_last_layer is not None:
                module.sparse_last_layer = sparse_last_layer
        if isinstance(module, BertModel):
            if attention == "jagged" and module.config.alibi:
                raise ConfigError("attention = 'jagged' has no attention bias, so it cannot run an ALiBi model "
                                  "(config alibi: true); use 'auto' or 'padded'")
            if unpadded is not None:
                module.unpadded = unpadded
            if attention is not None:
                module.attention_kernel = attention


class BertForPreTraining(_MLMHeadMixin, BertHeadModel):
    """BERT's pre-training model: masked LM over the tokens plus next-sentence prediction on [CLS]; loss = sum."""

    reads_cls = True

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
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
        places = self._read_places(labels, output_hidden_states or output_attentions)
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions, places)
        prediction_logits, mlm_loss = masked_lm_logits(self.cls.predictions, out.last_hidden_state, labels,
                                                       self.sparse_mlm, self._slots())
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (batch, 2)
        nsp_loss = None if next_sentence_label is None else F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]  # masked LM alone without NSP labels (RoBERTa)
        loss = losses[0] + losses[1] if len(losses) == 2 else losses[0] if losses else None
        return BertForPreTrainingOutput(loss, prediction_logits, nsp_logits, mlm_loss, nsp_loss,
                                        out.hidden_states, out.attentions)


class BertForMaskedLM(_MLMHeadMixin, BertHeadModel):
    """Masked LM alone (fill-mask); no pooler, as in the reference."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
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
        places = self._read_places(labels, output_hidden_states or output_attentions)
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions, places)
        logits, loss = masked_lm_logits(self.cls.predictions, out.last_hidden_state, labels, self.sparse_mlm,
                                        self._slots())
        return MaskedLMOutput(loss, logits, out.hidden_states, out.attentions)


class BertForNextSentencePrediction(BertHeadModel):
    """Next-sentence prediction alone: is segment B the continuation of A? (0 = IsNext, 1 = NotNext)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
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


class TabularFeatures(nn.Module):
    """A classifier's non-text inputs as one vector: the numeric columns as given (standardised by the task) next
    to one learned embedding per categorical column (id 0 is the task's unknown bucket)."""

    def __init__(self, numeric: int = 0, categories: list[int] | tuple[int, ...] = (),
                 embedding_size: int = 16) -> None:
        super().__init__()
        self.numeric = numeric
        self.embeddings = nn.ModuleList(nn.Embedding(n, embedding_size) for n in categories)
        self.width = numeric + len(self.embeddings) * embedding_size

    def forward(self, numeric_features: Tensor | None, categorical_ids: Tensor | None) -> Tensor:
        for name, needed, given in (("numeric_features", self.numeric, numeric_features),
                                    ("categorical_ids", len(self.embeddings), categorical_ids)):
            if needed and given is None:
                raise ValueError(f"this classifier reads {name} ({needed} per example) beside the text; none given")
        parts = [numeric_features.float()] if self.numeric else []  # (batch, numeric)
        parts += [emb(categorical_ids[:, i]) for i, emb in enumerate(self.embeddings)]  # (batch, embedding) each
        return torch.cat(parts, -1)  # (batch, width)


class _LinearHeadModel(BertHeadModel):
    """BertModel, dropout and one linear layer: the shape shared by the sequence, token and choice classifiers.
    With `config.tabular_inputs` (sequence classification), the layer reads [pooled [CLS]; TabularFeatures]."""

    reads_tabular_inputs: bool = False

    def __init__(self, config: BertConfig, out_features: int) -> None:
        super().__init__(config)
        self.dropout = _classifier_dropout(config)
        tabular = config.tabular_inputs if self.reads_tabular_inputs else None
        self.tabular = TabularFeatures(**tabular) if tabular else None
        extra = self.tabular.width if self.tabular is not None else 0
        self.classifier = nn.Linear(config.hidden_size + extra, out_features)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        numeric_features: Tensor | None = None,
        categorical_ids: Tensor | None = None,
    ) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        features = self.dropout(out.pooler_output if self.reads_pooled_output else out.last_hidden_state)
        if self.tabular is not None:  # (batch, hidden + tabular width)
            features = torch.cat([features, self.tabular(numeric_features, categorical_ids).to(features.dtype)], -1)
        logits = self.classifier(features)
        loss = None if labels is None else self.loss(logits, labels)
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


class BertForSequenceClassification(_LinearHeadModel):
    """Single sentences or pairs (GLUE): a linear layer on the pooled [CLS] vector (and the example's numeric and
    categorical columns when `config.tabular_inputs` is set); logits (batch, labels)."""

    reads_tabular_inputs = True

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


class BertForQuestionAnswering(BertHeadModel):
    """Extractive QA (SQuAD): start and end logits for every token from one linear layer with two outputs."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
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


# ----------------------------------------------------------------------------------------------------------------
# The feature-based approach (paper, section 5.3): BERT frozen, its token features feed a small tagger.
# ----------------------------------------------------------------------------------------------------------------

FEATURE_CHOICES = ("last", "sum_last_four", "concat_last_four", "weighted_sum")
TAGGERS = ("bilstm", "linear")


@dataclass
class FrozenTaggerSettings(Config):
    """The frozen tagger's settings (kept in config.task_settings); the defaults are a learned mix of every layer,
    which any depth has and which was the best choice on all-MiniLM-L6-v2 (the paper's best on BERT-base, Table 7,
    is concat_last_four), and a BiLSTM sized for a small encoder."""

    frozen_features: str = spec("weighted_sum", choices=FEATURE_CHOICES)
    """With --frozen: how a token's feature is made of BERT's hidden states: last (the last layer), sum_last_four,
    concat_last_four (the paper's best) or weighted_sum (a learned softmax mix of every layer, embeddings included:
    ELMo's scalar mix)."""
    tagger: str = spec("bilstm", choices=TAGGERS)
    """With --frozen: the task model on the features: bilstm (two layers, then a linear layer: the paper's) or
    linear."""
    tagger_hidden: int = spec(256, ge=1, le=2**16)
    """With --frozen: the BiLSTM's hidden size per direction (paper: 768 on BERT-base)."""
    tagger_dropout: float = spec(0.3, ge=0, lt=1)
    """With --frozen: dropout on the features and on the BiLSTM's outputs."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "FrozenTaggerSettings":
        """These settings from a dict that may hold others too (config.task_settings)."""
        return cls(**{f.name: settings[f.name] for f in fields(cls) if f.name in settings})

    def to_settings(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(FrozenTaggerSettings)}


class ScalarMix(nn.Module):
    """scale * sum_l softmax(w)_l h_l over the layers (Peters et al. 2018, eq. 1: gamma); w starts at 0 (an even
    mix). Not named gamma: checkpoint loading reads a TF-era `.gamma` as a LayerNorm weight."""

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.scalar_weights = nn.Parameter(torch.zeros(num_layers))
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, layers: Tensor) -> Tensor:  # (..., layers, hidden) -> (..., hidden)
        weights = torch.softmax(self.scalar_weights, 0)
        return self.scale * torch.einsum("...lh,l->...h", layers, weights)


def combine_layers(layers: Tensor, choice: str, mix: ScalarMix | None = None) -> Tensor:
    """A token's feature from its stacked hidden states (..., L + 1, hidden), the embeddings first."""
    if choice == "last":
        return layers[..., -1, :]
    if choice == "sum_last_four":
        return layers[..., -4:, :].sum(-2)
    if choice == "concat_last_four":  # the last layer first, as the paper lists them
        return layers[..., -4:, :].flip(-2).flatten(-2)  # (..., 4 * hidden)
    if choice == "weighted_sum" and mix is not None:
        return mix(layers)
    raise ValueError(f"frozen_features = {choice!r}: expected one of {', '.join(FEATURE_CHOICES)}")


def feature_width(choice: str, hidden_size: int) -> int:
    """Width of a token feature for a feature choice."""
    return 4 * hidden_size if choice == "concat_last_four" else hidden_size


class BertForFrozenTokenClassification(BertHeadModel):
    """Tagging on a frozen BERT: the encoder never trains (and always runs in eval mode); a token's feature is
    combined from its hidden states (`frozen_features`) and tagged by a BiLSTM + linear layer or a linear layer.

    Settings: FrozenTaggerSettings, read from config.frozen_tagger (from config.task_settings in folders written
    before that field). forward takes either the inputs, and runs the encoder, or `hidden_layers`: its stacked hidden
    states computed once beforehand (the cached features).
    The folder it writes holds the encoder's weights too, so it predicts on its own.
    """

    reads_pooled_output = False
    in_transformers = False  # transformers has no such head: `convert --to-hf` refuses the folder

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        if config.frozen_tagger is not None:
            s = config_from_dict(FrozenTaggerSettings, config.frozen_tagger, "BertConfig.frozen_tagger")
        else:  # a folder written before frozen_tagger: its task settings held the tagger's
            s = FrozenTaggerSettings.from_settings(config.task_settings or {})
        self.frozen_features, self.tagger = s.frozen_features, s.tagger
        if self.frozen_features.endswith("_last_four") and config.num_hidden_layers < 4:
            raise ConfigError(f"frozen_features = {self.frozen_features!r} needs an encoder of 4 layers or more; "
                              f"this one has {config.num_hidden_layers} (use last or weighted_sum)")
        width = feature_width(self.frozen_features, config.hidden_size)
        hidden, p = s.tagger_hidden, s.tagger_dropout
        self.scalar_mix = ScalarMix(config.num_hidden_layers + 1) if self.frozen_features == "weighted_sum" else None
        self.dropout = Dropout(p)
        self.lstm = nn.LSTM(width, hidden, num_layers=2, bidirectional=True, batch_first=True,
                            dropout=p) if self.tagger == "bilstm" else None
        self.classifier = nn.Linear(2 * hidden if self.lstm is not None else width, config.num_labels)
        self.post_init()
        self.bert.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, folder: str, **kwargs: object) -> "BertForFrozenTokenClassification":
        """As every head's, and the settings remember the encoder folder the tagger was first built on."""
        model = super().from_pretrained(folder, **kwargs)
        model.config.task_settings = {**model.config.task_settings}
        if not model.config.task_settings.get("encoder"):
            model.config.task_settings["encoder"] = str(folder)
        return model

    def train(self, mode: bool = True) -> "BertForFrozenTokenClassification":
        super().train(mode)
        self.bert.eval()  # frozen: no dropout, the features are the encoder's deterministic output
        return self

    @torch.no_grad()
    def layer_features(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                       token_type_ids: Tensor | None = None) -> Tensor:
        """Every layer's hidden states, embeddings first: (batch, seq, L + 1, hidden)."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
        return torch.stack(out.hidden_states, dim=2)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        hidden_layers: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> ClassifierOutput:
        if hidden_layers is None:
            if input_ids is None:
                raise ValueError("BertForFrozenTokenClassification needs input_ids or hidden_layers")
            hidden_layers = self.layer_features(input_ids, attention_mask, token_type_ids)
        x = self.dropout(combine_layers(hidden_layers.float(), self.frozen_features, self.scalar_mix))
        if self.lstm is not None:
            x = self.dropout(self._run_lstm(x, attention_mask))
        logits = self.classifier(x)  # (batch, seq, labels)
        loss = None if labels is None else F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        return ClassifierOutput(loss, logits)

    def _run_lstm(self, x: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The BiLSTM over each sequence's real tokens only (packed: the backward direction starts at its end)."""
        seq = x.shape[1]
        if attention_mask is None:
            lengths = torch.full((x.shape[0],), seq, dtype=torch.long)
        else:
            lengths = attention_mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=seq)[0]  # (batch, seq, 2 * hidden)


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
        BertForFrozenTokenClassification,
        BertForQuestionAnswering,
        BertForMultipleChoice,
    )
}


def register_head(cls: type[BertPreTrainedModel]) -> type[BertPreTrainedModel]:
    """Add a head class defined outside bertkit (a plug-in task's own, `bertkit.tasks.register_task`) to
    MODEL_CLASSES, so that a folder naming it in `architectures` opens; registering it again is a no-op, another
    class under a name already taken is an error."""
    taken = MODEL_CLASSES.get(cls.__name__)
    if taken is not None and taken is not cls:
        raise TypeError(f"head class name {cls.__name__!r} is taken by {taken.__module__}.{taken.__qualname__}")
    MODEL_CLASSES[cls.__name__] = cls
    return cls
