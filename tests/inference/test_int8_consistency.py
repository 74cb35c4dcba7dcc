"""int8 embeddings are consistent: the same bits whatever the batch size and batch-mates, and the 0.995 minimum
cosine to float32 on short, one-character and repetitive texts (the 2026-11-24 attack report's N11 and N12;
docs/results/int8-short-texts-epyc-avx2-2026-11-25.md)."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit.inference.encoder import Encoder

SHIPPED_SST2_DEV = Path(__file__).resolve().parents[2] / "src" / "bertkit" / "demo_data" / "sst2_dev.tsv"
# Calibration for the batch-size test, where only the same answer at every batch size matters: a few sentences of our
# own (neither the texts embedded below nor any evaluation set).
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


def test_int8_embeddings_do_not_depend_on_the_batch_size(minilm_dir: Path) -> None:
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


@pytest.fixture(scope="module")
def encoders(minilm_dir: Path) -> tuple[Encoder, Encoder]:
    """float32 and int8 (its default calibration) encoders of MiniLM; the calibration time is printed."""
    start = time.perf_counter()
    int8 = Encoder(minilm_dir, precision="int8", max_length=256)
    print(f"int8 calibration on the default text: {time.perf_counter() - start:.1f} s")
    return Encoder(minilm_dir, precision="fp32", max_length=256), int8


@pytest.mark.filterwarnings("ignore:1 of 8 texts were longer than 256 tokens")  # "a " * 300, cut as intended
def test_int8_meets_the_minimum_cosine_on_short_and_repetitive_texts(encoders, data_dir: Path) -> None:
    """N12: calibrated on long Austen paragraphs, int8 fell to a min cosine to float32 of 0.990 on the SST-2 dev texts
    of at most 5 words, 0.989 on one character and 0.971 on `"the " * 250`, under the 0.995 goal. Texts of few
    distinct tokens now run in float32 and the calibration covers every length; none of these texts is in it."""
    path = data_dir / "sst2" / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"SST-2 dev not found at {path}")
    short = [t for t in sst2_sentences(path) if len(t.split()) <= 5]
    assert len(short) == 24
    characters = [*"abcxyz!?.'-;019", "é", "ß", "ж", "λ", "中", "ü", "ñ"]
    repetitive = ["the " * 250, "! " * 200, "a " * 300, "the cat " * 100, "i love it " * 40, "ha" * 200,
                  "the quick brown fox jumps over the lazy dog . " * 25,
                  "this movie is great , i loved every minute of it ! " * 20]
    fp32, int8 = encoders
    for name, texts in (("SST-2 dev <= 5 words", short), ("one character", characters), ("repetitive", repetitive)):
        cosine = F.cosine_similarity(int8.encode(texts), fp32.encode(texts))
        worst = int(cosine.argmin())
        assert float(cosine[worst]) >= 0.995, (name, texts[worst][:40], float(cosine[worst]))
