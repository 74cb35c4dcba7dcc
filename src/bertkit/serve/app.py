"""The HTTP service: FastAPI over one model folder, with the endpoints its head supports.

/health always; /embed for every folder (the encoder under any head); /fill-mask for masked-LM heads; /search with
an index (ServeSettings.index: a `bertkit index` folder of this model, checked when the app is created); and the
endpoint of the task that serves the folder's head (/classify, /ner, /qa, /choose, or a plug-in task's), built
from the task's serving object (`bertkit.tasks.base.Serving`), which reads a request as `bertkit predict` reads a
file (with the settings saved in the folder) and answers what `predict` decodes. Each endpoint's work runs through
a DynamicBatcher, so concurrent requests share forward passes; each request's items are prepared one by one, so a
bad request gets its own 4xx and never fails the ones batched with it. A request field the endpoint does not know,
or a value not of its type (`true` or "3" for a number), is a 422 naming it.

Before any work, every endpoint works out the most its answer can take (`bertkit.answers`) and refuses a request
whose answer could exceed max_response_bytes (413); every answer's numbers are checked finite before it is sent (a
NaN is a 500 naming it, never `null`). Only requests whose Host header is an IP address, localhost or a name of
allowed_hosts are answered (a guard against DNS rebinding), and the page's Content-Security-Policy lets it run its
own script and style only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import hashlib
import ipaddress
import json
import os
import re
import logging
import sys
import typing
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field, create_model

from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, check_finite, json_bytes
from bertkit.dataclass_io import check_value, field_docs, field_spec
from bertkit.errors import BertkitError, CheckpointError
from bertkit.inference.encoder import Encoders
from bertkit.inference.fill_mask import mask_ids, predict_masks
from bertkit.inference.options import FillMaskOptions
from bertkit.inference.pooling import POOLINGS, folder_defaults
from bertkit.inference.precision import DEFAULT_PRECISION
from bertkit.runtime import release_free_memory
from bertkit.serve.batching import DynamicBatcher, ItemError, QueueFull, RequestTimeout, prepare_each
from bertkit.serve.bodies import RequestBody
from bertkit.serve.operations import ApiKeyCheck, Observe, ServiceMetrics, add_docs, bearer_in_schema, \
    json_access_log, send_detail
from bertkit.serve.protocols import add_protocol_routes, service_version
from bertkit.serve.settings import ServeSettings
from bertkit.model.folder import open_folder
from bertkit.tasks import TASKS, Serving, folder_serving

logger = logging.getLogger("bertkit.serve")
API_KEY_VARIABLE = "BERTKIT_API_KEY"
CLOSE = (b"connection", b"close")  # the header of a refusal that ends the connection


def declared_size(scope: dict) -> int | None:
    """The body size an HTTP request's Content-Length declares (None without a usable one)."""
    declared = dict(scope.get("headers") or []).get(b"content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, from Content-Length or while it streams in, before
    anything parses it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = declared_size(scope)
        if declared is not None and declared > self.limit:
            return await self._refuse(send, declared)
        seen, refused = 0, False

        async def limited() -> dict:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:  # answer now; the app sees the client gone and its answer is dropped
                    refused = True
                    await self._refuse(send, seen)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: dict) -> None:
            if not refused:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not refused:  # after our 413, the app's complaint about the cut-off body is expected
                raise

    async def _refuse(self, send: Callable, size: int) -> None:
        await send_detail(send, 413, f"request body of {size} bytes or more; the limit is {self.limit}", CLOSE)


class WholeBodyFirst:
    """ASGI wrapper (build_server puts it around the app): the app starts once the request's body has all arrived,
    so a client that stalls in its body and leaves, or is closed for being slow, costs no work of the app. Bodies
    declared or found larger than `limit` go to the app as they come (its BodyLimit answers 413)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        declared = declared_size(scope) if scope["type"] == "http" else None
        if scope["type"] != "http" or (declared is not None and declared > self.limit):
            return await self.app(scope, receive, send)
        received: list[dict] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            received.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body", False) or size > self.limit:
                break

        async def replay() -> dict:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


def host_name(header: str) -> str:
    """The name or address of a Host header, without its port and trailing dot, lower-cased ('[::1]:80' -> '::1')."""
    if header.startswith("["):
        return header[1:header.find("]")].lower() if "]" in header else header.lower()
    name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".").lower()


def is_address(name: str) -> bool:
    """Whether `name` is an IP address (which no DNS answer can rebind)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(name: str, allowed: list[str]) -> bool:
    """An IP address, localhost (RFC 6761: always this machine) or a name of `allowed` ("*.example.org" allows
    the subdomains of example.org, "*" every name)."""
    if is_address(name) or name == "localhost" or name.endswith(".localhost"):
        return True
    for entry in (a.rstrip(".").lower() for a in allowed):
        if entry == "*" or entry == name or (entry.startswith("*.") and name.endswith(entry[1:])):
            return True
    return False


