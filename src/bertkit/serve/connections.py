"""Connection guard for uvicorn: slow or stalled senders cannot hold the server's connections (slowloris).

uvicorn has no time limit on reading a request's head or body, and accepts connections until the process runs out
of file descriptors; then every accept fails, normal clients time out, and asyncio logs a traceback per failed
accept (119 MB of log in 25 s under 1,100 half-open connections at `ulimit -n 1024`). Here a connection must deliver
its request head and body within `read_timeout_s` of opening (or of its previous answer), else it is closed (with a
408 when part of the request came in); open connections are capped below the open-file limit, and at the cap a new
connection closes the oldest one still sending its request or idling (never one being answered), so stalled
connections make room for real clients; failed accepts are logged once per LOG_EVERY_S with a count, and free room.
The app starts on a request once its whole body is in (`app.WholeBodyFirst`): under 1,100 stalled connections a new
client's first /embed took 1.5 to 2.3 s without it, 0.2 to 0.7 s with it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import Server

from bertkit.errors import ConfigError

logger = logging.getLogger("uvicorn.error")

FD_RESERVE = 64  # descriptors left for what the process opens besides connections (files, pipes, threads' needs)
ACCEPT_BURST = 512  # connections accepted per event-loop turn at most (fewer for low limits)
BURSTS_IN_FLIGHT = 3  # accepted, not yet seen by the guard, or closed but not yet freed: the cap leaves room for them
LISTEN_BACKLOG = 2048  # connections the kernel holds until they are accepted (uvicorn's default); no descriptors
LOG_EVERY_S = 10.0  # the guard's counts and failed accepts are logged at most this often


def _plain_answer(status: str, text: str, *headers: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written straight to a transport."""
    body = text.encode()
    head = [f"HTTP/1.1 {status}", "content-type: text/plain; charset=utf-8", "connection: close", *headers,
            f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


TOO_SLOW = _plain_answer("408 Request Timeout", "the request did not arrive in time\n")
NO_ROOM = _plain_answer("503 Service Unavailable", "every connection is busy; retry\n", "retry-after: 1")


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; the limit now in force (a large number where unknown)."""
    try:
        import resource
    except ImportError:  # not Unix
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def open_descriptors() -> int:
    """File descriptors this process has open now (0 where /proc is absent)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def connection_budget(fd_limit: int, wanted: int = 0) -> tuple[int, int]:
    """(connections at most, connections accepted per loop turn) that fit in `fd_limit` descriptors beside the ones
    open now and a reserve; `wanted` (0: all that fit) is lowered to fit, with a warning."""
    burst = max(8, min(ACCEPT_BURST, fd_limit // 16))  # 64 at the common limit of 1024
    # A connection is accepted on one loop turn, made on the second, and a connection it closes frees its
    # descriptor on the third: until then the accepts of those turns hold descriptors beyond the cap.
    budget = fd_limit - open_descriptors() - BURSTS_IN_FLIGHT * burst - FD_RESERVE
    if budget < 16:
        raise ConfigError(f"the open-file limit ({fd_limit}) leaves room for {max(budget, 0)} connections; raise it "
                          "(ulimit -n)")
    if wanted and wanted > budget:
        logger.warning("max_connections %d does not fit in the open-file limit %d; using %d", wanted, fd_limit, budget)
    return (min(wanted, budget) if wanted else budget), burst


class ConnectionGuard:
    """Read deadlines and the connection cap of one server: its `protocol` class tells it about each connection."""

    def __init__(self, max_connections: int, read_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.open: set[Any] = set()
        self.reading: OrderedDict[Any, asyncio.TimerHandle] = OrderedDict()  # oldest first, with its deadline
        self.counts = {"timed_out": 0, "made_room": 0, "refused": 0, "accept_failed": 0}
        self._reported = dict(self.counts)
        self._last_log = float("-inf")
        self._last_accept_eviction = float("-inf")
        self.protocol = self._protocol_class()

    # --- what the protocol reports ------------------------------------------------------------------------------
    def opened(self, conn: Any) -> None:
        self.open.add(conn)
        self.start_reading(conn)
        if len(self.open) > self.max_connections:
            oldest = next(iter(self.reading))
            if oldest is conn and len(self.reading) == 1:  # every other connection is being answered
                self.close(conn, NO_ROOM, "refused")
            else:
                self.close(oldest, b"", "made_room")

    def start_reading(self, conn: Any) -> None:
        """The connection waits for (the rest of) a request: it is closed unless that arrives in time."""
        self.stop_reading(conn)
        loop = asyncio.get_running_loop()
        self.reading[conn] = loop.call_later(self.read_timeout_s, self._timed_out, conn)

    def stop_reading(self, conn: Any) -> None:
        timer = self.reading.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def closed(self, conn: Any) -> None:
        self.stop_reading(conn)
        self.open.discard(conn)

    # --- closing ------------------------------------------------------------------------------------------------
    def close(self, conn: Any, answer: bytes, reason: str) -> None:
        """Close a connection (its descriptor is freed on the loop's next turn), writing `answer` first."""
        self.closed(conn)
        self.counts[reason] += 1
        if not conn.transport.is_closing():
            if answer:
                conn.transport.write(answer)
            conn.transport.close()
        self.report()

    def _timed_out(self, conn: Any) -> None:
        self.reading.pop(conn, None)
        # A 408 where part of a request came in (an idle keep-alive connection just closes).
        self.close(conn, TOO_SLOW if conn.received else b"", "timed_out")

    def make_room(self, n: int) -> None:
        """Close the n oldest connections still sending their request."""
        for conn in list(self.reading)[:n]:
            self.close(conn, b"", "made_room")

    # --- the log --------------------------------------------------------------------------------------------------
    def report(self, force: bool = False) -> None:
        """Log what the guard did since its last line, at most once per LOG_EVERY_S."""
        now = asyncio.get_running_loop().time()
        if not force and now - self._last_log < LOG_EVERY_S:
            return
        new = {k: v - self._reported[k] for k, v in self.counts.items()}
        if any(new.values()):
            logger.warning(
                "connection guard (%d open, cap %d): closed %d that sent no complete request within %g s and %d to "
                "make room, refused %d, %d accepts failed for lack of file descriptors",
                len(self.open), self.max_connections, new["timed_out"], self.read_timeout_s, new["made_room"],
                new["refused"], new["accept_failed"])
        self._reported = dict(self.counts)
        self._last_log = now

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's error handler: a failed accept (out of descriptors) is counted, frees room and is
        logged with the others, not once per attempt with a traceback; other errors go to the default handler."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            self.counts["accept_failed"] += 1
            if loop.time() - self._last_accept_eviction >= 1.0:  # asyncio retries accepting after 1 s
                self._last_accept_eviction = loop.time()
                self.make_room(ACCEPT_BURST // 4)
            self.report()
            return
        loop.default_exception_handler(context)

    # --- the protocol -------------------------------------------------------------------------------------------
    def _protocol_class(self) -> type[H11Protocol]:
        guard = self

        class GuardedH11Protocol(H11Protocol):
            """uvicorn's h11 protocol, reporting each connection's state to the guard."""

            received = False  # whether any byte of the current request came in

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                guard.opened(self)

            def request_in(self) -> bool:
                """Whether a whole request is in and being answered."""
                cycle = self.cycle
                return cycle is not None and not cycle.more_body and not cycle.response_complete

            def data_received(self, data: bytes) -> None:
                self.received = True
                super().data_received(data)
                if self.request_in():
                    guard.stop_reading(self)

            def on_response_complete(self) -> None:
                self.received = False
                super().on_response_complete()  # may start a pipelined request that is already in
                if self.transport.is_closing():
                    return
                if self.request_in():
                    guard.stop_reading(self)
                else:
                    guard.start_reading(self)  # waits for the next request

            def connection_lost(self, exc: Exception | None) -> None:
                guard.closed(self)
                super().connection_lost(exc)

        return GuardedH11Protocol


class GuardedServer(Server):
    """uvicorn's Server with the guard's handler for the event loop's errors (failed accepts). Its config's backlog
    is the accept burst (asyncio accepts that many per loop turn); the kernel's queue is set to LISTEN_BACKLOG
    after, so bursts of new clients wait there instead of being turned away."""

    def __init__(self, config: Any, guard: ConnectionGuard) -> None:
        super().__init__(config)
        self.guard = guard

    async def startup(self, sockets: list | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.guard.exception_handler)
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for sock in server.sockets or []:
                with sock.dup() as listening:  # the same socket: listen() only resizes its queue
                    listening.listen(max(LISTEN_BACKLOG, self.config.backlog))

    async def shutdown(self, sockets: list | None = None) -> None:
        self.guard.report(force=True)
        await super().shutdown(sockets)


__all__ = ["ConnectionGuard", "GuardedServer", "connection_budget", "raise_open_file_limit"]
