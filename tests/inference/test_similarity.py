"""bertkit.cos_sim and bertkit.semantic_search answer as sentence-transformers' util.cos_sim and util.semantic_search
do (their shapes, and their numbers bit for bit on float32 embeddings), whatever the chunk sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bertkit
from bertkit.errors import ConfigError

util = pytest.importorskip("sentence_transformers.util", reason="the reference is sentence-transformers (test extra)")


@pytest.fixture(scope="module")
def vectors() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((7, 16)).astype(np.float32), rng.standard_normal((50, 16)).astype(np.float32)


def test_cos_sim_equals_sentence_transformers(vectors: tuple[np.ndarray, np.ndarray]) -> None:
    queries, corpus = vectors
    ours = bertkit.cos_sim(queries, corpus)
    assert isinstance(ours, np.ndarray) and ours.shape == (7, 50)
    assert np.array_equal(ours, util.cos_sim(queries, corpus).numpy())
    one = bertkit.cos_sim(queries[0], torch.from_numpy(corpus))  # a vector is a row
    assert one.shape == (1, 50) and np.array_equal(one, util.cos_sim(queries[0], corpus).numpy())
    assert np.array_equal(bertkit.cos_sim(queries.tolist(), corpus), ours)


@pytest.mark.parametrize("sizes", [{}, {"top_k": 5}, {"top_k": 5, "query_chunk_size": 3, "corpus_chunk_size": 7},
                                   {"top_k": 200, "corpus_chunk_size": 9}])
def test_semantic_search_equals_sentence_transformers(vectors: tuple[np.ndarray, np.ndarray], sizes: dict) -> None:
    queries, corpus = vectors
    ours = bertkit.semantic_search(queries, corpus, **sizes)
    assert ours == util.semantic_search(torch.from_numpy(queries), torch.from_numpy(corpus), **sizes)
    assert [len(hits) for hits in ours] == [min(sizes.get("top_k", 10), len(corpus))] * len(queries)
    assert all(hits[0]["score"] >= hits[-1]["score"] for hits in ours)


def test_semantic_search_edges_and_refusals(vectors: tuple[np.ndarray, np.ndarray]) -> None:
    queries, corpus = vectors
    assert bertkit.semantic_search(queries[:0], corpus) == []
    assert bertkit.semantic_search(queries[:2], corpus[:0]) == [[], []]
    with pytest.raises(ConfigError, match="top_k"):
        bertkit.semantic_search(queries, corpus, top_k=0)
    with pytest.raises(ValueError, match="query_embeddings and corpus_embeddings: vectors of 16 and of 8 numbers"):
        bertkit.semantic_search(queries, corpus[:, :8])
    with pytest.raises(ValueError, match="a and b: vectors of 16 and of 8 numbers"):
        bertkit.cos_sim(queries, corpus[:, :8])
    with pytest.raises(ValueError, match="expected embeddings"):
        bertkit.cos_sim(np.zeros((2, 3, 4)), corpus)
