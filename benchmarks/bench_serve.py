"""Load test of a running `bertkit serve`: concurrent /embed requests, requests/s and p50/p99 latency.

    python benchmarks/bench_serve.py --url http://127.0.0.1:8000 [--requests 300] [--concurrency 32] [--dump out.json]

Each request embeds 1-3 short WikiText-2 sentences; --dump writes every request's texts and answer so a test can
compare them with the direct Python call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path


def sentences(data: Path, n: int) -> list[str]:
    """Short non-heading WikiText-2 lines (cut to 300 characters)."""
    lines = [x.strip() for x in (data / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines()]
    return [x[:300] for x in lines if x and not x.startswith("=")][:n]


async def run(url: str, requests: int, concurrency: int, texts: list[str], timeout: float) -> dict:
    import httpx

    bodies = [texts[i % len(texts): i % len(texts) + 1 + i % 3] for i in range(requests)]
    latencies: list[float] = []
    answers: list[list[list[float]] | None] = [None] * requests
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        async def one(i: int) -> None:
            async with limit:
                start = time.perf_counter()
                r = await client.post("/embed", json={"texts": bodies[i]})
                latencies.append(time.perf_counter() - start)
                r.raise_for_status()
                answers[i] = r.json()["embeddings"]

        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(requests))), timeout)
        wall = time.perf_counter() - start
    latencies.sort()
    return {"requests": requests, "concurrency": concurrency, "seconds": wall, "requests_per_s": requests / wall,
            "p50_ms": 1000 * statistics.median(latencies), "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
            "texts": bodies, "embeddings": answers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run at most")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--dump", default=None, help="write texts and answers to this JSON file")
    args = parser.parse_args()
    result = asyncio.run(run(args.url, args.requests, args.concurrency, sentences(Path(args.data), 200),
                             args.timeout))
    print(f"{result['requests']} requests, concurrency {result['concurrency']}: {result['requests_per_s']:.1f} "
          f"requests/s, p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms")
    if args.dump:
        Path(args.dump).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
