"""Tokenize a large batch in worker processes (each worker holds its own copy of the tokenizer and word cache)."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

_TOKENIZER: Any = None


def _init(tokenizer: Any) -> None:
    global _TOKENIZER
    _TOKENIZER = tokenizer


def _encode_chunk(texts: list[str]) -> list[Any]:
    encode = _TOKENIZER._encode_text
    return [encode(t) for t in texts]


def encode_parallel(tokenizer: Any, texts: list[str], num_workers: int) -> list[Any]:
    """`tokenizer._encode_text` of every text, in order, computed by `num_workers` processes."""
    chunk = max(1, min(2000, len(texts) // (num_workers * 8) or 1))
    chunks = [texts[i:i + chunk] for i in range(0, len(texts), chunk)]
    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(num_workers, initializer=_init, initargs=(tokenizer,)) as pool:
        parts = pool.map(_encode_chunk, chunks)
    return [seq for part in parts for seq in part]
