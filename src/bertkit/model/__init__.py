"""The BERT model: config, encoder, heads, and checkpoint load/save."""

from bertkit.model.bert import (
    IGNORE_INDEX,
    MODEL_CLASSES,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForPreTrainingOutput,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertModelOutput,
    BertPreTrainedModel,
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
    "BertModel",
    "BertModelOutput",
    "BertPreTrainedModel",
    "ClassifierOutput",
    "MaskedLMOutput",
    "QuestionAnsweringOutput",
]