class HostCheck:
    """ASGI middleware: 400 for a request whose Host header is not an address, localhost or a name of `allowed`,
    before anything else: a page of another site whose name its owner made resolve to 127.0.0.1 (DNS rebinding)
    reaches a loopback service as a same-origin page, but sends its own name as the Host."""

    def __init__(self, app: Any, allowed: list[str]) -> None:
        self.app, self.allowed = app, list(allowed)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        # Starlette's TestClient calls the app in process (its client is named, not an address a server could
        # report): no browser there to rebind.
        if scope["type"] != "http" or (scope.get("client") or ("",))[0] == "testclient":
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if header and host_allowed(host_name(header), self.allowed):
            return await self.app(scope, receive, send)
        await send_detail(send, 400, f"Host {header!r} is not a name of this service: it answers an IP address, "
                          "localhost, or a name given to --allowed-hosts (a guard against DNS rebinding)"
                          if header else "no Host header", CLOSE)


# --- request and response bodies -------------------------------------------------------------------------------
TRUNCATION_SIDES = ("right", "left", "Right", "Left")  # TEI's spellings: lower case, and its schema's


def embed_request() -> type[RequestBody]:
    """/embed's request body (TEI's `inputs` or bertkit's `texts`), its pooling choices those of POOLINGS as they are
    when create_app builds it, so a mode registered before the app is created is served."""
    return create_model("EmbedRequest", __base__=RequestBody,
                        inputs=(str | list[str] | None, Field(None, description=(
                            "TEI's shape: a text or a list of texts; the answer is a list of vectors"))),
                        texts=(list[str] | None, Field(None, description=(
                            "bertkit's shape: the texts; the answer is {embeddings, dimension}"))),
                        pooling=(Literal[tuple(POOLINGS)] | None, Field(  # type: ignore[valid-type]
                            None, description="the folder's pooling when left out")),
                        normalize=(bool | None, Field(None, description=(
                            "unit-length vectors; when left out, true for inputs (as TEI), the folder's for texts"))),
                        truncate=(bool | None, Field(None, description=(
                            "cut a text longer than the model's max input length (GET /info) instead of refusing it "
                            "with 413; left out: the service's --auto-truncate"))),
                        truncation_direction=(Literal[TRUNCATION_SIDES], Field(  # type: ignore[valid-type]
                            "right", description="right keeps a long text's start, left its end")))


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]
    dimension: int


class TooLong(BertkitError):
    """A text longer than the model reads, in a request that did not ask to cut it (answered 413)."""


def embed_texts(req: Any) -> tuple[list[str], str]:
    """The texts of an /embed request and the field they came in (`inputs` or `texts`); a 422 unless exactly one
    is given."""
    if (req.inputs is None) == (req.texts is None):
        raise HTTPException(422, "send either `inputs` (a text or a list of texts, as text-embeddings-inference takes "
                                 "them) or `texts` (a list, bertkit's own shape); this request has " +
                                 ("both" if req.inputs is not None else "neither"))
    if req.texts is not None:
        return req.texts, "texts"
    return ([req.inputs] if isinstance(req.inputs, str) else req.inputs), "inputs"


def spec_field(cls: type, name: str, **kwargs: Any) -> Any:
    """A request field that takes the values of field `name` of config `cls` (its default and its spec's bounds):
    the server's schema and its checks, the Python API and the CLI read one declaration."""
    declared = field_spec(cls, name)
    bounds = {k: v for k in ("ge", "gt", "le", "lt") if declared and (v := getattr(declared, k)) is not None}
    default = next(f.default for f in dataclasses.fields(cls) if f.name == name)
    return Field(default, **bounds, **kwargs)


class FillMaskRequest(RequestBody):
    texts: list[str] = Field(..., description="texts with at least one mask token each (the model's own: [MASK] "
                                              "for BERT, <mask> for RoBERTa)")
    top_k: int = spec_field(FillMaskOptions, "top_k", description="tokens per mask token, most probable first")


class TokenScore(BaseModel):
    token: str
    token_id: int
    probability: float


class FillMaskResponse(BaseModel):
    results: list[list[list[TokenScore]]] = Field(..., description="per text, per mask token, the top-k tokens")


class SearchHit(BaseModel):
    rank: int
    row: int = Field(..., description="the row's number in the embeddings (0-based)")
    id: str | int = Field(..., description="the row's id (its id field, else its line number)")
    score: float = Field(..., description="inner product (cosine for normalised embeddings)")
    text: str | None


