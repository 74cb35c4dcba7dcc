"""The task heads on top of BertModel: pre-training (masked LM + next sentence) and one output layer per fine-tuning
task (paper, section 4), with their outputs and the registry of head classes by name.

Every head shares one opening (`BertHeadModel`): its config, a `bert` BertModel (with or without the pooler) and the
reference initialisation; its forward runs the encoder, then its own layer and loss. The masked-LM heads compute as
their `Execution` plan says (`bertkit.model.execution`: given at construction, or to one forward call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.data.dataset import IGNORE_INDEX
from bertkit.dataclass_io import config_from_dict
from bertkit.errors import ConfigError
from bertkit.model.bert import BertModel, BertModelOutput, BertPreTrainedModel, activation
from bertkit.model.config import BertConfig
from bertkit.model.execution import Execution
from bertkit.model.head_settings import FEATURE_CHOICES, FrozenTaggerSettings
from bertkit.model.kernels import Dropout, first_places, gather_places
from bertkit.model.losses import cosent_loss, in_batch_negatives_loss
from bertkit.model.pooling import MAX_SCALE, EmbeddingHeadSettings, pool_hidden, write_sentence_transformers


# ----------------------------------------------------------------------------------------------------------------
# Outputs: one dataclass per kind of head.
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class BertForPreTrainingOutput:
    loss: Tensor | None  # MLM + NSP
    prediction_logits: Tensor  # (batch, seq, vocab), or (rows, vocab) at `mlm_positions` when those are given
    seq_relationship_logits: Tensor  # (batch, 2); 0 = IsNext, 1 = NotNext
    mlm_positions: Tensor | None = None  # (rows, 2): (sequence, position) of each logits row; None: every position
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput:
    loss: Tensor | None
    logits: Tensor  # (batch, seq, vocab), or (rows, vocab) at `mlm_positions` when those are given
    mlm_positions: Tensor | None = None  # (rows, 2): (sequence, position) of each logits row; None: every position
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
    embedding width, which is hidden unless the embedding is factorised). The activation is config.mlm_act, which
    is hidden_act unless set (RoBERTa's head applies exact GELU whatever hidden_act says)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.transform_act_fn = activation(config.mlm_act or config.hidden_act)
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
                     sparse: bool = True, slots: int = 0) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """MLM logits, loss and the logits' positions. With labels and `sparse`, the transform and decoder run only where
    a label is set: logits (num_masked, vocab) at positions (num_masked, 2), each (sequence, position), and the loss
    the same as the dense one (NVIDIA's BERT and MosaicBERT do the same). With `slots` as well, a fixed block of that
    many places per sequence, the masked positions first, so that every step has the same shapes (torch.compile,
    CUDA graphs): logits (batch * slots, vocab), the places past a sequence's masked positions ignored by the loss,
    which is still the dense one; more masked positions in a sequence than `slots` is an error (checked on the
    device, without waiting for it). Without labels, or not `sparse`, every position: logits (batch, seq, vocab), as
    transformers computes them, and positions None."""
    if labels is None:
        return head(sequence), None, None
    if not sparse:
        logits = head(sequence)
        return logits, F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1)), None
    if slots:
        masked = labels != IGNORE_INDEX  # (batch, seq)
        torch._assert_async(masked.sum(1).max() <= slots, "a sequence has more masked positions than mlm_slots")
        # the masked positions of each row first, in order (a stable sort of the flags), then the first `slots`
        places = first_places(masked, slots)  # (batch, slots)
        rows = torch.arange(places.shape[0], device=places.device)[:, None].expand_as(places)
        logits = head(gather_places(sequence, places).reshape(-1, sequence.shape[-1]))
        positions = torch.stack([rows, places], -1).reshape(-1, 2)
        return logits, F.cross_entropy(logits.float(), labels.gather(1, places).reshape(-1)), positions
    positions = (labels != IGNORE_INDEX).nonzero()  # (num_masked, 2), in row-major order
    rows, cols = positions.unbind(1)
    logits = head(sequence[rows, cols])
    return logits, F.cross_entropy(logits.float(), labels[rows, cols]), positions


def labelled_logits(logits: Tensor, positions: Tensor | None, labels: Tensor) -> tuple[Tensor, Tensor]:
    """An MLM output's logits at the labelled positions and those labels, (k, vocab) and (k,), whatever its plan
    computed: every position (`positions` None) or the rows at `positions` (the output's `mlm_positions`)."""
    if positions is not None:
        labels = labels[positions[:, 0], positions[:, 1]]  # (rows,)
    else:
        logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    chosen = labels != IGNORE_INDEX
    return logits[chosen], labels[chosen]


class BertHeadModel(BertPreTrainedModel):
    """The opening every head shares: its config and a `bert` encoder, with the pooler when the head reads the
    pooled [CLS] vector. A subclass adds its layers in __init__ and then calls `post_init()`."""

    reads_pooled_output: bool = True  # the pooled [CLS] vector (sentence-level) or every token (tagging, MLM, QA)

    def __init__(self, config: BertConfig, execution: Execution = Execution()) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.reads_pooled_output, execution=execution)


def base_model(model: BertPreTrainedModel) -> BertModel:
    """The BertModel inside a head (or the model itself)."""
    return model if isinstance(model, BertModel) else model.bert  # type: ignore[return-value]


def _flat(t: Tensor | None) -> Tensor | None:
    """(batch, n, seq) -> (batch * n, seq): the texts of examples of several texts (choices, pairs) as one batch."""
    return None if t is None else t.reshape(-1, t.shape[-1])


class _MLMHeadModel(BertHeadModel):
    """A head with an MLM decoder (`cls.predictions`), tied to the input word embeddings; its forward runs the encoder
    and the decoder as the plan given to the call says, else as the model's (`execution`, from construction)."""

    reads_cls: bool = False  # the head reads the pooled [CLS] vector too (NSP)
    cls: nn.Module

    @property
    def execution(self) -> Execution:
        """The plan of a forward that is given none: the one this model was built with."""
        return self.bert.execution

    def _masked_lm(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                   labels: Tensor | None, output_hidden_states: bool, output_attentions: bool,
                   execution: Execution | None) -> tuple[BertModelOutput, Tensor, Tensor | None, Tensor | None]:
        """The encoder's output, then the MLM logits, loss and positions (`masked_lm_logits`) under the plan."""
        plan = execution or self.execution
        # A training step takes the fixed MLM block; evaluation the masked positions as they come, so that held-out
        # data masked more densely than the training data still runs.
        slots = plan.mlm_slots if self.training else 0
        places = self._read_places(labels, output_hidden_states or output_attentions, plan, slots)
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions, places,
                        plan)
        logits, loss, positions = masked_lm_logits(self.cls.predictions, out.last_hidden_state, labels,
                                                   plan.sparse_mlm, slots)
        return out, logits, loss, positions

    def _read_places(self, labels: Tensor | None, every_layer: bool, plan: Execution, slots: int) -> Tensor | None:
        """Where this forward reads the last layer, for BertModel's output_at: with labels, sparse MLM and
        `sparse_last_layer`, the masked positions and [CLS] when the head reads it (batch, n), n the most in a
        sequence or the fixed slots (+ 1); None (every position) otherwise, or when every layer's states or
        attentions are asked for (`every_layer`), or when the pooler averages every token."""
        if labels is None or every_layer or not (plan.sparse_mlm and plan.sparse_last_layer):
            return None
        if self.reads_cls and self.config.pooling == "mean":
            return None
        wanted = labels != IGNORE_INDEX  # (batch, seq)
        if self.reads_cls:
            wanted = torch.cat([torch.ones_like(wanted[:, :1]), wanted[:, 1:]], 1)
        n = min(slots + self.reads_cls, labels.shape[1]) if slots else int(wanted.sum(1).max())
        return first_places(wanted, n) if n else None

    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight


