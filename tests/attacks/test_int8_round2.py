"""Attack round 2 on int8 embeddings (issue 24): N11 (results depend on the batch size)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from bertkit.inference.encoder import Encoder

SHIPPED_SST2_DEV = Path(__file__).resolve().parents[2] / "src" / "bertkit" / "demo_data" / "sst2_dev.tsv"
# Calibration for N11, where only the same answer at every batch size matters: a few sentences of our own (neither
# the texts embedded below nor any evaluation set).
CALIBRATION = [
    "The committee met on a cold morning in March and agreed, after a long argument, to rebuild the old bridge.",
    "She walked along the river with her brother, talking of the harvest, the weather and their cousins' plans.",
    "Nobody expected the small village team to reach the final, least of all the players themselves.",
    "A quiet evening at home, a good book and a pot of tea were all he wished for after the journey.",
]


def sst2_sentences(path: Path) -> list[str]:
    """The sentences of a GLUE SST-2 TSV."""
    with open(path, encoding="utf-8", newline="") as f:
        return [row["sentence"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def test_n11_int8_embeddings_do_not_depend_on_the_batch_size(minilm_dir: Path) -> None:
    """N11: the same texts at batch sizes 1, 8, 16 and 64 gave int8 embeddings up to 6e-3 apart. A sequence's
    attention was padded to its batch's longest, and MKL's float32 products take other kernels for a few rows; int8
    rounds every product's input to a grid, so those last-bit differences crossed rounding steps. Now bit for bit."""
    texts = sst2_sentences(SHIPPED_SST2_DEV)[:64] + ["a", "!", "oh come on .", "the " * 250]
    encoder = Encoder(minilm_dir, precision="int8", max_length=256, calibration=CALIBRATION)
    alone = encoder.encode(texts, batch_size=1)
    for batch_size in (8, 16, 64):
        together = encoder.encode(texts, batch_size=batch_size)
        assert torch.equal(together, alone), (batch_size, float((together - alone).abs().max()))
    assert torch.equal(encoder.encode(texts, batch_size=64, max_tokens_per_batch=None), alone)
    assert torch.equal(encoder.encode(texts[::-1], batch_size=16), alone.flip(0))  # other batch-mates
