"""Models that ship inside the bertkit package, loadable by name wherever a model folder is expected.

    bertkit.load("bertkit-mini")                      # the same as the folder's path
    bertkit finetune --model bertkit-mini ...

Each is a full model folder (config.json, model.safetensors with the pre-training heads, vocab.txt, the tokenizer
settings) plus how it was made (PRETRAINING.md: command, config, metrics, curves). An existing path always wins
over a name.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

SHIPPED = {
    "bertkit-mini": "bertkit-mini",
}
"""Name -> folder inside bertkit/pretrained."""


def shipped_dir(name: str) -> Path:
    """The folder of a shipped model."""
    return Path(str(resources.files("bertkit") / "pretrained" / SHIPPED[name]))


def resolve_model_dir(folder: str | os.PathLike) -> Path:
    """`folder` itself when it exists (or is not a shipped name), else the shipped model of that name."""
    path = Path(folder)
    if not path.exists() and str(folder) in SHIPPED:
        return shipped_dir(str(folder))
    return path
