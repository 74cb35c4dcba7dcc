"""The HTTP service: FastAPI over one model folder, with the endpoints its head supports.

/health always; /embed for every folder (the encoder under any head); /fill-mask for masked-LM heads; /classify,
/ner, /qa for sequence-classification, token-classification (fine-tuned or frozen-feature) and question-answering
heads. /classify reads the logits as the head's problem type says (softmax, per-label sigmoid, or a regression
value); /qa answers a span of the context by character offsets, decoded as evaluation decodes it. Each endpoint's
work runs through a DynamicBatcher, so concurrent requests share forward passes; each request's items are
prepared (tokenized, checked) one by one, so a bad request gets its own 4xx and never fails the ones batched
with it. A request field the endpoint does not know is a 422 naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import torch
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model

from bertkit.errors import BertkitError, DataError, TokenizerError
from bertkit.inference.encoder import Encoders
from bertkit.inference.fill_mask import MASK, mask_ids, predict_masks
from bertkit.inference.pooling import POOLINGS, folder_defaults, pad_batch
from bertkit.inference.precision import DEFAULT_PRECISION
from bertkit.model import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from bertkit.model.folder import open_folder
from bertkit.model.heads import BertForFrozenTokenClassification
from bertkit.runtime import release_free_memory
from bertkit.serve.batching import DynamicBatcher, ItemError, QueueFull, RequestTimeout, prepare_each
from bertkit.serve.settings import ServeSettings
from bertkit.tasks.base import run_model
from bertkit.tasks.classification import ClassificationTask, input_columns, read_logits, request_example
from bertkit.tasks.ner import NerTask, TaggedSentence, word_tags
from bertkit.tasks.qa import context_offsets, window_spans

MAX_ANSWER_TOKENS = 30  # longest answer span considered, as in the SQuAD reference
logger = logging.getLogger("bertkit.serve")


def declared_size(scope: dict) -> int | None:
    """The body size an HTTP request's Content-Length declares (None without a usable one)."""
    declared = dict(scope.get("headers") or []).get(b"content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, from Content-Length or while it streams in, before
    anything parses it (a 150 MB JSON body used to be read whole first)."""

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
        body = json.dumps({"detail": f"request body of {size} bytes or more; the limit is {self.limit}"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


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


# --- request and response bodies -------------------------------------------------------------------------------
class RequestBody(BaseModel):
    """A request body: a field the endpoint does not know is a 422 naming it (a misspelt option, e.g. "poolng",
    must not be ignored silently)."""

    model_config = ConfigDict(extra="forbid")


def embed_request() -> type[RequestBody]:
    """/embed's request body, its pooling choices those of bertkit.inference.pooling.POOLINGS as they are now
    (create_app builds it, so a mode registered before the app is created is served)."""
    return create_model("EmbedRequest", __base__=RequestBody,
                        texts=(list[str], Field(..., description="texts to embed")),
                        pooling=(Literal[tuple(POOLINGS)] | None, Field(  # type: ignore[valid-type]
                            None, description="the folder's pooling when left out")),
                        normalize=(bool | None, None))


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]
    dimension: int


class FillMaskRequest(RequestBody):
    texts: list[str] = Field(..., description="texts with at least one [MASK] each")
    top_k: int = Field(5, ge=1, le=100)


class TokenScore(BaseModel):
    token: str
    token_id: int
    probability: float


class FillMaskResponse(BaseModel):
    results: list[list[list[TokenScore]]] = Field(..., description="per text, per [MASK], the top-k tokens")


class ClassifyRequest(RequestBody):
    texts: list[str] | None = Field(None, description="the texts (left out for a model that writes its text from "
                                                      "columns with a template)")
    pairs: list[str] | None = Field(None, description="second segments, one per text")
    # bool listed so that JSON true reaches the task's reader as true (refused in a numeric column), not as 1.0
    columns: list[dict[str, str | bool | float | int | None]] | None = Field(
        None, description="one object per example, column name -> value, for a model trained with a template or "
                          "numeric/categorical columns: read as the training file's rows were")


class Classification(BaseModel):
    label: str | None = Field(..., description="the most probable label (None for a regression head)")
    probability: float | None = Field(..., description="its probability (softmax; sigmoid for multi-label)")
    probabilities: dict[str, float] = Field(..., description="every label's probability")
    labels: list[str] | None = Field(None, description="multi-label heads: every label with probability > 0.5")
    value: float | None = Field(None, description="regression heads: the predicted number")


class ClassifyResponse(BaseModel):
    results: list[Classification]


class NerRequest(RequestBody):
    texts: list[str]


class TaggedToken(BaseModel):
    token: str = Field(..., description="a word as the basic tokenizer splits (and, for uncased models, lowercases) it")
    label: str
    probability: float


class NerResponse(BaseModel):
    results: list[list[TaggedToken]]


class QARequest(RequestBody):
    question: str
    context: str


class QAResponse(BaseModel):
    answer: str = Field(..., description="a span of the context, context[start_char:end_char]")
    score: float = Field(..., description="start + end logit of the span")
    start_char: int
    end_char: int


# --- the model-side functions the batchers run -------------------------------------------------------------------
class Predictor:
    """The folder's model, tokenizer and encoder, and one batch function per endpoint."""

    def __init__(self, folder: str | Path, precision: str = DEFAULT_PRECISION) -> None:
        opened = open_folder(folder)  # a hand-written config.json naming only its task gets the task's head
        self.folder, self.model, self.tokenizer = opened.path, opened.model, opened.tokenizer
        # The folder's own embedding settings (pooling, normalisation, max length), as bertkit.load(folder) reads them.
        self.encoders = Encoders(self.model, self.tokenizer, folder_defaults(opened.path))
        self.encoder = self.encoders.get(precision, device="cpu")
        self.config = self.model.config
        self.max_length = self.config.max_position_embeddings
        self.labels = self.config.label_names or [f"LABEL_{i}" for i in range(self.config.num_labels)]
        # A classifier trained with a template or non-text columns reads requests as its task read the files.
        self.settings = {**(self.config.task_settings or {}), "label_names": self.labels}
        self.columns = input_columns(self.settings) if self.config.task == ClassificationTask.name else []

    @property
    def head(self) -> str:
        return type(self.model).__name__

    def supports(self, endpoint: str) -> bool:
        """Whether this folder's head can answer `endpoint`."""
        return {
            "embed": True,
            "fill-mask": getattr(getattr(self.model, "cls", None), "predictions", None) is not None,
            "classify": isinstance(self.model, BertForSequenceClassification),
            "ner": isinstance(self.model, (BertForTokenClassification, BertForFrozenTokenClassification)),
            "qa": isinstance(self.model, BertForQuestionAnswering),
        }[endpoint]

    def embed(self, items: list[tuple[str, str | None, bool | None]]) -> list[list[float]]:
        """items: (text, pooling, normalize); grouped by options so each group is one encode call."""
        out: list[list[float]] = [[] for _ in items]
        groups: dict[tuple[str | None, bool | None], list[int]] = {}
        for i, (_, pooling, normalize) in enumerate(items):
            groups.setdefault((pooling, normalize), []).append(i)
        for (pooling, normalize), rows in groups.items():
            vectors = self.encoder.encode([items[i][0] for i in rows], pooling=pooling, normalize=normalize)
            for i, v in zip(rows, vectors.tolist()):
                out[i] = v
        return out

    def fill_mask(self, items: list[tuple[str, int]]) -> list[list[list[dict[str, Any]]] | Exception]:
        """items: (text, top_k); a text with a [MASK] beyond the model's window gets its ConfigError."""
        def compute(rows: list[tuple[list[int], int]]) -> list[list[list[dict[str, Any]]]]:
            results = predict_masks(self.model, self.tokenizer, [r for r, _ in rows], max(k for _, k in rows))
            return [[[vars(p) for p in mask[:k]] for mask in per_text] for per_text, (_, k) in zip(results, rows)]

        return prepare_each(items, lambda item: (mask_ids(self.tokenizer, item[0], self.max_length), item[1]),
                            compute)

    def _forward(self, texts: list[str], pairs: list[str | None], truncation: bool | str = True) -> tuple[Any, list[Any]]:
        encodings = [self.tokenizer.encode(t, pair=p, max_length=self.max_length, truncation=truncation)
                     for t, p in zip(texts, pairs)]
        return self._run(encodings), encodings

    def _run(self, encodings: list[Any]) -> Any:
        """The model's output on the encodings, padded into one batch."""
        batch = pad_batch([e.input_ids for e in encodings], [e.token_type_ids for e in encodings],
                          self.tokenizer.pad_token_id)
        with torch.inference_mode():
            return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def classify_items(self, texts: list[str] | None, pairs: list[str] | None,
                       columns: list[dict[str, Any]] | None) -> list[tuple[str, str | None, Any]]:
        """A /classify request's items (text, pair, example or None), checked; ValueError for a bad request.
        A model with columns gets the example its task makes of them (template text, standardised numbers and
        category ids with the training data's statistics, saved in the folder)."""
        if not self.columns:
            if columns is not None:
                raise ValueError("this model reads no columns besides the text; send texts (and pairs) only")
            if texts is None:
                raise ValueError("texts is required")
            return [(t, p, None) for t, p in zip(texts, pairs or [None] * len(texts))]
        if columns is None:
            raise ValueError(f"this model reads the columns {self.columns}: send columns, one object per example")
        if self.settings.get("template") and texts is not None:
            raise ValueError("this model writes its text from columns with its template "
                             f"({self.settings['template']!r}); send columns, not texts")
        texts = texts if texts is not None else [None] * len(columns)  # type: ignore[list-item]
        if len(texts) != len(columns):
            raise ValueError(f"columns has {len(columns)} objects, texts has {len(texts)}")
        items = []
        for i, (t, p, c) in enumerate(zip(texts, pairs or [None] * len(texts), columns)):
            try:
                ex = request_example(t, p, c, self.settings, f"columns[{i}]")
            except DataError as e:
                raise ValueError(str(e)) from None
            items.append((ex.text, ex.pair, ex))
        return items

    def classify(self, items: list[tuple[str, str | None, Any]]) -> list[dict[str, Any]]:
        """items: (text, pair or None, the task's example or None) -> as the head's problem type reads its logits:
        a softmax over the labels, a sigmoid per label (multi-label), or the number itself (regression)."""
        if self.columns:  # the task's features, as evaluate and predict make them
            task = ClassificationTask()
            features = task.features([ex for _, _, ex in items], self.tokenizer, self.settings, training=False)
            logits = [out["logits"] for out in run_model(self.model, features, task.collator(self.tokenizer),
                                                         len(features), ("logits",), False, task.model_inputs)]
        else:
            out, _ = self._forward([t for t, _, _ in items], [p for _, p, _ in items])
            logits = list(out.logits.float().cpu().numpy())
        return [read_logits(row, self.config.problem_type, self.labels) for row in logits]

    def ner(self, items: list[str]) -> list[list[dict[str, Any]]]:
        """The basic tokenizer's words of each text with their tags, decoded as `bertkit predict` decodes them
        (tasks.ner: the tag at each word's first piece) plus that tag's probability."""
        task, settings = NerTask(), {"max_length": self.max_length, "label_names": self.labels}
        sentences = [TaggedSentence(0, [w for w, _, _ in self.tokenizer.words(text)], None) for text in items]
        features = task.features(sentences, self.tokenizer, settings, training=False)
        with torch.inference_mode():
            outputs = task.outputs(self.model, features, len(features), self.tokenizer)
        return [[{"token": w, "label": tag, "probability": p}
                 for w, (tag, p) in zip(s.words, word_tags(f, out["logits"], self.labels))]
                for s, f, out in zip(sentences, features, outputs)]

    def qa_encoding(self, question: str, context: str) -> Any:
        """The (question, context) pair's encoding, the context cut to fit; ValueError saying which part is at
        fault when no piece of the context fits (a question too long) or the context has no text at all."""
        try:
            enc = self.tokenizer.encode(question, pair=context, max_length=self.max_length, truncation="only_second")
        except TokenizerError:
            n = len(self.tokenizer.tokenize(question))
            raise ValueError(f"the question has {n} word pieces; with the context's it must fit in "
                             f"{self.max_length} (3 go to [CLS] and [SEP]): send a shorter question") from None
        if not any(o is not None for o in context_offsets(enc)):
            raise ValueError("the context has no text left once tokenized (only spaces, control or zero-width "
                             "characters?): send a context with words in it")
        return enc

    def qa(self, items: list[tuple[str, str]]) -> list[dict[str, Any] | Exception]:
        """The best span of the context, decoded as `bertkit evaluate` decodes it (tasks.qa.window_spans): a start
        <= end within MAX_ANSWER_TOKENS, the answer cut from the context by the tokens' character offsets."""
        def compute(prepared: list[tuple[Any, str]]) -> list[dict[str, Any]]:
            encodings = [enc for enc, _ in prepared]
            out = self._run(encodings)
            results = []
            for row, (enc, context) in enumerate(prepared):
                offsets = context_offsets(enc)
                n = len(offsets)
                start, end = out.start_logits[row, :n].float().numpy(), out.end_logits[row, :n].float().numpy()
                spans = window_spans(start, end, offsets, [o is not None for o in offsets], n_best=n,
                                     max_answer_length=MAX_ANSWER_TOKENS)
                score, a, b = max(spans)  # never empty: the encoding holds a piece of the context
                results.append({"answer": context[a:b], "score": score, "start_char": a, "end_char": b})
            return results

        return prepare_each(items, lambda item: (self.qa_encoding(*item), item[1]), compute)


def item_chars(item: Any) -> int:
    """The characters of one batcher item (its strings): the cost that bounds a batch."""
    parts = item if isinstance(item, tuple) else (item,)
    return sum(len(x) for x in parts if isinstance(x, str))


# --- the app ---------------------------------------------------------------------------------------------------
def create_app(folder: str | Path, settings: ServeSettings | None = None) -> FastAPI:
    """A FastAPI app serving `folder`; batchers start and stop with the app's lifespan."""
    settings = settings or ServeSettings()
    settings.validate()
    predictor = Predictor(folder, settings.precision)
    print(f"bertkit serve: /embed precision {predictor.encoder.precision} ({predictor.encoder.precision_reason})",
          file=sys.stderr, flush=True)
    delay = settings.max_batch_delay_ms / 1000.0
    batchers = {
        name: DynamicBatcher(fn, settings.max_batch_size, delay, max_queue=settings.max_queue, cost=item_chars,
                             max_batch_cost=settings.max_batch_chars, on_idle=release_free_memory)
        for name, fn in (("embed", predictor.embed), ("fill-mask", predictor.fill_mask),
                         ("classify", predictor.classify), ("ner", predictor.ner), ("qa", predictor.qa))
        if predictor.supports(name)
    }

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for b in batchers.values():
            b.start()
        # One forward pass before the first client: torch's one-time set-up (about 0.3 s) is not a client's wait.
        await asyncio.get_running_loop().run_in_executor(batchers["embed"].executor, predictor.embed,
                                                         [("warm-up", None, None)])
        yield
        for b in batchers.values():  # graceful: queued work finishes before the threads stop
            await b.stop()

    app = FastAPI(title="bertkit", description=f"BERT inference over {Path(folder).name} ({predictor.head})",
                  version="0.1.0", lifespan=lifespan)
    app.state.predictor = predictor
    app.state.batchers = batchers
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)

    async def run(endpoint: str, items: list, request: Request, field: str | None = "texts") -> list:
        """The endpoint's items through its batcher, within the limits; 503 when the queue is full or time runs out,
        400 naming `field[i]` when item i's input is refused (500 for a failure that is not the input's)."""
        try:
            return await batcher(endpoint).submit(items, settings.request_timeout_s, request.is_disconnected)
        except QueueFull as e:
            raise HTTPException(503, f"busy: {e}; retry later", headers={"Retry-After": "1"}) from None
        except RequestTimeout as e:
            raise HTTPException(503, f"{e}; the request was dropped", headers={"Retry-After": "1"}) from None
        except ItemError as e:
            where = f"{field}[{e.index}]" if field else "the request"
            if isinstance(e.cause, (BertkitError, ValueError)):
                raise HTTPException(400, f"{where}: {e.cause}" if field else str(e.cause)) from None
            # Not the input's fault: logged with its traceback, answered 500 as an HTTPException so that the
            # connection stays open (an exception escaping the app makes uvicorn close it).
            logger.error("/%s failed on %s", endpoint, where, exc_info=e.cause)
            raise HTTPException(500, f"internal error on {where}: {type(e.cause).__name__}: {e.cause}") from None

    def check_texts(texts: list[str]) -> None:
        if not texts:
            raise HTTPException(400, "texts is empty; send at least one text")
        if len(texts) > settings.max_request_texts:
            raise HTTPException(413, f"{len(texts)} texts in one request; the limit is {settings.max_request_texts}")
        for i, t in enumerate(texts):
            if len(t) > settings.max_text_chars:
                raise HTTPException(413, f"texts[{i}] has {len(t)} characters; the limit is "
                                         f"{settings.max_text_chars}")
            if not t.strip():
                raise HTTPException(400, f"texts[{i}] is empty")

    def batcher(endpoint: str) -> DynamicBatcher:
        if endpoint not in batchers:
            raise HTTPException(404, f"this model folder ({predictor.head}) has no head for /{endpoint}; "
                                     f"available: {', '.join('/' + e for e in batchers)}")
        return batchers[endpoint]

    @app.exception_handler(ValueError)
    @app.exception_handler(BertkitError)
    async def input_error(request: Request, exc: Exception) -> JSONResponse:
        """A request the library refuses (ValueError, or a BertkitError naming the input): 400 with the reason."""
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": predictor.head, "endpoints": sorted(batchers),
                "precision": predictor.encoder.precision,
                "batches": {k: b.batches for k, b in batchers.items()}}

    async def embed(req: Any, request: Request) -> EmbedResponse:
        batcher("embed")
        check_texts(req.texts)
        vectors = await run("embed", [(t, req.pooling, req.normalize) for t in req.texts], request)
        return EmbedResponse(embeddings=vectors, dimension=predictor.config.hidden_size)

    embed.__annotations__["req"] = embed_request()  # built now, from the pooling modes registered now
    app.post("/embed", response_model=EmbedResponse)(embed)

    @app.post("/fill-mask", response_model=FillMaskResponse)
    async def fill_mask(req: FillMaskRequest, request: Request) -> FillMaskResponse:
        batcher("fill-mask")
        check_texts(req.texts)
        masks = [t.count(MASK) for t in req.texts]
        for i, n in enumerate(masks):
            if not n:
                raise HTTPException(400, f"texts[{i}] has no {MASK}; write {MASK} where a word should be predicted")
            if n > settings.max_masks_per_text:
                raise HTTPException(413, f"texts[{i}] has {n} {MASK}s; the limit is {settings.max_masks_per_text} "
                                         "per text")
        if sum(masks) * req.top_k > settings.max_fill_mask_predictions:
            raise HTTPException(413, f"{sum(masks)} {MASK}s x top_k {req.top_k} = {sum(masks) * req.top_k} "
                                     f"predictions; the limit is {settings.max_fill_mask_predictions} per request "
                                     "(send fewer masks or a smaller top_k)")
        return FillMaskResponse(results=await run("fill-mask", [(t, req.top_k) for t in req.texts], request))

    @app.post("/classify", response_model=ClassifyResponse)
    async def classify(req: ClassifyRequest, request: Request) -> ClassifyResponse:
        batcher("classify")
        items = predictor.classify_items(req.texts, req.pairs, req.columns)  # ValueError -> 400
        check_texts([t for t, _, _ in items])
        if req.pairs is not None and len(req.pairs) != len(items):
            raise HTTPException(400, f"pairs has {len(req.pairs)} entries, texts has {len(items)}")
        return ClassifyResponse(results=await run("classify", items, request))

    @app.post("/ner", response_model=NerResponse)
    async def ner(req: NerRequest, request: Request) -> NerResponse:
        batcher("ner")
        check_texts(req.texts)
        return NerResponse(results=await run("ner", req.texts, request))

    @app.post("/qa", response_model=QAResponse)
    async def qa(req: QARequest, request: Request) -> QAResponse:
        batcher("qa")
        check_texts([req.question, req.context])
        return QAResponse(**(await run("qa", [(req.question, req.context)], request, field=None))[0])

    return app


