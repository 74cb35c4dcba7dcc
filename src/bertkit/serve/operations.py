"""Operating the service: Prometheus metrics at /metrics (`ServiceMetrics`, `Observe`), JSON access logs, an API key
(`ApiKeyCheck`), and /docs as Swagger UI served from the fastapi-offline package, nothing fetched from a CDN
(`add_docs`).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
OTHER_ROUTE = "other"  # the route label of a path the service does not have (its own label per path is unbounded)
CLIENT_LEFT = 499  # the status counted for a request whose client left before it was answered (nginx's number)


class BatcherCollector:
    """The batchers' own counts, read at each scrape: queue depth, texts computed, batches, texts dropped."""

    def __init__(self, batchers: dict[str, Any]) -> None:
        self.batchers = batchers

    def collect(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily("bertkit_queue_depth", "Texts waiting for the model, by endpoint",
                                   labels=["endpoint"])
        texts = CounterMetricFamily("bertkit_texts", "Texts (or a task's examples) the model computed, by endpoint",
                                    labels=["endpoint"])
        batches = CounterMetricFamily("bertkit_batches", "Forward passes run, by endpoint", labels=["endpoint"])
        dropped = CounterMetricFamily("bertkit_texts_dropped", "Queued texts never computed because their request "
                                      "had timed out or its client had left, by endpoint", labels=["endpoint"])
        for name, b in self.batchers.items():
            queued.add_metric([name], b.queue.qsize() if b.queue is not None else 0)
            texts.add_metric([name], b.items)
            batches.add_metric([name], b.batches)
            dropped.add_metric([name], b.skipped)
        yield from (queued, texts, batches, dropped)


class ServiceMetrics:
    """The service's metrics in a registry of its own (two apps in one process do not share counts)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("bertkit_requests", "HTTP requests answered, by route, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("bertkit_request_duration_seconds", "Time from a request's arrival to its answer, "
                                 "by route", ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("bertkit_batch_size", "Texts (or a task's examples) per forward pass, by "
                                    "endpoint", ["endpoint"], buckets=BATCH_BUCKETS, registry=self.registry)
        self.tokens = Counter("bertkit_tokens", "Tokens the model read (with [CLS] and [SEP]), by endpoint",
                              ["endpoint"], registry=self.registry)

    def watch(self, batchers: dict[str, Any]) -> None:
        """Report these batchers' queue depth and counts at each scrape."""
        self.registry.register(BatcherCollector(batchers))  # type: ignore[arg-type]

    def batch_observer(self, endpoint: str) -> Callable[[int], None]:
        """What a batcher calls with each batch's size."""
        return self.batch_size.labels(endpoint).observe

    def count_tokens(self, endpoint: str, n: int) -> None:
        self.tokens.labels(endpoint).inc(n)

    def scrape(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)


def json_access_log() -> Callable[[dict[str, Any]], None]:
    """Writes one JSON object per line on stderr, through the logger 'bertkit.serve.access' (its own handler, so
    each line is the object alone, whatever else configures logging)."""
    log = logging.getLogger("bertkit.serve.access")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
        log.setLevel(logging.INFO)
    return lambda entry: log.info(json.dumps(entry, ensure_ascii=False))


class Observe:
    """ASGI middleware: every request counted by route, method and status and timed (ServiceMetrics), and, with
    `log`, one entry per request: time, method, route, status, latency_ms, texts (what the endpoint sent to the
    model; 0 for others) and the client's address. `routes()` gives the service's paths: any other is counted as
    'other'."""

    def __init__(self, app: Any, metrics: ServiceMetrics, routes: Callable[[], Iterable[str]],
                 log: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.app, self.metrics, self.routes, self.log = app, metrics, routes, log
        self._known: frozenset[str] | None = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = CLIENT_LEFT

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status = 500 if status == CLIENT_LEFT else status
            raise
        finally:
            self._record(scope, status, time.perf_counter() - start)

    def _record(self, scope: dict, status: int, seconds: float) -> None:
        if self._known is None:
            self._known = frozenset(self.routes())
        route = scope["path"] if scope["path"] in self._known else OTHER_ROUTE
        self.metrics.requests.labels(route, scope["method"], str(status)).inc()
        self.metrics.latency.labels(route).observe(seconds)
        if self.log is not None:
            self.log({"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                      "method": scope["method"], "route": route, "status": status,
                      "latency_ms": round(1000 * seconds, 3), "texts": (scope.get("state") or {}).get("texts", 0),
                      "client": (scope.get("client") or ("",))[0]})


async def send_detail(send: Callable, status: int, detail: str, *headers: tuple[bytes, bytes]) -> None:
    """Answer a request from an ASGI middleware, before the app sees it: `status` and {"detail": detail}."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})


def is_open(path: str, open_routes: Iterable[str]) -> bool:
    """Whether `path` needs no key: one of `open_routes`, or under one ('/docs' opens '/docs/swagger-ui.css'); '/'
    opens only itself."""
    return any(path == p or (p.rstrip("/") and path.startswith(p.rstrip("/") + "/")) for p in open_routes)


class ApiKeyCheck:
    """ASGI middleware: 401 for a request to a path not open (`is_open`) without `Authorization: Bearer KEY`,
    the key compared in constant time (hmac.compare_digest), before the body is read."""

    def __init__(self, app: Any, key: str, open_routes: Iterable[str]) -> None:
        self.app, self.key, self.open = app, key.encode(), list(open_routes)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or is_open(scope["path"], self.open):
            return await self.app(scope, receive, send)
        scheme, _, token = dict(scope.get("headers") or []).get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key):
            return await self.app(scope, receive, send)
        detail = ("the API key sent is not this service's" if scheme.lower() == b"bearer" and token.strip() else
                  "this service needs an API key: send the header `Authorization: Bearer KEY` with the key it was "
                  "started with (--api-key or BERTKIT_API_KEY)")
        await send_detail(send, 401, detail, (b"www-authenticate", b"Bearer"))


def bearer_in_schema(app: Any, open_routes: Iterable[str]) -> None:
    """Declare the bearer key in the app's OpenAPI document (Swagger UI's Authorize button), on every operation
    whose path is not open."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = made()
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            for path, operations in schema.get("paths", {}).items():
                if not is_open(path, open_routes):
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


DOCS_ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon.png": "image/png"}


def add_docs(app: Any, title: str) -> None:
    """GET /docs: Swagger UI over /openapi.json, its files served from the fastapi-offline package under /docs/;
    without that package, a page saying where the API is described and tried instead."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, Response

    try:
        from importlib import resources

        assets = resources.files("fastapi_offline") / "static"
    except ModuleNotFoundError:
        assets = None
    if assets is None or not all((assets / name).is_file() for name in DOCS_ASSETS):
        page = ("<!DOCTYPE html><title>bertkit serve: API</title><p>Swagger UI is not installed here (it comes with "
                "the <code>serve</code> extra: <code>pip install 'bertkit[serve]'</code>). The API is described at "
                "<a href=\"/openapi.json\">/openapi.json</a>, and each endpoint can be tried on "
                "<a href=\"/\">the service's page</a>.</p>")

        @app.get("/docs", include_in_schema=False)
        async def docs_pointer() -> HTMLResponse:
            return HTMLResponse(page)
        return

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{title}: API",
                                   swagger_js_url="/docs/swagger-ui-bundle.js", swagger_css_url="/docs/swagger-ui.css",
                                   swagger_favicon_url="/docs/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None})  # no badge from validator.swagger.io

    def asset_route(name: str, media_type: str) -> None:
        async def asset() -> Response:
            return Response((assets / name).read_bytes(), media_type=media_type,
                            headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})
        app.get(f"/docs/{name}", include_in_schema=False)(asset)

    for name, media_type in DOCS_ASSETS.items():
        asset_route(name, media_type)
