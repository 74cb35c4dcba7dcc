"""`ServeSettings`: the service's limits and batching, a plain dataclass (no web framework imported), so the CLI
builds its options from it without loading fastapi."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.dataclass_io import Config, field_of, spec
from bertkit.inference.options import DEFAULT_PRECISION, EncodeOptions

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# An allowed Host: '*', or a host name, optionally '*.' before it for its subdomains (no scheme, port or path).
HOST_PATTERN = (rf"\*|(?:\*\.)?{_LABEL}(?:\.{_LABEL})*", "'*', a host name, or '*.' and a name (no scheme or port)")
# An API key: printable ASCII without spaces (it travels in a header), long enough not to be guessed.
API_KEY_PATTERN = (r"[!-~]{16,}", "at least 16 printable ASCII characters, no spaces (e.g. `openssl rand -hex 16`)")
ROUTE_PATTERN = (r"/[A-Za-z0-9._~/-]*", "a path of this service, such as /health")
ACCESS_LOG_FORMATS = ("text", "json", "off")


@dataclass
class ServeAddress(Config):
    """Where the service listens (`bertkit serve --host --port`)."""

    host: str = spec("127.0.0.1")
    """The address to bind: 127.0.0.1 (this machine only), 0.0.0.0 (every interface), or a host name."""
    port: int = spec(8000, ge=0, le=65535, why="a TCP port; 0 lets the system choose")
    """The TCP port."""


@dataclass
class ServeSettings(Config):
    """Limits and batching of the service (the `bertkit serve` options mirror these one to one)."""

    max_batch_size: int = spec(32, ge=1, le=4096)
    """Texts per forward pass at most."""
    max_batch_delay_ms: float = spec(5.0, ge=0, le=10_000)
    """How long a batch waits to fill."""
    max_request_texts: int = spec(64, ge=1, le=100_000)
    """Texts in one request at most (413 above)."""
    max_text_chars: int = spec(10000, ge=1, le=10**8)
    """Characters in one text at most (413 above)."""
    max_body_bytes: int = spec(4 * 2**20, ge=1, le=2**31)
    """Request body size at most, checked before the body is read or parsed (413 above)."""
    max_queue: int = spec(1024, ge=1, le=10**7)
    """Texts waiting for the model at most, over all requests; a request that would overflow it gets 503 at once."""
    request_timeout_s: float = spec(60.0, gt=0, le=86_400)
    """A request not answered within this gets 503, and its texts still queued are dropped."""
    precision: str = field_of(EncodeOptions, "precision", DEFAULT_PRECISION)
    """/embed's precision (bertkit.inference.precision.PRECISIONS): auto is bf16 where this machine has bf16 matrix
    units, else fp32; fp32, bf16 and int8 force one."""
    max_batch_chars: int = spec(16000, ge=1, le=10**9)
    """Characters per forward pass at most (the first text always fits): bounds how long one batch holds the
    model, so a request that arrives behind long texts waits for at most one such batch."""

    index: str | None = spec(None)
    """A `bertkit index` folder built with this model folder: adds /search (top-k ids, scores and texts); the
    index's model identity and embedding settings are checked when the service starts."""
    max_top_k: int = spec(100, ge=1, le=100_000)
    """/search: hits per query at most (422 above)."""

    max_masks_per_text: int = spec(80, ge=1, le=65535)
    """/fill-mask: mask tokens in one text at most (413 above); 80 is the reference's max_predictions_per_seq for
    512-token sequences."""
    max_fill_mask_predictions: int = spec(20000, ge=1, le=10**8)
    """/fill-mask: masks x top_k over one request's texts at most (413 above, before computing): bounds the
    response (about 70 bytes of JSON per prediction) however the masks are spread."""
    read_timeout_s: float = spec(10.0, gt=0, le=86_400)
    """A connection whose request head and body have not all arrived this many seconds after it opened (or after
    its previous answer) is closed: slow or stalled senders cannot hold connections (slowloris)."""
    max_connections: int = spec(0, ge=0, le=10**7)
    """Open connections at most; when full, a new connection closes the oldest one still sending its request
    (or waiting idle), never one whose request is being answered. 0: as many as the open-file limit leaves room
    for (the soft limit is first raised to the hard one)."""
    max_response_bytes: int = spec(16 * 2**20, ge=1024, le=2**31)
    """The largest answer one request may get, in bytes of JSON: every endpoint works out the most its answer can
    take from the request (texts x dimensions, [MASK]s x top_k, queries x top_k x the index's longest rows, a
    task's words or labels) and refuses a larger one (413) before computing anything."""
    allowed_hosts: list[str] = spec(default_factory=list, empty=True, pattern=HOST_PATTERN[0], meaning=HOST_PATTERN[1])
    """Names the service answers under besides IP addresses and localhost (and the name it is bound to), checked
    against each request's Host header: "*.example.org" for its subdomains, "*" for any name. Other names get 400,
    so a page whose name was made to resolve to this machine (DNS rebinding) cannot use a loopback service."""

    api_key: str | None = spec(None, pattern=API_KEY_PATTERN[0], meaning=API_KEY_PATTERN[1])
    """A key every request must bring as `Authorization: Bearer KEY` (401 otherwise), except those to open_routes;
    compared in constant time. Unset: the environment variable BERTKIT_API_KEY, else no key (anyone who can reach
    the port may use the service). Prefer the variable: a command line is visible to every user of the machine."""
    open_routes: list[str] = spec(default_factory=lambda: ["/", "/health", "/metrics"], empty=True,
                                  pattern=ROUTE_PATTERN[0], meaning=ROUTE_PATTERN[1])
    """Paths answered without the API key: the page (its code and example requests only; every request it sends
    carries the key it asks for), a probe's and Prometheus's. A path also opens the paths under it ("/docs" opens
    Swagger UI's files), "/" only itself."""
    auto_truncate: bool = spec(False)
    """Cut a text longer than the model reads (its max input length, in tokens) instead of refusing it (413), for
    requests that do not say: /v1/embeddings (OpenAI's protocol has no field for it), and /embed or /rerank
    without `truncate`."""
    access_log: str = spec("text", choices=ACCESS_LOG_FORMATS)
    """Each request's line on stderr: uvicorn's text line, one JSON object (time, method, route, status,
    latency_ms, texts: the texts or examples it sent to the model), or none."""