class BertForPreTraining(_MLMHeadModel):
    """BERT's pre-training model: masked LM over the tokens plus next-sentence prediction on [CLS]; loss = sum."""

    reads_cls = True

    def __init__(self, config: BertConfig, execution: Execution = Execution()) -> None:
        super().__init__(config, execution)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, next_sentence_label: Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                execution: Execution | None = None) -> BertForPreTrainingOutput:
        out, prediction_logits, mlm_loss, positions = self._masked_lm(
            input_ids, attention_mask, token_type_ids, labels, output_hidden_states, output_attentions, execution)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (batch, 2)
        nsp_loss = None if next_sentence_label is None else F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]  # masked LM alone without NSP labels (RoBERTa)
        loss = losses[0] + losses[1] if len(losses) == 2 else losses[0] if losses else None
        return BertForPreTrainingOutput(loss, prediction_logits, nsp_logits, positions, mlm_loss, nsp_loss,
                                        out.hidden_states, out.attentions)


class BertForMaskedLM(_MLMHeadModel):
    """Masked LM alone (fill-mask); no pooler, as in the reference."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig, execution: Execution = Execution()) -> None:
        super().__init__(config, execution)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False, output_attentions: bool = False,
                execution: Execution | None = None) -> MaskedLMOutput:
        out, logits, loss, positions = self._masked_lm(
            input_ids, attention_mask, token_type_ids, labels, output_hidden_states, output_attentions, execution)
        return MaskedLMOutput(loss, logits, positions, out.hidden_states, out.attentions)


class BertForNextSentencePrediction(BertHeadModel):
    """Next-sentence prediction alone: is segment B the continuation of A? (0 = IsNext, 1 = NotNext)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.cls.seq_relationship(out.pooler_output)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.view(-1))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class ReplacedTokenDetectionHead(nn.Module):
    """ELECTRA's discriminator output: dense + hidden_act, then one score per token (replaced or original)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense_prediction(self.activation(self.dense(x))).squeeze(-1)  # (batch, seq)


class BertForReplacedTokenDetection(BertHeadModel):
    """ELECTRA's discriminator (Clark et al. 2020): is each token the original or one a generator put there?
    Logits (batch, seq), > 0 for replaced; the loss is binary cross-entropy over the real tokens, as transformers'
    ElectraForPreTraining computes it. The head of published ELECTRA discriminator folders; fine-tuning reads their
    encoder and drops it."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.discriminator_predictions = ReplacedTokenDetectionHead(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> ClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.discriminator_predictions(out.last_hidden_state)  # (batch, seq)
        loss = None
        if labels is not None:
            real = attention_mask.bool() if attention_mask is not None else torch.ones_like(labels, dtype=torch.bool)
            loss = F.binary_cross_entropy_with_logits(logits.float()[real], labels[real].float())
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


