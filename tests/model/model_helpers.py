"""Helpers shared by the model tests (importable because pytest puts this folder on sys.path)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# google-research/bert modeling_test.py's tiny config.
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


def write_vocab(folder: Path, size: int) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


class HFTokenizer:
    """transformers' BertTokenizerFast behind the slice of bertkit's tokenizer interface that embed_texts uses."""

    def __init__(self, folder: Path) -> None:
        from transformers import BertTokenizerFast

        self._tok = BertTokenizerFast.from_pretrained(str(folder))
        self.pad_token_id = self._tok.pad_token_id

    def encode(self, text: str, pair: str | None = None, max_length: int = 512, truncation: Any = True,
               **_: Any) -> Any:
        e = self._tok(text, pair, max_length=max_length, truncation=truncation)
        return SimpleNamespace(input_ids=e["input_ids"], token_type_ids=e["token_type_ids"],
                               attention_mask=e["attention_mask"], overflowing=[])

    def save_pretrained(self, folder: str) -> None:
        self._tok.save_pretrained(folder)


def have_bertkit_tokenizer() -> bool:
    try:
        from bertkit.tokenizer import BertTokenizer  # noqa: F401
    except ImportError:
        return False
    return True


def run_cli(argv: list[str]) -> int:
    """bertkit.cli.main(argv); while other verb modules are missing, a parser of this package's verbs alone."""
    from bertkit.cli import main

    try:
        return main(argv)
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("bertkit.cli."):
            raise
    from bertkit.cli import inference, model
    from bertkit.errors import BertkitError

    parser = argparse.ArgumentParser(prog="bertkit")
    parser.add_argument("--debug", action="store_true")
    sub = parser.add_subparsers(dest="command")
    model.register(sub)
    inference.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BertkitError as e:
        print(f"bertkit {args.command}: error: {e}", file=sys.stderr)
        return 1
