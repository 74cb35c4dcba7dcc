"""Dynamic batching: concurrent requests' items are collected into one batch (up to a size or a delay) and run
together in a worker thread, so the event loop keeps accepting requests while the model computes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

_STOP = object()


class DynamicBatcher(Generic[Item, Result]):
    """Runs `fn(items) -> results` (one result per item, same order) on batches gathered from `submit` calls."""

    def __init__(self, fn: Callable[[list[Item]], Sequence[Result]], max_batch_size: int = 32,
                 max_delay_s: float = 0.005, executor: ThreadPoolExecutor | None = None) -> None:
        self.fn = fn
        self.max_batch_size = max_batch_size
        self.max_delay_s = max_delay_s
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-batch")
        self.queue: asyncio.Queue | None = None
        self.worker: asyncio.Task | None = None
        self.batches = 0
        self.items = 0

    def start(self) -> None:
        """Start the collecting task on the running event loop."""
        self.queue = asyncio.Queue()
        self.worker = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, items: Sequence[Item]) -> list[Result]:
        """Queue items (they may land in different batches) and wait for their results."""
        if self.queue is None:
            raise RuntimeError("batcher not started")
        loop = asyncio.get_running_loop()
        futures = []
        for item in items:
            future = loop.create_future()
            await self.queue.put((item, future))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    async def _run(self) -> None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self.queue.get()
            if first is _STOP:
                break
            batch = [first]
            deadline = loop.time() + self.max_delay_s
            while len(batch) < self.max_batch_size:
                try:
                    entry = self.queue.get_nowait() if self.queue.qsize() else \
                        await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time()))
                except (asyncio.TimeoutError, TimeoutError):
                    break
                if entry is _STOP:
                    stopping = True
                    break
                batch.append(entry)
            await self._run_batch(batch)

    async def _run_batch(self, batch: list[tuple[Item, asyncio.Future]]) -> None:
        items = [item for item, _ in batch]
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.executor, self.fn, items)
        except Exception as e:  # noqa: BLE001 (every waiting request gets the error)
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        self.batches += 1
        self.items += len(items)
        for (_, future), result in zip(batch, results):
            if not future.done():
                future.set_result(result)

    async def stop(self) -> None:
        """Finish every queued item, then stop the task and the thread (graceful shutdown)."""
        if self.queue is not None and self.worker is not None:
            await self.queue.put(_STOP)
            await self.worker
        self.executor.shutdown(wait=True)
