"""Load test of `bertkit serve`: concurrent /embed requests, requests/s, p50/p99 latency, answers against the API.

    python3 benchmarks/bench_serve.py --model DIR [--requests 200] [--concurrency 16] [--rounds 5]
    python3 benchmarks/bench_serve.py --url http://127.0.0.1:8000 [--dump out.json]   (a server already running)

With --model the benchmark starts `bertkit serve` itself (defaults for every limit), then per round: `requests`
requests of 1-3 WikiText-2 sentences from `concurrency` clients, the server's resident memory after the round, and
every answer compared with `bertkit.load(DIR).encode` in this process. Last, 30 requests of 64 long texts whose
clients leave after 0.05 s, and the latency of a one-word request sent right after them. --dump writes every
request's texts and answers so a test can compare them with the direct Python call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

LONG = "The committee met again on Tuesday to discuss the budget of the new library and its opening hours. " * 20


def sentences(data: Path, n: int) -> list[str]:
    """Short non-heading WikiText-2 lines (cut to 300 characters)."""
    lines = [x.strip() for x in (data / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines()]
    return [x[:300] for x in lines if x and not x.startswith("=")][:n]


async def run(url: str, requests: int, concurrency: int, texts: list[str], timeout: float) -> dict:
    """One round of load: every request's latency and answer."""
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


async def abandoned_then_one(url: str) -> float:
    """30 requests of 64 long texts abandoned after 0.05 s, then the latency of a one-word request."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=0.05) as client:
        async def leave() -> None:
            try:
                await client.post("/embed", json={"texts": [LONG] * 64})
            except httpx.TimeoutException:
                pass
        await asyncio.gather(*(leave() for _ in range(30)))
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        start = time.perf_counter()
        (await client.post("/embed", json={"texts": ["hello"]})).raise_for_status()
        return time.perf_counter() - start


def rss_mib(pid: int) -> float:
    """Resident memory of a process (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", model, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="a running server (else --model starts one)")
    parser.add_argument("--model", default=None, help="model folder to serve and to compare answers with")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per round at most")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--dump", default=None, help="write the last round's texts and answers to this JSON file")
    args = parser.parse_args()
    if (args.url is None) == (args.model is None):
        parser.error("give exactly one of --url and --model")
    texts = sentences(Path(args.data), 200)
    proc = None
    url = args.url
    if args.model:
        import torch

        print(f"CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
              f"capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")
        proc, url = start_server(args.model)
    try:
        direct = None
        if args.model:
            import numpy as np

            import bertkit

            bert = bertkit.load(args.model)
            direct = dict(zip(texts, bert.encode(texts)))
        for k in range(args.rounds):
            result = asyncio.run(run(url, args.requests, args.concurrency, texts, args.timeout))
            line = (f"round {k + 1}: {result['requests']} requests, concurrency {result['concurrency']}: "
                    f"{result['requests_per_s']:.1f} requests/s, p50 {result['p50_ms']:.0f} ms, "
                    f"p99 {result['p99_ms']:.0f} ms")
            if proc is not None:
                line += f", server RSS {rss_mib(proc.pid):.0f} MiB"
            if direct is not None:
                worst = max(float(np.abs(np.array(answer) - np.stack([direct[t] for t in body])).max())
                            for body, answer in zip(result["texts"], result["embeddings"]))
                line += f", max |answer - bertkit.load().encode| {worst:.1e}"
            print(line, flush=True)
        if proc is not None:
            latency = asyncio.run(abandoned_then_one(url))
            print(f"a one-word request after 30 abandoned requests of 64 long texts: answered in {latency:.2f} s")
        if args.dump:
            Path(args.dump).write_text(json.dumps(result), encoding="utf-8")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
