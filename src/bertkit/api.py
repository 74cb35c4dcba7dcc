"""The small Python API: open a model folder once, then embed texts or save the pair.

    import bertkit
    bert = bertkit.load("path/to/model")          # model (class from config.json) + its tokenizer
    vectors = bert.encode(["a sentence", "another"])  # numpy (2, hidden)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config.json naming only its task opens into one)
from bertkit.inference.encoder import Encoder, Encoders
from bertkit.inference.pooling import folder_defaults
from bertkit.inference.precision import DEFAULT_PRECISION
from bertkit.model import BertPreTrainedModel
from bertkit.model.checkpoint import save_pretrained
from bertkit.model.folder import open_folder


@dataclass
class Bert:
    """A model and its tokenizer, loaded together from one folder, with the Encoders it has built (one per precision
    and length asked for: a second `encode(..., precision="int8")` does not calibrate again)."""

    model: BertPreTrainedModel
    tokenizer: Any
    defaults: dict[str, Any] = field(default_factory=dict)
    """Embedding defaults read from the folder (sentence-transformers' pooling, normalisation, max length)."""
    encoders: Encoders = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.encoders = Encoders(self.model, self.tokenizer, self.defaults)

    def encoder(self, precision: str = DEFAULT_PRECISION, max_length: int | None = None) -> Encoder:
        """The Encoder `encode` runs for these options (on the model's device), built on first use and kept."""
        return self.encoders.get(precision, max_length)

    def encode(
        self,
        texts: str | Sequence[str],
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 32,
        max_length: int | None = None,
        precision: str = DEFAULT_PRECISION,
    ) -> np.ndarray:
        """Sentence embeddings, (len(texts), hidden) float32 (a single string gives (hidden,)).

        Unset options take the folder's defaults, else mean pooling, no normalisation, the position limit.
        precision "auto" computes in bf16 where the hardware has bf16 matrix units and in fp32 otherwise (the
        choice is logged; `bertkit.inference.precision.choose_precision`); "fp32", "bf16" or "int8" force one.
        """
        single = isinstance(texts, str)
        vectors = self.encoder(precision, max_length).encode([texts] if single else list(texts), pooling=pooling,
                                                           normalize=normalize, batch_size=batch_size).numpy()
        return vectors[0] if single else vectors

    def save(self, folder: str | os.PathLike) -> None:
        """Write the model and the tokenizer into one folder, atomically as a whole."""
        save_pretrained(self.model, folder, extra=lambda target: self.tokenizer.save_pretrained(str(target)))


def load(folder: str | os.PathLike, model_class: str | None = None, **kwargs: Any) -> Bert:
    """Open a model folder: the class its config.json names (or `model_class`), its tokenizer and defaults.

    kwargs go to from_pretrained (strict=, dtype=, config field overrides such as num_labels=).
    """
    opened = open_folder(folder, model_class, **kwargs)  # a shipped model's name (bertkit.pretrained) works too
    return Bert(opened.model, opened.tokenizer, folder_defaults(opened.path))