class SearchResponse(BaseModel):
    results: list[list[SearchHit]] = Field(..., description="per query, its hits, best first")


def search_request(max_top_k: int) -> type[RequestBody]:
    """/search's request body, top_k bounded by ServeSettings.max_top_k."""
    return create_model("SearchRequest", __base__=RequestBody,
                        queries=(list[str], Field(..., description="the queries")),
                        top_k=(int, Field(min(10, max_top_k), ge=1, le=max_top_k, description="hits per query")))


# --- the model-side functions the batchers run -------------------------------------------------------------------
class Predictor:
    """The folder's model, tokenizer and encoder; the batch functions of /embed and /fill-mask, and of the endpoint
    of the task that serves the folder's head (`bertkit.tasks.serving_task`), with the settings `predict` uses."""

    def __init__(self, folder: str | Path, precision: str = DEFAULT_PRECISION) -> None:
        opened = open_folder(folder)  # a hand-written config.json naming only its task gets the task's head
        self.folder, self.model, self.tokenizer = opened.path, opened.model, opened.tokenizer
        # The folder's own embedding settings (pooling, normalisation, max length), as bertkit.load(folder) reads them.
        self.encoders = Encoders(self.model, self.tokenizer, folder_defaults(opened.path))
        self.encoder = self.encoders.get(precision, device="cpu")
        self.config = self.model.config
        self.max_length = self.config.max_sequence_length
        self.serving = folder_serving(self.model, self.tokenizer)  # with the task settings saved in the folder
        self.task = self.serving.task if self.serving is not None else None
        self.settings = self.serving.settings if self.serving is not None else None

    @property
    def head(self) -> str:
        return type(self.model).__name__

    @property
    def masked_lm(self) -> bool:
        """Whether the head predicts masked tokens (/fill-mask)."""
        return getattr(getattr(self.model, "cls", None), "predictions", None) is not None

    def count_tokens(self, endpoint: str, n: int) -> None:
        """Told the tokens each batch of an endpoint read (the service's metrics replace it)."""

    def token_ids(self, text: str, truncate: str | None) -> list[int]:
        """A text's token ids with [CLS] and [SEP], as the encoder reads them: over its max_length, cut on the
        `truncate` side ("right" keeps the start, as `encode` does; "left" the end), or, with None, a TooLong naming
        the limit."""
        ids = self.tokenizer.encode(text, truncation=False).input_ids
        limit = self.encoder.max_length
        if len(ids) <= limit:
            return ids
        if truncate is None:
            raise TooLong(f"{len(ids)} tokens; this model reads at most {limit} (its max input length): send "
                          "\"truncate\": true to cut it, or a shorter text")
        body = ids[1:-1]
        kept = body[:limit - 2] if truncate == "right" else body[len(body) - (limit - 2):]
        return [ids[0], *kept, ids[-1]]

    def embed(self, items: list[tuple[str, str | None, bool | None, str | None]]) -> list:
        """items: (text, pooling, normalize, truncate: None, "right" or "left"); each answered (vector, tokens), or
        refused alone (TooLong); grouped by options so each group is one encode call."""
        def compute(prepared: list[tuple[list[int], str | None, bool | None]]) -> list[tuple[list[float], int]]:
            out: list = [None] * len(prepared)
            groups: dict[tuple[str | None, bool | None], list[int]] = {}
            for i, (_, pooling, normalize) in enumerate(prepared):
                groups.setdefault((pooling, normalize), []).append(i)
            for (pooling, normalize), rows in groups.items():
                vectors = self.encoder.encode_ids([prepared[i][0] for i in rows], pooling=pooling, normalize=normalize)
                for i, v in zip(rows, vectors.tolist()):
                    out[i] = (v, len(prepared[i][0]))
            self.count_tokens("embed", sum(len(ids) for ids, _, _ in prepared))
            return out

        return prepare_each(items, lambda item: (self.token_ids(item[0], item[3]), item[1], item[2]), compute)

    def open_index(self, folder: str | Path, most_hits: int) -> None:
        """Serve /search over a `bertkit index` folder: its queries embedded by this folder's model with the
        index's settings; a ConfigError when the index was built with another model or other settings. Keeps the
        bytes of its `most_hits` longest rows, summed longest first (`hit_bytes`), to bound answers."""
        from bertkit.inference.index import VectorIndex, query_encoder

        self.index = VectorIndex(folder)
        self.search_encoder = query_encoder(self.index, self.folder, device="cpu", encoders=self.encoders)
        self.longest_rows = np.cumsum(longest_rows(self.index, most_hits))

    def hit_bytes(self, k: int) -> int:
        """The most JSON k hits of one query can take: the k longest rows' ids and texts, and each hit's rank, row
        and score."""
        k = min(k, len(self.index))
        kept = min(k, len(self.longest_rows))  # beyond the rows kept, each at most the longest row
        rows = (int(self.longest_rows[kept - 1]) if kept else 0) + (k - kept) * int(self.longest_rows[0])
        return rows + k * (OBJECT_BYTES + 3 * NUMBER_BYTES) + OBJECT_BYTES

    @functools.cached_property
    def token_bytes(self) -> int:
        """The JSON of /fill-mask's longest answer object: the vocabulary's longest token, its id and probability."""
        vocab = getattr(self.tokenizer, "vocab", None) or {"x" * 200: 0}  # a tokenizer without a vocab dict: 200
        return OBJECT_BYTES + 2 * NUMBER_BYTES + max(json_bytes(t) for t in vocab)

    def search(self, items: list[tuple[str, int]]) -> list[list[dict[str, Any]]]:
        """items: (query, top_k); one encode call and one index search for the batch."""
        from bertkit.inference.index import embed_queries

        vectors = embed_queries(self.index, self.search_encoder, [q for q, _ in items])
        scores, rows = self.index.search(vectors, max(k for _, k in items))
        return [hits[:k] for hits, (_, k) in zip(self.index.results(scores, rows), items)]

    def fill_mask(self, items: list[tuple[str, int]]) -> list[list[list[dict[str, Any]]] | Exception]:
        """items: (text, top_k); a text with a [MASK] beyond the model's window gets its ConfigError."""
        def compute(rows: list[tuple[list[int], int]]) -> list[list[list[dict[str, Any]]]]:
            self.count_tokens("fill-mask", sum(len(ids) for ids, _ in rows))
            results = predict_masks(self.model, self.tokenizer, [r for r, _ in rows], max(k for _, k in rows))
            return [[[vars(p) for p in mask[:k]] for mask in per_text] for per_text, (_, k) in zip(results, rows)]

        return prepare_each(items, lambda item: (mask_ids(self.tokenizer, item[0], self.max_length), item[1]),
                            compute)

    @functools.cached_property
    def reranks(self) -> bool:
        """Whether the folder is a pair classifier whose score reads as relevance (/rerank): a classifier trained
        on pairs of texts, with no other columns, whose head has one output (a cross-encoder's score) or two labels
        (the second one's probability)."""
        from bertkit.tasks.classification import reranks

        return self.task is not None and self.task.name == "classification" and reranks(self.settings)

    def rerank(self, items: list[tuple[Any, bool]]) -> list:
        """items: (a classification example of the query and one text, whether to cut a pair over the model's
        max_length): each answered as /classify answers it, or refused alone (TooLong) when too long and not cut."""
        def checked(item: tuple[Any, bool]) -> Any:
            example, truncate = item
            limit = self.settings.max_length
            if not truncate and len(self.tokenizer.encode(example.text, example.pair, truncation=False)) > limit:
                raise TooLong(f"more than {limit} tokens with the query; this model reads at most {limit} (its max "
                              "input length): send \"truncate\": true to cut them, or a shorter text")
            return example

        return prepare_each(items, checked, lambda examples: self.task_batch(examples, "rerank"))

    def examples(self, body: dict[str, Any]) -> list:
        """The task's examples of a request body (a dict of its `Serving.request` fields)."""
        assert self.serving is not None
        return self.serving.request_examples(self.serving.request(**body))

    def task_batch(self, examples: list, endpoint: str | None = None) -> list:
        """The task's endpoint on a batch of examples (`Serving.batch`, the path of bertkit.load's task calls and
        `bertkit predict --probabilities` too), its tokens counted."""
        serving = self.serving
        assert serving is not None
        return serving.batch(self.model, examples, lambda flat: self.count_tokens(
            endpoint or serving.endpoint, sum(feature_tokens(f) for f in flat)))


