"""bertkit: BERT end to end on PyTorch: tokenizer, model, pre-training, fine-tuning, inference and serving.

The public names below are imported on first use, so `import bertkit` (and the CLI's start-up) does not pay for
torch until a model is touched.
"""

from __future__ import annotations

from bertkit.errors import BertkitError, CheckpointError, ConfigError, DataError, TokenizerError
from bertkit.lazy import lazy_exports

__version__ = "0.1.0"

# Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    "BertConfig": "bertkit.model",
    "BertModel": "bertkit.model",
    "BertForPreTraining": "bertkit.model",
    "BertForMaskedLM": "bertkit.model",
    "BertForNextSentencePrediction": "bertkit.model",
    "BertForSequenceClassification": "bertkit.model",
    "BertForTokenClassification": "bertkit.model",
    "BertForQuestionAnswering": "bertkit.model",
    "BertForMultipleChoice": "bertkit.model",
    "BertTokenizer": "bertkit.tokenizer",
    "load_model": "bertkit.model.folder",
    "load": "bertkit.api",
    "Bert": "bertkit.api",
    "cos_sim": "bertkit.inference.similarity",
    "semantic_search": "bertkit.inference.similarity",
}

__all__ = ["BertkitError", "CheckpointError", "ConfigError", "DataError", "TokenizerError", "__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
