"""Corpus reading, pre-training instances, sharded storage and collators."""

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.corpus import split_sentences
from bertkit.data.prepare import PrepareResult, prepare_pretraining
from bertkit.data.pretraining import VocabInfo, create_instances_from_document, mask_tokens, truncate_seq_pair

__all__ = [
    "PretrainingDataConfig",
    "PrepareResult",
    "VocabInfo",
    "create_instances_from_document",
    "mask_tokens",
    "prepare_pretraining",
    "split_sentences",
    "truncate_seq_pair",
    "PretrainingDataset",
    "PretrainingCollator",
]


def __getattr__(name: str):
    """Import the torch-based classes lazily, so data preparation (and its workers) does not load torch."""
    if name == "PretrainingDataset":
        from bertkit.data.dataset import PretrainingDataset

        return PretrainingDataset
    if name == "PretrainingCollator":
        from bertkit.data.collate import PretrainingCollator

        return PretrainingCollator
    raise AttributeError(name)
