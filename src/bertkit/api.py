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

from bertkit.inference.pooling import DEFAULT_POOLING, folder_defaults
from bertkit.inference.precision import DEFAULT_PRECISION
from bertkit.model import BertPreTrainedModel
from bertkit.model.checkpoint import save_pretrained
from bertkit.model.folder import open_folder
from bertkit.tasks import task_model_class


@dataclass
class Bert:
    """A model and its tokenizer, loaded together from one folder."""

    model: BertPreTrainedModel
    tokenizer: Any
    defaults: dict[str, Any] = field(default_factory=dict)
    """Embedding defaults read from the folder (sentence-transformers' pooling, normalisation, max length)."""

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
        from bertkit.inference.embed import embed_texts

        single = isinstance(texts, str)
        vectors = embed_texts(
            self.model,
            self.tokenizer,
            [texts] if single else list(texts),
            pooling=pooling or self.defaults.get("pooling", DEFAULT_POOLING),
            normalize=normalize if normalize is not None else self.defaults.get("normalize", False),
            batch_size=batch_size,
            max_length=max_length or self.defaults.get("max_length"),
            precision=precision,
        )
        return vectors[0] if single else vectors

    def save(self, folder: str | os.PathLike) -> None:
        """Write the model and the tokenizer into one folder, atomically as a whole."""
        save_pretrained(self.model, folder, extra=lambda target: self.tokenizer.save_pretrained(str(target)))


def load(folder: str | os.PathLike, model_class: str | None = None, **kwargs: Any) -> Bert:
    """Open a model folder: the class its config.json names (or `model_class`), its tokenizer and defaults.

    kwargs go to from_pretrained (strict=, dtype=, config field overrides such as num_labels=).
    """
    # a shipped model's name (bertkit.pretrained) works too; a config.json naming only its task gets the task's head
    opened = open_folder(folder, model_class or task_model_class(folder), **kwargs)
    return Bert(opened.model, opened.tokenizer, folder_defaults(opened.path))
