"""The BERT model: config, encoder, heads, and checkpoint load/save."""

from bertkit.data.dataset import IGNORE_INDEX
from bertkit.model.bert import BertModel, BertModelOutput, BertPreTrainedModel
from bertkit.model.heads import (
    MODEL_CLASSES,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForPreTrainingOutput,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertHeadModel,
    ClassifierOutput,
    MaskedLMOutput,
    QuestionAnsweringOutput,
)
from bertkit.model.config import PRESETS, BertConfig

__all__ = [
    "IGNORE_INDEX",
    "MODEL_CLASSES",
    "PRESETS",
    "BertConfig",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForNextSentencePrediction",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertHeadModel",
    "BertModel",
    "BertModelOutput",
    "BertPreTrainedModel",
    "ClassifierOutput",
    "MaskedLMOutput",
    "QuestionAnsweringOutput",
]
