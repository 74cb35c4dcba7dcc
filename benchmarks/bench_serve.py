"""Load test of `bertkit serve`: concurrent /embed requests, requests/s, p50/p99 latency, answers against the API.

    python3 benchmarks/bench_serve.py --model DIR [--requests 200] [--concurrency 16] [--rounds 5]
    python3 benchmarks/bench_serve.py --url http://127.0.0.1:8000 [--dump out.json]   (a server already running)
    python3 benchmarks/bench_serve.py --model DIR --before REV [--after REV] [--rounds 10] [--json out.json]

With --before, two servers run in the same run, the code of git revision REV (a worktree) and this checkout's (or
--after's), and the rounds alternate between them (old-new, then new-old, ...) after one warm-up round each; each
round's requests/s of the new over the old is a ratio, and the table ends with their median and range: on a shared
machine the range is the noise to read the median against.

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

    async with httpx.AsyncClient(base_url=url, timeout=10) as client:  # cut as before, where a server can be told to
        cut = {"truncate": True} if "truncate" in json.dumps((await client.get("/openapi.json")).json()) else {}
    async with httpx.AsyncClient(base_url=url, timeout=0.05) as client:
        async def leave() -> None:
            try:
                await client.post("/embed", json={"texts": [LONG] * 64, **cut})
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


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process (all its threads) has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def start_server(model: str, src: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`bertkit serve` on a free loopback port, with the bertkit of `src` (a checkout's src/) when given."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))) \
        if src is not None else None
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", model, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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


def machine() -> str:
    """The CPU, its vector and matrix flags, the core count and torch's version and CPU capability."""
    import torch

    flags = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    shown = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "f16c", "vnni"))
    return (f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, flags {' '.join(shown)}; "
            f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")


def worktree(rev: str, where: Path) -> Path:
    """A detached git worktree of `rev` at `where` (its src/ is what a server of that revision imports)."""
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(where), rev], check=True,
                   cwd=Path(__file__).resolve().parents[1])
    return where


def imports_from(src: Path) -> str:
    """Where a Python started with PYTHONPATH=src imports bertkit from (a check that the server runs that code)."""
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.run([sys.executable, "-c", "import bertkit; print(bertkit.__file__)"], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def compare(args: argparse.Namespace, texts: list[str]) -> dict:
    """The --before run: both servers up, a warm-up round each, then `rounds` rounds alternating which goes first;
    per round each one's requests/s and latencies, and new/old."""
    import tempfile

    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        made = [worktree(args.before, Path(tmp) / "before")]
        if args.after:
            made.append(worktree(args.after, Path(tmp) / "after"))
        sources = {"before": made[0] / "src", "after": made[1] / "src" if args.after else repo / "src"}
        revisions = {name: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src.parent, check=True,
                                          capture_output=True, text=True).stdout.strip() + ("" if name == "before" or
                                          args.after else " + this checkout's uncommitted changes")
                     for name, src in sources.items()}
        servers: dict[str, tuple[subprocess.Popen, str]] = {}
        try:
            for name, src in sources.items():
                assert imports_from(src).startswith(str(src)), f"{name}: bertkit not imported from {src}"
                servers[name] = start_server(args.model, src)
            for name, (_, url) in servers.items():  # warm-up, not counted
                asyncio.run(run(url, args.requests, args.concurrency, texts, args.timeout))
            rounds = []
            for k in range(args.rounds):
                order = ["before", "after"] if k % 2 == 0 else ["after", "before"]
                row: dict = {"round": k + 1, "first": order[0]}
                for name in order:
                    cpu = cpu_seconds(servers[name][0].pid)
                    result = asyncio.run(run(servers[name][1], args.requests, args.concurrency, texts, args.timeout))
                    row[name] = {key: result[key] for key in ("requests_per_s", "p50_ms", "p99_ms", "seconds")}
                    row[name]["cpu_ms_per_request"] = 1000 * (cpu_seconds(servers[name][0].pid) - cpu) / args.requests
                    row[name]["rss_mib"] = rss_mib(servers[name][0].pid)
                row["ratio"] = row["after"]["requests_per_s"] / row["before"]["requests_per_s"]
                row["cpu_ratio"] = row["after"]["cpu_ms_per_request"] / row["before"]["cpu_ms_per_request"]
                rounds.append(row)
                print(f"round {k + 1} ({order[0]} first): before {row['before']['requests_per_s']:.1f} requests/s "
                      f"(p50 {row['before']['p50_ms']:.0f} ms, server CPU {row['before']['cpu_ms_per_request']:.1f} "
                      f"ms/request), after {row['after']['requests_per_s']:.1f} (p50 {row['after']['p50_ms']:.0f} ms, "
                      f"{row['after']['cpu_ms_per_request']:.1f} ms): after/before {row['ratio']:.3f}, CPU "
                      f"{row['cpu_ratio']:.3f}", flush=True)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
            for path in made:
                subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, check=False)
    return {"revisions": revisions, "rounds": rounds}


def comparison_table(report: dict) -> str:
    """Median and range of each side's requests/s, latencies and server CPU per request, and of after/before, the
    requests/s ratio last (the CPU ratio beside it: less moved by other work on the machine than wall-clock time)."""
    rounds = report["rounds"]

    def figures(get) -> str:  # noqa: ANN001
        values = sorted(get(r) for r in rounds)
        return f"{statistics.median(values):.3f} ({values[0]:.3f}-{values[-1]:.3f})"

    lines = ["| measure | before | after |", "| --- | ---: | ---: |"]
    for key, title in (("requests_per_s", "requests/s"), ("p50_ms", "p50 latency, ms"), ("p99_ms", "p99 latency, ms"),
                       ("cpu_ms_per_request", "server CPU per request, ms")):
        lines.append(f"| {title}, median (range) | {figures(lambda r: r['before'][key])} | "
                     f"{figures(lambda r: r['after'][key])} |")
    lines.append(f"| after/before server CPU per request, median (range) | | {figures(lambda r: r['cpu_ratio'])} |")
    lines.append(f"| after/before requests/s, median (range) over {len(rounds)} rounds | | "
                 f"{figures(lambda r: r['ratio'])} |")
    return "\n".join(lines)


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
    parser.add_argument("--before", default=None, help="a git revision to serve beside this checkout (--model)")
    parser.add_argument("--after", default=None, help="with --before: a git revision instead of this checkout")
    parser.add_argument("--json", default=None, help="with --before: write the machine, revisions and every "
                                                     "round's figures to this JSON file")
    args = parser.parse_args()
    if (args.url is None) == (args.model is None):
        parser.error("give exactly one of --url and --model")
    if args.before and not args.model:
        parser.error("--before needs --model")
    texts = sentences(Path(args.data), 200)
    if args.before:
        print(machine(), flush=True)
        report = compare(args, texts)
        print(comparison_table(report))
        if args.json:
            report.update(machine=machine(), command=" ".join(sys.argv), requests=args.requests,
                          concurrency=args.concurrency)
            Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
        return 0
    proc = None
    url = args.url
    if args.model:
        print(machine())
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
