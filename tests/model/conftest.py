"""Shared fixtures for the model tests: the real MiniLM checkpoint, real sentences, a tokenizer, the CLI."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest


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


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_dir: Path) -> Any:
    """bertkit's BertTokenizer for the MiniLM folder."""
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(str(minilm_dir))