# ----------------------------------------------------------------------------------------------------------------
# Fine-tuning heads: one output layer each on top of BertModel (paper, section 4).
# ----------------------------------------------------------------------------------------------------------------


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
        p = config.classifier_dropout
        self.dropout = Dropout(p if p is not None else config.hidden_dropout_prob)
        tabular = config.tabular_inputs if self.reads_tabular_inputs else None
        self.tabular = TabularFeatures(**tabular) if tabular else None
        extra = self.tabular.width if self.tabular is not None else 0
        self.classifier = nn.Linear(config.hidden_size + extra, out_features)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False, output_attentions: bool = False,
                numeric_features: Tensor | None = None, categorical_ids: Tensor | None = None) -> ClassifierOutput:
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

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> ClassifierOutput:
        """input_ids (batch, choices, seq): each choice's pair encoded as a sequence of its own."""
        out = super().forward(_flat(input_ids), _flat(attention_mask), _flat(token_type_ids), None,
                              output_hidden_states, output_attentions)
        logits = out.logits.view(-1, input_ids.shape[1])  # (batch, choices)
        loss = None if labels is None else self.loss(logits, labels)
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class BertForQuestionAnswering(BertHeadModel):
    """Extractive QA (SQuAD): start and end logits for every token from one linear layer with two outputs."""

    reads_pooled_output = False

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                start_positions: Tensor | None = None, end_positions: Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> QuestionAnsweringOutput:
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
# Sentence embeddings: a bi-encoder (Reimers & Gurevych 2019, "Sentence-BERT").
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class EmbeddingOutput:
    loss: Tensor | None  # training: in-batch negatives, or CoSENT given scores
    embeddings: Tensor  # (batch, hidden) for one text per row; (batch, texts, hidden) for examples of several texts
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class BertForEmbedding(BertHeadModel):
    """Sentence embeddings (a bi-encoder): each text's token vectors pooled into one vector, L2-normalised when the
    settings say so: what sentence-transformers' Transformer, Pooling (and Normalize) modules compute.

    input_ids (batch, seq) embeds one text per row. (batch, texts, seq) embeds every text of each example (one
    encoder pass over all of them) and trains them: with `labels`, (batch,) gold similarity scores, CoSENT on texts
    0 and 1; without, in-batch negatives, text 0 the anchor, text 1 its positive, any further texts its hard
    negatives (`bertkit.model.losses`). Settings: EmbeddingHeadSettings, read from config.task_settings.

    The pooler is kept (frozen: no loss reads it) so that the folder holds every tensor the start folder had and
    transformers' BertModel loads it whole. `save_pretrained` also writes the sentence-transformers files."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.settings = EmbeddingHeadSettings.from_settings(config.task_settings or {})
        s = self.settings
        self.logit_scale = nn.Parameter(torch.tensor(math.log(s.scale))) if s.learn_scale else None
        self.post_init()
        self.bert.pooler.requires_grad_(False)  # type: ignore[union-attr]  (DDP refuses parameters without gradients)

    @property
    def scale(self) -> float | Tensor:
        """The losses' scale: the learned one (clamped at MAX_SCALE), else the settings'."""
        if self.logit_scale is None:
            return self.settings.scale
        return self.logit_scale.exp().clamp(max=MAX_SCALE)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> EmbeddingOutput:
        """input_ids (batch, seq) or (batch, texts, seq)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = _flat(attention_mask)
        out = self.bert(_flat(input_ids), mask, _flat(token_type_ids), output_hidden_states, output_attentions)
        vectors = pool_hidden(out.last_hidden_state, mask, self.settings.pooling)  # (batch * texts, hidden)
        if self.settings.normalize:
            vectors = F.normalize(vectors, dim=-1)
        embeddings = vectors.view(*input_ids.shape[:-1], -1)
        loss = None if input_ids.dim() < 3 else self.loss(embeddings, labels)
        return EmbeddingOutput(loss, embeddings, out.hidden_states, out.attentions)

    def loss(self, embeddings: Tensor, labels: Tensor | None) -> Tensor:
        """(batch, texts, hidden): CoSENT on texts 0 and 1 against `labels`, else in-batch negatives."""
        texts = embeddings.unbind(1)
        if len(texts) < 2:
            raise ConfigError(f"BertForEmbedding trains on examples of 2 texts or more, got {len(texts)}")
        if labels is not None:
            return cosent_loss(texts[0], texts[1], labels.float().view(-1), self.scale)
        return in_batch_negatives_loss(*texts, scale=self.scale)

    def save_pretrained(self, folder: str) -> None:
        """config.json and model.safetensors, then sentence-transformers' files (modules.json, 1_Pooling, ...)."""
        from bertkit.model.checkpoint import save_pretrained

        s = self.settings
        save_pretrained(self, folder, lambda target: write_sentence_transformers(
            target, s.pooling, s.normalize, s.max_length, self.config.hidden_size))


# ----------------------------------------------------------------------------------------------------------------
# The feature-based approach (paper, section 5.3): BERT frozen, its token features feed a small tagger.
# ----------------------------------------------------------------------------------------------------------------


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
        width = (4 if self.frozen_features == "concat_last_four" else 1) * config.hidden_size  # a token's feature
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

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, hidden_layers: Tensor | None = None,
                labels: Tensor | None = None) -> ClassifierOutput:
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
        lengths = torch.full((x.shape[0],), seq) if attention_mask is None else attention_mask.sum(1).cpu()
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
        BertForEmbedding,
        BertForReplacedTokenDetection,
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