def feature_tokens(feature: Any) -> int:
    """The tokens of one task feature (its input_ids; a multiple-choice feature's, one row per choice)."""
    ids = feature.get("input_ids", []) if isinstance(feature, dict) else []
    return sum(len(row) for row in ids) if ids and isinstance(ids[0], list) else len(ids)


def longest_rows(index: Any, n: int) -> np.ndarray:
    """The bytes of a VectorIndex's n longest rows (their lines of rows.jsonl: the JSON of the id and text a hit
    returns, with spaces the answer does not have), longest first; read from the offsets a million at a time."""
    from bertkit.inference.index import ROWS_FILE

    offsets, rows = index.offsets, len(index.offsets)
    end = os.path.getsize(index.folder / ROWS_FILE)
    best = np.zeros(0, np.int64)
    for start in range(0, rows, 2**20):
        stop = min(start + 2**20, rows)
        bounds = np.append(np.asarray(offsets[start:stop], np.int64), offsets[stop] if stop < rows else end)
        lengths = np.concatenate([best, np.diff(bounds)])
        best = -np.sort(-lengths)[:n] if len(lengths) <= 4 * n else -np.sort(-np.partition(lengths, -n)[-n:])
    return best


def item_chars(item: Any) -> int:
    """The characters of one batcher item (its strings, and those of its lists: a task example's words or
    choices): the cost that bounds a batch."""
    if dataclasses.is_dataclass(item):
        parts: Any = [getattr(item, f.name) for f in dataclasses.fields(item)]
    else:
        parts = item if isinstance(item, tuple) else (item,)
    return sum(len(x) if isinstance(x, str) else sum(len(y) for y in x if isinstance(y, str))
               if isinstance(x, list) else 0 for x in parts)


