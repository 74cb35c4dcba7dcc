"""Cosine similarity and semantic search over embeddings held in memory, as sentence-transformers' `util.cos_sim`
and `util.semantic_search` give them (their argument names and return shapes; tests/inference/test_similarity.py
checks both against sentence-transformers' own functions), for the vectors `bertkit.load(...).encode` returns.
A corpus too large for memory goes to `bertkit index` / `bertkit search` (FAISS) instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.dataclass_io import check_value
from bertkit.inference.options import SemanticSearchOptions


def as_matrix(vectors: Any, name: str) -> torch.Tensor:
    """Embeddings (numpy, a tensor, or lists of numbers: float32, as torch makes them) as a 2-D tensor: one vector
    is one row; ValueError naming `name` for anything else."""
    matrix = vectors if isinstance(vectors, torch.Tensor) else torch.from_numpy(
        vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors, np.float32))
    if matrix.dim() == 1:
        matrix = matrix.unsqueeze(0)
    if matrix.dim() != 2 or not matrix.is_floating_point():
        raise ValueError(f"{name}: expected embeddings, a (rows, dimension) array of floats (or one vector), found "
                         f"shape {tuple(matrix.shape)} of {matrix.dtype}")
    return matrix


def normalized(matrix: torch.Tensor) -> torch.Tensor:
    """Rows at unit length (a zero row stays zero), as sentence-transformers normalises them."""
    return F.normalize(matrix, p=2, dim=1)


def same_kind(a: torch.Tensor, b: torch.Tensor, names: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sets of embeddings of one width, in one dtype (the wider, float32 at least: 16-bit vectors are scored in
    float32) on b's device; ValueError naming them."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{names}: vectors of {a.shape[1]} and of {b.shape[1]} numbers: embeddings of two models?")
    dtype = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
    return a.to(b.device, dtype), b.to(dtype)


def cos_sim(a: Any, b: Any) -> np.ndarray:
    """The cosine similarity of every row of `a` with every row of `b`: (len(a), len(b)), result[i, j] =
    cos(a[i], b[j]) (a single vector counts as one row)."""
    a, b = same_kind(as_matrix(a, "a"), as_matrix(b, "b"), "a and b")
    return (normalized(a) @ normalized(b).T).cpu().numpy()


def semantic_search(query_embeddings: Any, corpus_embeddings: Any, top_k: int = 10, query_chunk_size: int = 100,
                    corpus_chunk_size: int = 500_000) -> list[list[dict[str, int | float]]]:
    """Each query's top_k corpus rows by cosine similarity, best first: per query, a list of {"corpus_id": row,
    "score": cosine}. The corpus is scanned corpus_chunk_size rows at a time against query_chunk_size queries at a
    time, so memory holds at most one block of scores besides each query's best so far."""
    top_k = check_value(SemanticSearchOptions, "top_k", top_k, "top_k")
    query_chunk_size = check_value(SemanticSearchOptions, "query_chunk_size", query_chunk_size, "query_chunk_size")
    corpus_chunk_size = check_value(SemanticSearchOptions, "corpus_chunk_size", corpus_chunk_size,
                                    "corpus_chunk_size")
    queries, corpus = as_matrix(query_embeddings, "query_embeddings"), as_matrix(corpus_embeddings, "corpus_embeddings")
    queries, corpus = same_kind(queries, corpus, "query_embeddings and corpus_embeddings")
    if not len(queries):
        return []
    scores = torch.empty(len(queries), 0, dtype=corpus.dtype, device=corpus.device)  # each query's best so far
    rows = torch.empty(len(queries), 0, dtype=torch.long, device=corpus.device)
    for start in range(0, len(corpus), corpus_chunk_size):
        chunk = normalized(corpus[start:start + corpus_chunk_size])  # once per corpus chunk
        best = []
        for q in range(0, len(queries), query_chunk_size):
            found = (normalized(queries[q:q + query_chunk_size]) @ chunk.T).topk(min(top_k, len(chunk)), dim=1)
            values = torch.cat([scores[q:q + query_chunk_size], found.values], dim=1)
            ids = torch.cat([rows[q:q + query_chunk_size], found.indices + start], dim=1)
            top = values.topk(min(top_k, values.shape[1]), dim=1)  # the best of both, sorted
            best.append((top.values, ids.gather(1, top.indices)))
        scores, rows = torch.cat([v for v, _ in best]), torch.cat([i for _, i in best])
    return [[{"corpus_id": int(i), "score": float(s)} for s, i in zip(row_scores, row_ids)]
            for row_scores, row_ids in zip(scores.tolist(), rows.tolist())]
