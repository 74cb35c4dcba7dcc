"""`ServeSettings`: the service's limits and batching, a plain dataclass (no web framework imported), so the CLI
builds its options from it without loading fastapi."""

from __future__ import annotations

from dataclasses import dataclass, field

from bertkit.errors import ConfigError
from bertkit.inference.precision import DEFAULT_PRECISION, PRECISIONS


@dataclass
class ServeSettings:
    """Limits and batching of the service (the `bertkit serve` options mirror these one to one)."""

    max_batch_size: int = 32
    """Texts per forward pass at most."""
    max_batch_delay_ms: float = 5.0
    """How long a batch waits to fill."""
    max_request_texts: int = 64
    """Texts in one request at most (413 above)."""
    max_text_chars: int = 10000
    """Characters in one text at most (413 above)."""
    max_body_bytes: int = 4 * 2**20
    """Request body size at most, checked before the body is read or parsed (413 above)."""
    max_queue: int = 1024
    """Texts waiting for the model at most, over all requests; a request that would overflow it gets 503 at once."""
    request_timeout_s: float = 60.0
    """A request not answered within this gets 503, and its texts still queued are dropped."""
    precision: str = DEFAULT_PRECISION
    """/embed's precision (bertkit.inference.precision.PRECISIONS): auto is bf16 where this machine has bf16 matrix
    units, else fp32; fp32, bf16 and int8 force one."""
    max_batch_chars: int = 16000
    """Characters per forward pass at most (the first text always fits): bounds how long one batch holds the
    model, so a request that arrives behind long texts waits for at most one such batch."""

    index: str | None = None
    """A `bertkit index` folder built with this model folder: adds /search (top-k ids, scores and texts); the
    index's model identity and embedding settings are checked when the service starts."""
    max_top_k: int = 100
    """/search: hits per query at most (422 above)."""

    max_masks_per_text: int = 80
    """/fill-mask: [MASK]s in one text at most (413 above); 80 is the reference's max_predictions_per_seq for
    512-token sequences."""
    max_fill_mask_predictions: int = 20000
    """/fill-mask: masks x top_k over one request's texts at most (413 above, before computing): bounds the
    response (about 70 bytes of JSON per prediction) however the masks are spread."""
    read_timeout_s: float = 10.0
    """A connection whose request head and body have not all arrived this many seconds after it opened (or after
    its previous answer) is closed: slow or stalled senders cannot hold connections (slowloris)."""
    max_connections: int = 0
    """Open connections at most; when full, a new connection closes the oldest one still sending its request
    (or waiting idle), never one whose request is being answered. 0: as many as the open-file limit leaves room
    for (the soft limit is first raised to the hard one)."""
    max_response_bytes: int = 16 * 2**20
    """The largest answer one request may get, in bytes of JSON: every endpoint works out the most its answer can
    take from the request (texts x dimensions, [MASK]s x top_k, queries x top_k x the index's longest rows, a
    task's words or labels) and refuses a larger one (413) before computing anything."""
    allowed_hosts: list[str] = field(default_factory=list)
    """Names the service answers under besides IP addresses and localhost (and the name it is bound to), checked
    against each request's Host header: "*.example.org" for its subdomains, "*" for any name. Other names get 400,
    so a page whose name was made to resolve to this machine (DNS rebinding) cannot use a loopback service."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that is out of range."""
        for name in ("max_batch_size", "max_request_texts", "max_text_chars", "max_body_bytes", "max_queue",
                     "max_batch_chars", "max_masks_per_text", "max_fill_mask_predictions", "max_top_k",
                     "max_response_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ServeSettings.{name} = {getattr(self, name)!r}: expected an integer >= 1")
        if self.max_connections < 0:
            raise ConfigError(f"ServeSettings.max_connections = {self.max_connections!r}: expected an integer >= 0 "
                              "(0: from the open-file limit)")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"ServeSettings.precision = {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if not self.request_timeout_s > 0 or not self.read_timeout_s > 0 or self.max_batch_delay_ms < 0:
            raise ConfigError("ServeSettings: request_timeout_s and read_timeout_s must be > 0 and "
                              "max_batch_delay_ms >= 0")
