"""The dynamic batcher: a request's items stay together whatever the timing; the idle hook runs when the queue runs
empty, never between the batches of a burst."""

from __future__ import annotations

import asyncio

from bertkit.serve.batching import DynamicBatcher


def test_a_requests_items_queued_together_form_one_batch_however_late_the_loop_runs() -> None:
    """With no delay allowed (as when a loaded machine brings the loop back after max_delay_s), the items a request
    queued together still go in one batch, so its answer is the one computed for the request alone (bitwise, as
    /v1/embeddings promises against encode); a batch still holds at most max_batch_size of them."""
    sizes: list[int] = []

    def fn(items: list[int]) -> list[int]:
        sizes.append(len(items))
        return [x + 1 for x in items]

    async def scenario() -> tuple[list[int], list[int]]:
        b = DynamicBatcher(fn, max_batch_size=4, max_delay_s=0.0)
        b.start()
        three = await b.submit([1, 2, 3])
        six = await b.submit(list(range(6)))
        await b.stop()
        return three, six

    three, six = asyncio.run(scenario())
    assert (three, six) == ([2, 3, 4], [1, 2, 3, 4, 5, 6])
    assert sizes == [3, 4, 2]


def test_on_idle_runs_after_a_burst_not_between_its_batches() -> None:
    events: list[str] = []

    def fn(items: list[int]) -> list[int]:
        events.append(f"batch {len(items)}")
        return [2 * x for x in items]

    async def scenario() -> list[list[int]]:
        b = DynamicBatcher(fn, max_batch_size=4, max_delay_s=0.01, on_idle=lambda: events.append("idle"),
                           idle_every_s=0.0)
        b.start()
        burst = await asyncio.gather(*(b.submit([i]) for i in range(10)))  # 10 items: batches of 4, 4, 2
        await asyncio.sleep(0.05)
        later = await b.submit([7])
        await asyncio.sleep(0.05)
        await b.stop()
        return [*burst, later]

    results = asyncio.run(scenario())
    assert results == [[2 * i] for i in range(10)] + [[14]]
    assert events == ["batch 4", "batch 4", "batch 2", "idle", "batch 1", "idle"]


def test_on_idle_is_rate_limited() -> None:
    idle: list[int] = []

    async def scenario() -> None:
        b = DynamicBatcher(lambda items: items, max_batch_size=1, max_delay_s=0.0, on_idle=lambda: idle.append(1),
                           idle_every_s=60.0)
        b.start()
        for i in range(5):  # five separate idle moments within a minute: one call
            await b.submit([i])
            await asyncio.sleep(0.01)
        await b.stop()

    asyncio.run(scenario())
    assert idle == [1]
