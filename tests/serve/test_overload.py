"""The HTTP service under more than it should take: oversized and endless bodies, abandoned requests, floods, slow
work. The server answers each with a clear status and stays responsive; work no client waits for is not computed."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

# The server and its client are the `serve` and `test` extras: without them these tests skip, naming what is missing
# (never a collection error).
httpx = pytest.importorskip("httpx", reason="the HTTP load tests need httpx (pip install 'bertkit[test]')")
pytest.importorskip("uvicorn", reason="the HTTP load tests need uvicorn (pip install 'bertkit[serve]')")
pytest.importorskip("fastapi", reason="the HTTP load tests need fastapi (pip install 'bertkit[serve]')")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from inference_helpers import minilm_folder  # noqa: E402
from test_serve import Server  # noqa: E402


LONG = "The committee met again on Tuesday to discuss the budget of the new library and its opening hours. " * 20


def test_oversized_body_is_refused_before_it_is_read() -> None:
    with Server(minilm_folder(), max_body_bytes=2**20) as server:
        c = httpx.Client(base_url=server.url)
        big = b'{"texts": ["' + b"a" * (5 * 2**20) + b'"]}'
        r = c.post("/embed", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "the limit is 1048576" in r.json()["detail"]

        def chunks():  # no Content-Length: counted as it streams in
            yield b'{"texts": ["'
            for _ in range(40):
                yield b"a" * 2**16
            yield b'"]}'

        r = c.post("/embed", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post("/embed", json={"texts": ["still serving"]}).status_code == 200


def test_abandoned_requests_are_not_computed_and_the_next_one_is_fast() -> None:
    """30 requests of 64 long texts whose clients leave after 0.05 s; a one-word request right after them."""
    with Server(minilm_folder()) as server:
        batcher = server.app.state.batchers["embed"]

        async def abandon() -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=0.05) as client:
                async def one() -> None:
                    try:
                        await client.post("/embed", json={"texts": [LONG] * 64, "truncate": True})
                    except httpx.TimeoutException:
                        pass
                await asyncio.gather(*(one() for _ in range(30)))

        asyncio.run(abandon())
        start = time.perf_counter()
        r = httpx.post(f"{server.url}/embed", json={"texts": ["hello"]}, timeout=60)
        latency = time.perf_counter() - start
        assert r.status_code == 200
        print(f"next request after 30 abandoned ones: {latency:.2f} s; texts computed {batcher.items} of "
              f"{30 * 64 + 1}, skipped {batcher.skipped}")
        assert latency < 2.0
        assert batcher.items < 30 * 64 // 4  # most of the abandoned work was never computed


def test_a_full_queue_answers_503_at_once_and_recovers() -> None:
    with Server(minilm_folder(), max_queue=64, max_request_texts=64) as server:
        async def flood() -> list[int]:
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                rs = await asyncio.gather(*(client.post("/embed", json={"texts": [LONG[:600]] * 40})
                                            for _ in range(6)))
                return [r.status_code for r in rs], [r.headers.get("retry-after") for r in rs]

        codes, retry = asyncio.run(flood())
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        assert all(r == "1" for c, r in zip(codes, retry) if c == 503)
        assert httpx.post(f"{server.url}/embed", json={"texts": ["after the flood"]}).status_code == 200


def test_a_request_over_its_time_limit_gets_503() -> None:
    with Server(minilm_folder(), request_timeout_s=0.01) as server:
        r = httpx.post(f"{server.url}/embed", json={"texts": [LONG] * 32, "truncate": True}, timeout=60)
        assert r.status_code == 503 and "not done within 0.01 s" in r.json()["detail"]
