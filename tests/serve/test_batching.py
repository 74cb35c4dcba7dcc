"""The dynamic batcher's idle hook: it runs when the queue runs empty, never between the batches of a burst."""

from __future__ import annotations

import asyncio

from bertkit.serve.batching import DynamicBatcher


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
