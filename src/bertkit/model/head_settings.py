"""The settings of a head that keeps its own in config.task_settings, apart from the head's torch code
(`bertkit.model.heads`): a task's options extend them (NER's, the frozen tagger's), and the task registry, and so
`bertkit finetune --help`, reads every task's options without loading torch."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from bertkit.dataclass_io import Config, spec

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
