"""The BERT family's tokenizer folders: which files each family's folder holds, its special tokens, and which family a
folder names. Data only (no tokenizer is built here), so BertTokenizer can say what a folder it cannot read holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.io import read_json_object

SPECIAL_NAMES = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")
_BERT_SPECIALS = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "mask_token": "[MASK]"}
_ROBERTA_SPECIALS = {"unk_token": "<unk>", "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
                     "mask_token": "<mask>"}
_ALBERT_SPECIALS = {"unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "<pad>",
                    "mask_token": "[MASK]"}


@dataclass(frozen=True)
class Family:
    """A family's tokenizer folder: how it is named, which files stand for tokenizer.json, and its special tokens."""

    name: str
    """config.json's model_type."""
    classes: tuple[str, ...]
    """tokenizer_config.json's tokenizer_class for it (transformers' names; "...Fast" is read as the same)."""
    specials: dict[str, str]
    """The special tokens' default names (tokenizer_config.json or special_tokens_map.json can rename them)."""
    files: tuple[str, ...]
    """The vocabulary files a folder without tokenizer.json must hold (all of them)."""
    token_types: bool = True
    """False where the model reads no token types (DistilBERT has no such embeddings, RoBERTa and XLM-R one row):
    every token type id is 0, whatever a folder's post-processor says (a RoBERTa model with BERT's WordPiece
    tokenizer.json, such as KLUE's, would otherwise give type 1 to a pair's second text)."""


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("distilbert", ("DistilBertTokenizer",), _BERT_SPECIALS, ("vocab.txt",), token_types=False),
    Family("electra", ("ElectraTokenizer",), _BERT_SPECIALS, ("vocab.txt",)),
    Family("roberta", ("RobertaTokenizer",), _ROBERTA_SPECIALS, ("vocab.json", "merges.txt"), token_types=False),
    Family("xlm-roberta", ("XLMRobertaTokenizer",), _ROBERTA_SPECIALS, ("sentencepiece.bpe.model",),
           token_types=False),
    Family("albert", ("AlbertTokenizer",), _ALBERT_SPECIALS, ("spiece.model",)),
)}


UNREAD = object()
"""Stands for "config.json not read yet" in `tokenizer_family` (None means read and absent)."""


def tokenizer_family(folder: Path, model_type: str | None | object = UNREAD) -> str | None:
    """The family whose tokenizer a folder holds (a key of FAMILIES), or None for BERT's: tokenizer_config.json's
    tokenizer_class when it names one, else config.json's model_type. A caller that has parsed config.json already
    hands its model_type (None when absent) down, so the file is not read twice."""
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        cls = read_json_object(tc).get("tokenizer_class")
        if isinstance(cls, str):
            for family in FAMILIES.values():
                if cls.removesuffix("Fast") in family.classes:
                    return family.name
    if model_type is UNREAD:
        config = folder / "config.json"
        model_type = read_json_object(config).get("model_type") if config.is_file() else None
    return model_type if model_type in FAMILIES else None
