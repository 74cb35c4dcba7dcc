"""`PretrainingDataConfig`: every setting of the pre-training data recipe, with the paper's defaults.

Defaults follow google-research/bert `create_pretraining_data.py` (its flags) and the BERT paper
(Devlin et al. 2019, section 3.1 and appendix A.1). The config is written next to the shards as
`data_config.json`, so a training run knows exactly how its data was made.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.dataclass_io import SEED_LIMIT, Config, spec
from bertkit.errors import ConfigError

LAYOUTS = ("auto", "lines", "paragraphs")
INSTANCE_FORMATS = ("sentence_pairs", "full_sentences")
BAD_UTF8_POLICIES = ("error", "skip")


@dataclass
class PretrainingDataConfig(Config):
    """How raw text becomes masked-LM + next-sentence pre-training instances."""

    instances: str = spec("sentence_pairs", choices=INSTANCE_FORMATS)
    """What an instance is. "sentence_pairs": [CLS] A [SEP] B [SEP] with a next-sentence label (the paper, section
    3.1). "full_sentences": RoBERTa's FULL-SENTENCES (Liu et al. 2019, section 4.2), for an MLM-only objective: [CLS]
    then whole sentences read contiguously up to max_length, crossing document boundaries with a [SEP] between
    documents, one segment, no next-sentence label. Every token of a pass over the text lands in exactly one
    instance; each pass reads the documents in a new shuffled order."""
    max_length: int = spec(128, ge=5, le=65535, why="positions are stored as uint16")
    """Length of [CLS] A [SEP] B [SEP]; 128 for 90% of the paper's steps, 512 for the rest (appendix A.2)."""
    short_seq_prob: float = spec(0.1, ge=0, le=1)
    """Probability of drawing a shorter target length randint(2, max_num_tokens), to reduce the pre-train/fine-tune
    length mismatch (reference flag `short_seq_prob`, default 0.1)."""
    masked_lm_prob: float = spec(0.15, gt=0, lt=1)
    """Fraction of non-special tokens to predict (paper section 3.1: "15% of all WordPiece tokens")."""
    max_predictions_per_seq: int = spec(20, ge=1, le=65535)
    """Cap on predictions per sequence (reference: 20 for length 128, 80 for length 512)."""
    mask_token_prob: float = spec(0.8, ge=0, le=1)
    """Share of the chosen tokens that become [MASK] (paper 3.1, C.2: 80%)."""
    random_token_prob: float = spec(0.1, ge=0, le=1)
    """Share of the chosen tokens replaced by a random token (10%); the rest stay unchanged."""
    random_next_prob: float = spec(0.5, ge=0, le=1)
    """Share of pairs whose B is a random span of another document (paper 3.1: "50% of the time")."""
    balanced_nsp: bool = True
    """The reference always gives a one-sentence chunk (a sentence longer than the target length, or a document's
    last sentence) a random B, which on real text pushes the random share to ~56%. True flips the usual coin for a
    long sentence too (IsNext takes B from the following sentences), and a document's last sentence alone in a
    chunk makes no instance (counted). False reproduces the reference exactly."""
    dupe_factor: int = spec(10, ge=1, le=1000)
    """Times each document is turned into instances, each time with different splits and masks (the reference's
    default is 10; with dynamic masking 1-5 is usually enough)."""
    whole_word_mask: bool = False
    """Mask all WordPiece pieces of a word together (the reference's `do_whole_word_mask`)."""
    dynamic_masking: bool = False
    """False: masks are drawn once and stored with each instance (the reference). True: shards hold unmasked tokens
    and the collator redraws masks each epoch (RoBERTa, Liu et al. 2019)."""
    seed: int = spec(12345, ge=0, le=SEED_LIMIT)
    """Seed of every random choice; each shard's RNG is derived from (seed, shard index)."""
    layout: str = spec("auto", choices=LAYOUTS)
    """Text layout: "lines" = one sentence per line, blank line between documents (the reference's format);
    "paragraphs" = free text split into sentences here; "auto" = decide per file."""
    on_bad_utf8: str = spec("error", choices=BAD_UTF8_POLICIES)
    """Undecodable bytes: "error" stops with file and byte offset, "skip" drops the line and counts it."""
    text_field: str = spec("text")
    """Field holding a document's text in JSONL input."""
    chunk_documents: int = spec(2000, ge=2, le=10**9, why="a random B needs another document")
    """Streaming: documents per chunk at most. One chunk makes one shard, and the random B of a pair is drawn from
    the chunk (the reference draws from the whole corpus, which does not fit a bounded memory; with thousands of
    documents per chunk this is equivalent)."""
    chunk_chars: int = spec(16_000_000, ge=1, le=2**40)
    """Streaming: characters per chunk at most (memory bound)."""
    max_document_sentences: int = spec(20_000, ge=2, le=10**9)
    """A document longer than this many sentences is cut into several (bounds memory on heading-less text)."""

    @property
    def next_sentence(self) -> bool:
        """Whether instances are sentence pairs carrying a next-sentence label."""
        return self.instances == "sentence_pairs"

    @property
    def max_num_tokens(self) -> int:
        """Room for A and B: max_length less [CLS] and two [SEP]."""
        return self.max_length - 3

    def mask_options(self) -> dict[str, Any]:
        """The keyword arguments of `bertkit.data.pretraining.mask_tokens` that this config sets."""
        return {
            "masked_lm_prob": self.masked_lm_prob,
            "max_predictions_per_seq": self.max_predictions_per_seq,
            "whole_word_mask": self.whole_word_mask,
            "mask_token_prob": self.mask_token_prob,
            "random_token_prob": self.random_token_prob,
        }

    def validate(self) -> None:
        """The rules between fields (each field's own range is declared beside it)."""
        if self.mask_token_prob + self.random_token_prob > 1.0:
            raise ConfigError(f"PretrainingDataConfig.random_token_prob = {self.random_token_prob!r}: expected "
                              f"mask_token_prob + random_token_prob <= 1 (mask_token_prob is {self.mask_token_prob!r})")

    @classmethod
    def from_older(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Data prepared before the field was renamed says `max_seq_length`; it is read as `max_length`."""
        if "max_seq_length" in d and "max_length" not in d:
            d = {("max_length" if k == "max_seq_length" else k): v for k, v in d.items()}
        return d

    def to_json(self) -> str:
        """JSON text of the config."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "PretrainingDataConfig":
        """Parse JSON text written by `to_json`."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"PretrainingDataConfig: invalid JSON ({e})") from None
        if not isinstance(d, dict):
            raise ConfigError("PretrainingDataConfig: expected a JSON object")
        return cls.from_dict(d)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config atomically as JSON."""
        from bertkit.io import atomic_write_text

        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PretrainingDataConfig":
        """Read a config written by `save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))
