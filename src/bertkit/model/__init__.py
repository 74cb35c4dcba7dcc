"""The BERT model: config, encoder, heads, and checkpoint load/save. Names are imported on first use
(bertkit.lazy), so `bertkit.model.config` reads without torch."""

from bertkit.lazy import lazy_exports

_EXPORTS = {
    "IGNORE_INDEX": "bertkit.data.dataset",
    "BertModel": "bertkit.model.bert",
    "BertModelOutput": "bertkit.model.bert",
    "BertPreTrainedModel": "bertkit.model.bert",
    "Execution": "bertkit.model.execution",
    **{name: "bertkit.model.heads" for name in (
        "MODEL_CLASSES", "BertForMaskedLM", "BertForMultipleChoice", "BertForNextSentencePrediction",
        "BertForPreTraining", "BertForPreTrainingOutput", "BertForQuestionAnswering", "BertForReplacedTokenDetection",
        "BertForSequenceClassification", "BertForTokenClassification", "BertHeadModel", "ClassifierOutput",
        "MaskedLMOutput", "QuestionAnsweringOutput")},
    "PRESETS": "bertkit.model.config",
    "BertConfig": "bertkit.model.config",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
