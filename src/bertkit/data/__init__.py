"""Corpus reading, pre-training instances, sharded storage and collators."""

import importlib

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.corpus import split_sentences
from bertkit.data.prepare import PrepareResult, prepare_pretraining
from bertkit.data.pretraining import VocabInfo, create_instances_from_document, mask_tokens, truncate_seq_pair

__all__ = ["PretrainingDataConfig", "PrepareResult", "VocabInfo", "create_instances_from_document", "mask_tokens",
           "prepare_pretraining", "split_sentences", "truncate_seq_pair", "PretrainingDataset", "PretrainingCollator"]

_LAZY = {"PretrainingDataset": "bertkit.data.dataset", "PretrainingCollator": "bertkit.data.collate"}


def __getattr__(name: str):
    """Import the torch-based classes lazily, so data preparation (and its workers) does not load torch."""
    if name not in _LAZY:
        raise AttributeError(name)
    return getattr(importlib.import_module(_LAZY[name]), name)