def schema(cls: type, base: type[BaseModel] = BaseModel) -> type[BaseModel]:
    """The pydantic model of a task's request or response dataclass (`Task.serving`): its fields, their defaults
    and, as descriptions, the docstrings under them."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else ...
        fields[f.name] = (hints[f.name], Field(default, description=docs.get(f.name)))
    return create_model(cls.__name__, __base__=base, **fields)


# --- the app ---------------------------------------------------------------------------------------------------
class Service:
    """What every route shares: the folder's Predictor, the limits of ServeSettings, the metrics, and a
    DynamicBatcher per endpoint this folder has. A route checks its request here, then `run`s its items."""

    def __init__(self, predictor: Predictor, settings: ServeSettings) -> None:
        self.predictor, self.settings, self.metrics = predictor, settings, ServiceMetrics()
        predictor.count_tokens = self.metrics.count_tokens  # type: ignore[method-assign]
        functions: dict[str, Callable] = {"embed": predictor.embed}
        if predictor.masked_lm:
            functions["fill-mask"] = predictor.fill_mask
        if predictor.serving is not None:
            functions[predictor.serving.endpoint] = predictor.task_batch
        if predictor.reranks:
            functions["rerank"] = predictor.rerank
        if settings.index:
            predictor.open_index(settings.index, settings.max_top_k)
            functions["search"] = predictor.search
        self.batchers = {
            name: DynamicBatcher(fn, settings.max_batch_size, settings.max_batch_delay_ms / 1000.0,
                                 max_queue=settings.max_queue, cost=item_chars, max_batch_cost=settings.max_batch_chars,
                                 on_idle=release_free_memory, on_batch=self.metrics.batch_observer(name))
            for name, fn in functions.items()
        }
        self.metrics.watch(self.batchers)

    def batcher(self, endpoint: str) -> DynamicBatcher:
        """The endpoint's batcher; a 404 naming the endpoints this folder has."""
        if endpoint == "search" and endpoint not in self.batchers:
            raise HTTPException(404, "no head for /search: this service has no index (bertkit serve --index DIR, "
                                     "a `bertkit index` folder built with this model)")
        if endpoint not in self.batchers:
            raise HTTPException(404, f"this model folder ({self.predictor.head}) has no head for /{endpoint}; "
                                     f"available: {', '.join('/' + e for e in self.batchers)}")
        return self.batchers[endpoint]

    async def run(self, endpoint: str, items: list, request: Request, field: str | None = "texts") -> list:
        """The endpoint's items through its batcher, within the limits; 503 when the queue is full or time runs out,
        400 naming `field[i]` when item i's input is refused (500 for a failure that is not the input's, such as
        a model or index that holds NaN: every number of the results is checked finite here, for every endpoint)."""
        request.state.texts = len(items)  # the access log's
        try:
            results = await self.batcher(endpoint).submit(items, self.settings.request_timeout_s,
                                                          request.is_disconnected)
            check_finite(results, f"/{endpoint} answer")
            return results
        except CheckpointError as e:  # the model's or the index's fault, named
            logger.error("/%s: %s", endpoint, e)
            raise HTTPException(500, str(e)) from None
        except QueueFull as e:
            raise HTTPException(503, f"busy: {e}; retry later", headers={"Retry-After": "1"}) from None
        except RequestTimeout as e:
            raise HTTPException(503, f"{e}; the request was dropped", headers={"Retry-After": "1"}) from None
        except ItemError as e:
            where = f"{field}[{e.index}]" if field else "the request"
            if isinstance(e.cause, TooLong):
                raise HTTPException(413, f"{where} has {e.cause}") from None
            if isinstance(e.cause, (BertkitError, ValueError)) and not isinstance(e.cause, CheckpointError):
                raise HTTPException(400, f"{where}: {e.cause}" if field else str(e.cause)) from None
            # Not the input's fault: logged with its traceback, answered 500 as an HTTPException so that the
            # connection stays open (an exception escaping the app makes uvicorn close it).
            logger.error("/%s failed on %s", endpoint, where, exc_info=e.cause)
            raise HTTPException(500, f"internal error on {where}: {type(e.cause).__name__}: {e.cause}") from None

    def check_texts(self, texts: list[str], field: str = "texts") -> None:
        """400 for no text or an empty one, 413 for more texts or longer ones than the limits."""
        limits = self.settings
        if not texts:
            raise HTTPException(400, f"{field} is empty; send at least one text")
        if len(texts) > limits.max_request_texts:
            raise HTTPException(413, f"{len(texts)} {field} in one request; the limit is {limits.max_request_texts}")
        for i, t in enumerate(texts):
            if len(t) > limits.max_text_chars:
                raise HTTPException(413, f"{field}[{i}] has {len(t)} characters; the limit is {limits.max_text_chars}")
            if not t.strip():
                raise HTTPException(400, f"{field}[{i}] is empty")

    def check_answer(self, size: int, what: str) -> None:
        """413 before any work when a request's answer could take more than max_response_bytes; `what` says what
        makes it that large (the one bound of every endpoint: each works out its `size` from the request)."""
        if size > self.settings.max_response_bytes:
            raise HTTPException(413, f"the answer to this request could take {size:,} bytes ({what}); the limit is "
                                     f"{self.settings.max_response_bytes:,} per request: ask for less in one request")

    def truncation(self, asked: bool | None, side: str = "right") -> str | None:
        """The side an over-long text is cut on (None: refused), as a request's `truncate` or the service says."""
        return side.lower() if (self.settings.auto_truncate if asked is None else asked) else None

    async def embed_vectors(self, texts: list[str], field: str, request: Request, pooling: str | None = None,
                            normalize: bool | None = None, truncate: str | None = None) -> list[tuple[list, int]]:
        """/embed's and /v1/embeddings' work: the limits on the texts, then each text's (vector, tokens)."""
        self.batcher("embed")
        self.check_texts(texts, field)
        return await self.run("embed", [(t, pooling, normalize, truncate) for t in texts], request, field=field)


