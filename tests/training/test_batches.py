"""How an epoch's order becomes batches: `no_duplicate_batches` (no two samples of a batch share a text), checked on
hypothesis-generated data and against sentence-transformers' NoDuplicatesBatchSampler, and the trainer's use of a
phase's batch sampler."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.training.batches import Batches, TrainPhase, no_duplicate_batches
from bertkit.training.config import TrainingConfig
from bertkit.training.distributed import DistInfo

# Rows of 1-3 texts drawn from a small vocabulary, so that duplicates are common.
ROWS = st.lists(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=3), min_size=0, max_size=60)


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, batch_size=st.integers(1, 9), drop_last=st.booleans(), seed=st.integers(0, 2**16))
def test_no_batch_holds_a_text_twice(rows: list[list[str]], batch_size: int, drop_last: bool, seed: int) -> None:
    """Every batch's samples share no text; each sample is in at most one batch (in exactly one without drop_last);
    full batches have batch_size samples, and with drop_last every batch is full; the batches are a function of
    their arguments (the same call gives the same batches)."""
    keys = [frozenset(r) for r in rows]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    batches = no_duplicate_batches(order, batch_size, drop_last, keys)
    for batch in batches:
        texts = [t for i in batch for t in keys[i]]
        assert len(texts) == len(set(texts)), (batch, [rows[i] for i in batch])
        assert 1 <= len(batch) <= batch_size
        assert not drop_last or len(batch) == batch_size
    placed = [i for batch in batches for i in batch]
    assert len(placed) == len(set(placed))
    if not drop_last:
        assert sorted(placed) == sorted(order)
    assert batches == no_duplicate_batches(order, batch_size, drop_last, keys)


@settings(max_examples=200, deadline=None)
@given(batch_size=st.integers(1, 9), drop_last=st.booleans(), seed=st.integers(0, 2**16))
def test_distinct_samples_are_batched_in_order(batch_size: int, drop_last: bool, seed: int) -> None:
    """With no shared text the batches are the order cut every batch_size samples (the plain batching)."""
    order = torch.randperm(23, generator=torch.Generator().manual_seed(seed)).tolist()
    keys = [frozenset([i]) for i in range(23)]
    plain = [order[i:i + batch_size] for i in range(0, 23, batch_size)]
    if drop_last and len(plain[-1]) < batch_size:
        plain.pop()
    assert no_duplicate_batches(order, batch_size, drop_last, keys) == plain


def test_a_skipped_sample_waits_for_the_next_batch() -> None:
    """By hand: 0 and 1 share 'x', so 1 waits and opens the next batch, before the samples after it."""
    keys = [{"x", "a"}, {"x", "b"}, {"c"}, {"d"}, {"e"}]
    assert no_duplicate_batches([0, 1, 2, 3, 4], 2, False, keys) == [[0, 2], [1, 3], [4]]
    assert no_duplicate_batches([0, 1, 2, 3, 4], 2, True, keys) == [[0, 2], [1, 3]]
    # Samples that all share a text go one per batch.
    assert no_duplicate_batches([0, 1, 2], 2, False, [{"q"}] * 3) == [[0], [1], [2]]


@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_equal_sentence_transformers_no_duplicates_sampler(drop_last: bool) -> None:
    """On the same order, the batches of sentence-transformers' NoDuplicatesBatchSampler (its first pass over a
    dataset of query/positive/negative columns with many repeated texts)."""
    datasets = pytest.importorskip("datasets")
    sampler_module = pytest.importorskip("sentence_transformers.base.sampler")
    g = torch.Generator().manual_seed(0)
    n = 200
    columns = {name: [f"{name[0]}{int(v)}" for v in torch.randint(0, 40, (n,), generator=g)]
               for name in ("query", "positive", "negative")}
    columns["negative"] = [f"p{t[1:]}" for t in columns["negative"]]  # a negative may be another row's positive
    dataset = datasets.Dataset.from_dict(columns)
    sampler = sampler_module.NoDuplicatesBatchSampler(dataset, batch_size=8, drop_last=drop_last,
                                                      generator=torch.Generator(), seed=5)
    sampler.generator.manual_seed(5)  # as its __iter__ seeds it (seed + epoch 0) before the pass
    theirs = list(sampler._iter_one_pass(
        lambda i: {str(v) for v in dataset[i].values()}, lambda values, batch: not values.isdisjoint(batch)))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(5), dtype=torch.int32).tolist()
    keys = [frozenset(columns[c][i] for c in columns) for i in range(n)]
    ours = no_duplicate_batches(order, 8, drop_last, keys)
    assert ours == theirs
    # Duplicates made some batches short: kept without drop_last, dropped with it.
    assert len(ours) > n // 8 if not drop_last else sum(map(len, ours)) < n - n % 8


def test_the_trainer_batches_a_phase_with_its_batch_sampler() -> None:
    """A phase's batch_sampler makes each epoch's batches from that epoch's seeded order (per epoch, the same on
    every call); without one the order is cut every batch_size samples."""
    keys = [frozenset({i % 5}) for i in range(20)]  # samples i and i + 5 share a text
    config = TrainingConfig(output_dir="unused", batch_size=4, seed=3)
    dist = DistInfo()
    plain = Batches([TrainPhase(list(range(20)))], config, dist)
    sampled = Batches([TrainPhase(list(range(20)),
                                  batch_sampler=partial(no_duplicate_batches, keys=keys))], config, dist)
    for epoch in (0, 1):
        order = [i for batch in plain.epoch_batches(0, epoch) for i in batch]
        assert sampled.epoch_batches(0, epoch) == no_duplicate_batches(order, 4, False, keys)
        for batch in sampled.epoch_batches(0, epoch):
            assert len({keys[i] for i in batch}) == len(batch)
    assert sampled.epoch_batches(0, 1) != sampled.epoch_batches(0, 0)
