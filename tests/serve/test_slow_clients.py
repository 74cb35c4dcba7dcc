"""Slow clients cannot lock the HTTP service out: connections that stall in the request head or body are closed by
the read deadline and the oldest make room for new ones, in process and under `ulimit -n 1024` with 1,100 stalled
connections (the 2026-11-24 attack report's H2)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
pytest.importorskip("uvicorn")
from inference_helpers import minilm_folder, tiny_folder  # noqa: E402
from test_serve import Server, free_port  # noqa: E402


class GuardedServer(Server):
    """`bertkit.serve.build_server` in a thread: the server `bertkit serve` runs, with its connection guard."""

    def __init__(self, folder: Path | str, **settings: object) -> None:
        from bertkit.serve import ServeSettings, build_server

        self.port = free_port()
        self.server = build_server(folder, "127.0.0.1", self.port, ServeSettings(precision="fp32", **settings))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"


def stalled_connections(port: int, with_body: int, half_head: int) -> list[socket.socket]:
    """Connections that sent a request head and part of its body, then ones that sent half a head; all stall."""
    head = (f"POST /embed HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            "content-length: 200\r\n\r\n").encode()
    socks = []
    for i in range(with_body + half_head):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(head + b'{"texts": ["' if i < with_body else head[:40])
        socks.append(s)
    return socks


def answer_of(s: socket.socket, wait_s: float) -> bytes | None:
    """What the server sent before closing the connection; None if it is still open after wait_s."""
    s.settimeout(wait_s)
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (TimeoutError, socket.timeout):
        return None
    except ConnectionResetError:
        pass
    return data


def test_stalled_connections_are_closed_and_make_room_for_real_clients(tmp_path: Path) -> None:
    """H2 (in-process): with room for 20 connections and 2 s to send a request, 40 stalled ones (25 in the body,
    15 in the head) cannot lock a client out: the oldest make room for the newer, /embed answers at once, and
    every stalled connection is closed within the read deadline (with a 408); an endless body still gets 413."""
    with GuardedServer(tiny_folder(tmp_path, "BertModel"), max_connections=20, read_timeout_s=2.0) as server:
        guard = server.server.guard
        socks = stalled_connections(server.port, 25, 15)
        start = time.perf_counter()
        with httpx.Client(base_url=server.url, timeout=10) as client:
            r = client.post("/embed", json={"texts": ["a normal request"]})
        assert r.status_code == 200 and time.perf_counter() - start < 2.0
        answers = [answer_of(s, 4.0) for s in socks]
        for s in socks:
            s.close()
        assert None not in answers  # every one closed by the server
        evicted = guard.counts["made_room"]
        assert evicted == 21  # 40 + the client's connection, 20 fit: the 21 oldest (all sending a body) made room
        assert all(a == b"" for a in answers[:evicted])
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers[evicted:])  # the rest ran out of time
        assert guard.counts["timed_out"] >= 40 - evicted and len(guard.open) == 0

        def chunks():  # no Content-Length, over the body limit: still refused as it streams in
            for _ in range(80):
                yield b"a" * 2**16
        r = httpx.post(f"{server.url}/embed", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "the limit is 4194304" in r.json()["detail"]


def _fd_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.slow
def test_slowloris_at_ulimit_1024_does_not_lock_out_clients_or_flood_the_log(tmp_path: Path) -> None:
    """H2 (the report's attack): `bertkit serve` under `ulimit -n 1024` (soft and hard), 1,100 stalled connections
    (800 in the body, 300 in the head): a normal /embed answers within 2 s, the log stays under 1 MB, and every
    stalled connection is closed by the read deadline (all with the default settings)."""
    port, log_path = free_port(), tmp_path / "serve.log"
    import bertkit

    env = dict(os.environ, PYTHONPATH=str(Path(bertkit.__file__).resolve().parents[1]))  # the bertkit under test
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", minilm_folder(), "--port",
                                 str(port), "--precision", "fp32"],
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_fd_limit_1024, env=env)
    url = f"http://127.0.0.1:{port}"
    socks: list[socket.socket] = []
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None and time.time() < deadline, log_path.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        opened = time.perf_counter()
        socks = stalled_connections(port, 800, 300)
        seconds = []
        for pause in (0.0, 2.0, 0.0):  # at once, then with the attack established
            time.sleep(pause)
            start = time.perf_counter()
            r = httpx.post(f"{url}/embed", json={"texts": ["a normal request"]}, timeout=10)
            seconds.append(time.perf_counter() - start)
            assert r.status_code == 200
        time.sleep(max(0.0, opened + 11.0 - time.perf_counter()))  # past the default 10 s read deadline
        still_open = sum(answer_of(s, 0.5) is None for s in socks)
        size = log_path.stat().st_size
        print(f"/embed under 1,100 stalled connections: {', '.join(f'{s:.2f}' for s in seconds)} s; "
              f"log {size} bytes; still open after the deadline: {still_open}")
        assert max(seconds) < 2.0 and size < 2**20 and still_open == 0
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
