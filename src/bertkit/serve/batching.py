"""Dynamic batching: concurrent requests' items are collected into one batch (up to a size, a cost or a delay) and
run together in a worker thread, so the event loop keeps accepting requests while the model computes.

Work no client waits for is never computed: a request that times out or whose client disconnects cancels its
items, and the batcher skips cancelled items when it forms a batch. The queue is bounded: a request that would
overflow it is refused at once (`QueueFull`, answered 503) instead of waiting behind everything else.

Errors belong to items, not batches: a batch function returns an exception in place of the result of an item it
cannot answer (`prepare_each` does that for the usual prepare-then-compute shape), and if it raises anyway the
batch is re-run item by item, so one request's bad input never fails the requests batched with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

_STOP = object()
DISCONNECT_POLL_S = 0.05  # how often a waiting request checks that its client is still there


class QueueFull(Exception):
    """The batcher already holds as many queued items as it may."""


class RequestTimeout(Exception):
    """A request's items were not done within its time limit (they are cancelled)."""


class ItemError(Exception):
    """Item `index` of a request failed with `cause` (its other items are cancelled)."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"item {index}: {cause}")
        self.index, self.cause = index, cause


Prepared = TypeVar("Prepared")


def prepare_each(items: Sequence[Item], prepare: Callable[[Item], Prepared],
                 compute: Callable[[list[Prepared]], Sequence[Result]]) -> list[Result | Exception]:
    """`compute` over the items `prepare` accepts; an item it refuses gets the exception as its result, so a bad
    item fails alone instead of failing its batch."""
    out: list[Result | Exception] = [None] * len(items)  # type: ignore[list-item]
    good: list[tuple[int, Prepared]] = []
    for i, item in enumerate(items):
        try:
            good.append((i, prepare(item)))
        except Exception as e:  # noqa: BLE001 (the item's own answer)
            out[i] = e
    if good:
        for (i, _), result in zip(good, compute([p for _, p in good])):
            out[i] = result
    return out


class DynamicBatcher(Generic[Item, Result]):
    """Runs `fn(items) -> results` (one result per item, same order; an exception as the result of an item that
    failed) on batches gathered from `submit` calls.

    A batch holds at most `max_batch_size` items and at most `max_batch_cost` of `cost(item)` (the first item
    always fits), so one batch of long texts cannot hold the model for long.
    """

    def __init__(self, fn: Callable[[list[Item]], Sequence[Result]], max_batch_size: int = 32,
                 max_delay_s: float = 0.005, executor: ThreadPoolExecutor | None = None, max_queue: int = 1024,
                 cost: Callable[[Item], float] | None = None, max_batch_cost: float | None = None,
                 on_idle: Callable[[], Any] | None = None, idle_every_s: float = 1.0,
                 on_batch: Callable[[int], Any] | None = None) -> None:
        self.fn = fn
        self.on_batch = on_batch  # told each batch's size as it is run (the service's batch-size histogram)
        self.on_idle = on_idle  # run in the executor when the queue runs empty, at most every idle_every_s
        self.idle_every_s = idle_every_s
        self._last_idle = float("-inf")
        self.max_batch_size = max_batch_size
        self.max_delay_s = max_delay_s
        self.max_queue = max_queue
        self.cost = cost
        self.max_batch_cost = max_batch_cost
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-batch")
        self.queue: asyncio.Queue | None = None
        self.worker: asyncio.Task | None = None
        self.batches = 0
        self.items = 0
        self.skipped = 0  # cancelled items never computed

    def start(self) -> None:
        """Start the collecting task on the running event loop."""
        self.queue = asyncio.Queue()
        self.worker = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, items: Sequence[Item], timeout_s: float | None = None,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> list[Result]:
        """Queue items (they may land in different batches) and wait for their results.

        Raises QueueFull when the queue cannot take them all, RequestTimeout after `timeout_s`, ItemError as soon as
        one item failed; on any of these, a disconnect (`is_disconnected()` turns true) or a cancellation the items
        still queued are dropped.
        """
        if self.queue is None:
            raise RuntimeError("batcher not started")
        if self.queue.qsize() + len(items) > self.max_queue:
            raise QueueFull(f"{self.queue.qsize()} items are queued and this request adds {len(items)}; the queue "
                            f"holds at most {self.max_queue}")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in items]
        for item, future in zip(items, futures):
            self.queue.put_nowait((item, future))
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            while True:
                wait = DISCONNECT_POLL_S if is_disconnected is not None else None
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise RequestTimeout(f"not done within {timeout_s:g} s")
                    wait = left if wait is None else min(wait, left)
                done, _ = await asyncio.wait(futures, timeout=wait, return_when=asyncio.FIRST_EXCEPTION)
                failed = [i for i, f in enumerate(futures)
                          if f in done and not f.cancelled() and f.exception() is not None]
                if failed:
                    raise ItemError(failed[0], futures[failed[0]].exception())
                if len(done) == len(futures):
                    return [f.result() for f in futures]
                if is_disconnected is not None and await is_disconnected():
                    raise asyncio.CancelledError("the client disconnected")
        finally:
            for f in futures:
                if not f.done():
                    f.cancel()  # never computed if still queued

    async def _next(self, timeout: float | None) -> Any:
        """The next queued entry whose request still waits (cancelled ones are skipped), or _STOP. An entry queued
        already is taken at once, whatever the timeout: a request's items, queued together, stay in one batch even
        when the loop comes back after the delay (so its answer does not depend on the machine's load); only new
        arrivals are waited for, up to `timeout` seconds (TimeoutError)."""
        assert self.queue is not None
        while True:
            try:
                entry = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                if timeout is not None and timeout <= 0:
                    raise TimeoutError from None
                entry = await (self.queue.get() if timeout is None else asyncio.wait_for(self.queue.get(), timeout))
            if entry is _STOP or not entry[1].done():
                return entry
            self.skipped += 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._next(None)
            if first is _STOP:
                break
            batch = [first]
            cost = self.cost(first[0]) if self.cost is not None else 0.0
            deadline = loop.time() + self.max_delay_s
            while len(batch) < self.max_batch_size:
                try:
                    entry = await self._next(max(0.0, deadline - loop.time()))
                except (asyncio.TimeoutError, TimeoutError):
                    break
                if entry is _STOP:
                    stopping = True
                    break
                if self.cost is not None and self.max_batch_cost is not None:
                    extra = self.cost(entry[0])
                    if cost + extra > self.max_batch_cost:
                        await self._run_batch(batch)  # full by cost: this entry starts the next batch
                        batch, cost, deadline = [entry], extra, loop.time() + self.max_delay_s
                        continue
                    cost += extra
                batch.append(entry)
            await self._run_batch(batch)
            if self.on_idle is not None and self.queue.empty() and loop.time() - self._last_idle >= self.idle_every_s:
                self._last_idle = loop.time()
                await loop.run_in_executor(self.executor, self.on_idle)

    async def _run_batch(self, batch: list[tuple[Item, asyncio.Future]]) -> None:
        waiting = [(item, future) for item, future in batch if not future.done()]  # abandoned while batching
        self.skipped += len(batch) - len(waiting)
        batch = waiting
        if not batch:
            return
        loop = asyncio.get_running_loop()
        items = [item for item, _ in batch]
        if self.on_batch is not None:
            self.on_batch(len(items))
        try:
            results = list(await loop.run_in_executor(self.executor, self.fn, items))
        except Exception as e:  # noqa: BLE001 (answered below)
            if len(batch) == 1:
                results = [e]
            else:  # one item broke the batch: run each alone, so that only the items that fail alone fail
                results = [await self._run_alone(item, future) for item, future in batch]
        self.batches += 1
        self.items += len(items)
        for (_, future), result in zip(batch, results):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _run_alone(self, item: Item, future: asyncio.Future) -> Result | Exception:
        """One item's result (or its exception) from a batch of one; nothing for an item no one waits for."""
        if future.done():
            return None  # type: ignore[return-value]
        try:
            return (await asyncio.get_running_loop().run_in_executor(self.executor, self.fn, [item]))[0]
        except Exception as e:  # noqa: BLE001 (this item's own answer)
            return e

    async def stop(self) -> None:
        """Finish every queued item, then stop the task and the thread (graceful shutdown)."""
        if self.queue is not None and self.worker is not None:
            await self.queue.put(_STOP)
            await self.worker
        self.executor.shutdown(wait=True)
