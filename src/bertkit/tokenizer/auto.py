"""One door to a folder's tokenizer: bertkit's own BertTokenizer for BERT's folders, FastTokenizer (Hugging Face
`tokenizers`) for the family's (RoBERTa, XLM-R, ALBERT, DistilBERT, ELECTRA), picked by the folder's files."""

from __future__ import annotations

import os
from typing import Any

from bertkit.errors import CheckpointError
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer.fast import FastTokenizer
from bertkit.tokenizer.families import FAMILIES, UNREAD, tokenizer_family
from bertkit.tokenizer.tokenizer import BertTokenizer

Tokenizer = BertTokenizer | FastTokenizer


def load_tokenizer(path: str | os.PathLike, *, model_type: str | None | object = UNREAD, **overrides: Any) -> Tokenizer:
    """The tokenizer of a model or tokenizer folder (or a shipped model's name, or a bare vocab.txt).

    The family comes from tokenizer_config.json's tokenizer_class, else config.json's model_type
    (`tokenizer_family`): one of FAMILIES is a FastTokenizer (tokenizer.json, else the family's own files); anything
    else is BERT's, read by BertTokenizer (vocab.txt, or a WordPiece tokenizer.json) exactly as before. Keyword
    arguments override the folder's settings (BertTokenizer's arguments, or tokenizer_config.json's keys);
    `model_type` is config.json's, for a caller that has read the file already (None when it has none)."""
    folder = resolve_model_dir(path)
    if folder.is_dir():
        family = tokenizer_family(folder, model_type)
        if family is not None:
            return FastTokenizer.from_pretrained(folder, family, **overrides)
        if not (folder / "vocab.txt").is_file() and not (folder / "tokenizer.json").is_file():
            families = ", ".join(f"{name} ({' + '.join(f.files)})" for name, f in FAMILIES.items())
            raise CheckpointError(
                f"{folder}: no tokenizer files: expected vocab.txt (BERT), or tokenizer.json or a family's own files "
                f"with tokenizer_config.json's tokenizer_class or config.json's model_type naming the family: "
                f"{families}")
    return BertTokenizer.from_pretrained(folder, **overrides)