def build_server(folder: str | Path, host: str = "127.0.0.1", port: int = 8000,
                 settings: ServeSettings | None = None) -> Any:
    """A uvicorn server for `folder` with guarded connections (serve.connections: a read deadline, and a cap below
    the open-file limit, whose soft value is first raised to the hard one); `.run()` serves until interrupted."""
    import uvicorn

    from bertkit.serve.connections import ConnectionGuard, GuardedServer, connection_budget, raise_open_file_limit

    settings = settings or ServeSettings()
    fd_limit = raise_open_file_limit()
    app = create_app(folder, settings)
    cap, burst = connection_budget(fd_limit, settings.max_connections)  # counted with the model's files open
    guard = ConnectionGuard(cap, settings.read_timeout_s)
    print(f"bertkit serve: at most {cap} connections (open-file limit {fd_limit}), each given "
          f"{settings.read_timeout_s:g} s to send its request", file=sys.stderr, flush=True)
    config = uvicorn.Config(WholeBodyFirst(app, settings.max_body_bytes), host=host, port=port, log_level="info",
                            timeout_graceful_shutdown=10, http=guard.protocol, backlog=burst)
    return GuardedServer(config, guard)


def serve(folder: str | Path, host: str = "127.0.0.1", port: int = 8000, settings: ServeSettings | None = None) -> None:
    """Run the app on uvicorn until interrupted (SIGINT/SIGTERM shut down gracefully)."""
    build_server(folder, host, port, settings).run()