def create_app(folder: str | Path, settings: ServeSettings | None = None) -> FastAPI:
    """A FastAPI app serving `folder`; batchers start and stop with the app's lifespan."""
    settings = settings or ServeSettings()
    settings.validate()
    api_key = settings.api_key or api_key_from_environment()
    predictor = Predictor(folder, settings.precision)
    print(f"bertkit serve: /embed precision {predictor.encoder.precision} ({predictor.encoder.precision_reason})",
          file=sys.stderr, flush=True)
    service = Service(predictor, settings)
    batchers, metrics = service.batchers, service.metrics

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for b in batchers.values():
            b.start()
        # One forward pass before the first client: torch's one-time set-up (about 0.3 s) is not a client's wait.
        await asyncio.get_running_loop().run_in_executor(batchers["embed"].executor, predictor.embed,
                                                         [("warm-up", None, None, "right")])
        yield
        for b in batchers.values():  # graceful: queued work finishes before the threads stop
            await b.stop()

    app = FastAPI(title="bertkit", description=f"BERT inference over {Path(folder).name} ({predictor.head})",
                  version=service_version(), lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.predictor, app.state.batchers, app.state.metrics = predictor, batchers, metrics
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if api_key:  # checked before the body is read
        app.add_middleware(ApiKeyCheck, key=api_key, open_routes=settings.open_routes)
        bearer_in_schema(app, settings.open_routes)
        print(f"bertkit serve: every request needs the API key, but to {', '.join(settings.open_routes) or 'none'}",
              file=sys.stderr, flush=True)
    app.add_middleware(HostCheck, allowed=list(settings.allowed_hosts))
    app.add_middleware(Observe, metrics=metrics, routes=lambda: [r.path for r in app.routes],  # the outermost
                       log=json_access_log() if settings.access_log == "json" else None)

    @app.exception_handler(ValueError)
    @app.exception_handler(BertkitError)
    async def input_error(request: Request, exc: Exception) -> JSONResponse:
        """A request the library refuses (ValueError, or a BertkitError naming the input): 400 with the reason."""
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        """The service's page: a panel per endpoint this model has, to try each in a browser."""
        html = service_page()
        return HTMLResponse(html, headers={"Content-Security-Policy": page_policy(html),
                                           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": predictor.head, "endpoints": sorted(batchers), "api_key": bool(api_key),
                "precision": predictor.encoder.precision,
                "batches": {k: b.batches for k, b in batchers.items()}}

    async def embed(req: Any, request: Request) -> EmbedResponse | list[list[float]]:
        texts, field = embed_texts(req)
        dim = predictor.config.hidden_size
        service.check_answer(len(texts) * (dim * NUMBER_BYTES + OBJECT_BYTES) + OBJECT_BYTES,
                             f"{len(texts)} texts x {dim} numbers")
        normalize = req.normalize if req.normalize is not None or field == "texts" else True  # TEI's default
        answers = await service.embed_vectors(texts, field, request, req.pooling, normalize,
                                              service.truncation(req.truncate, req.truncation_direction))
        vectors = [v for v, _ in answers]
        return vectors if field == "inputs" else EmbedResponse(embeddings=vectors, dimension=dim)

    embed.__annotations__["req"] = embed_request()  # built now, from the pooling modes registered now
    app.post("/embed", response_model=EmbedResponse | list[list[float]])(embed)

    @app.post("/fill-mask", response_model=FillMaskResponse, include_in_schema="fill-mask" in batchers)
    async def fill_mask(req: FillMaskRequest, request: Request) -> FillMaskResponse:
        service.batcher("fill-mask")
        service.check_texts(req.texts)
        mask = predictor.tokenizer.mask_token  # [MASK], <mask>: the folder's own
        masks = [t.count(mask) for t in req.texts]
        for i, n in enumerate(masks):
            if not n:
                raise HTTPException(400, f"texts[{i}] has no {mask}; write {mask} where a word should be predicted")
            if n > settings.max_masks_per_text:
                raise HTTPException(413, f"texts[{i}] has {n} {mask}s; the limit is {settings.max_masks_per_text} "
                                         "per text")
        if sum(masks) * req.top_k > settings.max_fill_mask_predictions:
            raise HTTPException(413, f"{sum(masks)} {mask}s x top_k {req.top_k} = {sum(masks) * req.top_k} "
                                     f"predictions; the limit is {settings.max_fill_mask_predictions} per request "
                                     "(send fewer masks or a smaller top_k)")
        k = min(req.top_k, predictor.config.vocab_size)
        service.check_answer(sum(masks) * (k * predictor.token_bytes + OBJECT_BYTES) + len(masks) * OBJECT_BYTES,
                             f"{sum(masks)} {mask}s x top_k {k}, each token up to {predictor.token_bytes} bytes")
        return FillMaskResponse(results=await service.run("fill-mask", [(t, req.top_k) for t in req.texts], request))

    async def search(req: Any, request: Request) -> SearchResponse:
        service.batcher("search")  # 404 without --index
        service.check_texts(req.queries, "queries")
        k = min(req.top_k, len(predictor.index))
        service.check_answer(len(req.queries) * predictor.hit_bytes(k) + OBJECT_BYTES,
                             f"{len(req.queries)} queries x top_k {k}: hits whose rows take up to "
                             f"{predictor.hit_bytes(k):,} bytes per query")
        return SearchResponse(results=await service.run("search", [(q, req.top_k) for q in req.queries], request,
                                                        field="queries"))

    search.__annotations__["req"] = search_request(settings.max_top_k)
    app.post("/search", response_model=SearchResponse, include_in_schema="search" in batchers)(search)

    for declared in task_endpoints():  # every task's route; the one serving this folder's head has a batcher
        add_task_route(app, declared, service)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def scrape() -> Response:
        """The service's metrics in the Prometheus text format."""
        return Response(metrics.scrape(), media_type=metrics.content_type)

    add_protocol_routes(app, service, str(folder))
    add_docs(app, f"bertkit serve {Path(folder).name}")
    return app


def api_key_from_environment() -> str | None:
    """BERTKIT_API_KEY's value, checked as ServeSettings.api_key is (None when unset or empty)."""
    key = os.environ.get(API_KEY_VARIABLE) or None
    return check_value(ServeSettings, "api_key", key, API_KEY_VARIABLE) if key is not None else None


# The page's first inputs for the built-in endpoints; a task's come from its serving declaration.
PAGE_EXAMPLES: dict[str, dict[str, Any]] = {
    "embed": {"texts": ["A cat sat on the mat.", "Stock markets fell sharply today."]},
    "fill-mask": {"texts": ["Paris is the [MASK] of France."], "top_k": 5},
    "search": {"queries": ["a question about the corpus"], "top_k": 5},
    "rerank": {"query": "Where do lobsters live?",
               "texts": ["Lobsters live on the sea floor.", "A cat sat on the mat."], "return_text": True},
    "tokenize": {"inputs": "Lobsters live on the sea floor."},
    "v1/embeddings": {"input": ["A cat sat on the mat."], "model": "bertkit"},
}


def service_page() -> str:
    """The bundled page (serve/page/index.html: plain HTML and JavaScript, nothing fetched from elsewhere) with
    every endpoint's example request in it."""
    from importlib import resources

    examples = {**PAGE_EXAMPLES, **{s.endpoint: s.examples[0] for s in task_endpoints() if s.examples}}
    html = (resources.files("bertkit.serve") / "page" / "index.html").read_text(encoding="utf-8")
    return html.replace("__EXAMPLES__", json.dumps(examples).replace("</", "<\\/"))


def page_policy(html: str) -> str:
    """The page's Content-Security-Policy: its own inline script and style (by their sha256, so no other script
    runs, however a string got into the page), requests to this service only, no frames, forms or base URL."""
    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.S)  # the bare tags: not the JSON data block
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(x.encode()).digest()).decode()}'" for x in found)

    return (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; connect-src 'self'; "
            "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def task_endpoints() -> list[type[Serving]]:
    """The serving classes of every registered task (one endpoint each: `register_task` refuses a clash)."""
    return [cls.serving for cls in TASKS.values() if cls.serving is not None]


def add_task_route(app: FastAPI, served: type[Serving], service: Service) -> None:
    """POST /<endpoint> from a task's serving class: the request schema (an unknown field is a 422), then the
    task's examples of the request (ValueError or a BertkitError: 400), the limits on its texts and on its answer
    (`Serving.answer_bytes`), the batcher running the task's batch function, and the task's response. A folder whose
    head the task does not serve gets a 404 naming the endpoints it has."""
    response = schema(served.response)

    async def endpoint(req: Any, request: Request) -> Any:
        service.batcher(served.endpoint)
        serving = service.predictor.serving
        body = served.request(**req.model_dump())
        examples = serving.request_examples(body)
        service.check_texts(serving.request_texts(body, examples))
        sizes = [serving.answer_bytes(example) for example in examples]
        declared = None not in sizes
        if declared:
            service.check_answer(sum(sizes) + OBJECT_BYTES, f"{len(examples)} examples")
        answer = serving.respond(body, await service.run(served.endpoint, examples, request, field=served.item_field))
        if not declared:  # a plug-in task that declares no bound: its answer is measured once computed
            service.check_answer(len(response.model_validate(answer).model_dump_json()),
                                 f"task {serving.task.name!r} declares no answer_bytes, so its answer was measured")
        return answer

    endpoint.__annotations__["req"] = schema(served.request, RequestBody)
    app.post(f"/{served.endpoint}", response_model=response,
             include_in_schema=type(service.predictor.serving) is served)(endpoint)


def build_server(folder: str | Path, host: str = "127.0.0.1", port: int = 8000,
                 settings: ServeSettings | None = None) -> Any:
    """A uvicorn server for `folder` with guarded connections (serve.connections: a read deadline, and a cap below
    the open-file limit, whose soft value is first raised to the hard one); `.run()` serves until interrupted."""
    import uvicorn

    from bertkit.serve.connections import ConnectionGuard, GuardedServer, connection_budget, raise_open_file_limit

    settings = settings or ServeSettings()
    if not is_address(host_name(host)):  # bound to a name: that name is the service's too
        settings = dataclasses.replace(settings, allowed_hosts=[*settings.allowed_hosts, host])
    fd_limit = raise_open_file_limit()
    app = create_app(folder, settings)
    cap, burst = connection_budget(fd_limit, settings.max_connections)  # counted with the model's files open
    guard = ConnectionGuard(cap, settings.read_timeout_s)
    print(f"bertkit serve: at most {cap} connections (open-file limit {fd_limit}), each given "
          f"{settings.read_timeout_s:g} s to send its request", file=sys.stderr, flush=True)
    config = uvicorn.Config(WholeBodyFirst(app, settings.max_body_bytes), host=host, port=port, log_level="info",
                            timeout_graceful_shutdown=10, http=guard.protocol, backlog=burst,
                            access_log=settings.access_log == "text")  # json: the app's own lines (Observe)
    return GuardedServer(config, guard)


def serve(folder: str | Path, host: str = "127.0.0.1", port: int = 8000, settings: ServeSettings | None = None) -> None:
    """Run the app on uvicorn until interrupted (SIGINT/SIGTERM shut down gracefully)."""
    build_server(folder, host, port, settings).run()
