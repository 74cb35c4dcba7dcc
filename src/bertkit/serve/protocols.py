"""The protocols clients already speak, on top of the service's own endpoints: OpenAI's `POST /v1/embeddings` (what
the OpenAI SDK, LangChain and LlamaIndex send), and text-embeddings-inference's (TEI) routes beside /embed (which
takes TEI's `inputs` in app.py): `POST /tokenize`, `POST /rerank` for a classifier fine-tuned on pairs, `GET /info`.

Each route keeps the service's rules: the limits on texts, the answer's size worked out before any work
(`check_answer`), strict request types (an unknown field is a 422 naming it), work through the batchers.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import math
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, json_bytes
from bertkit.serve.bodies import RequestBody
from bertkit.tasks.classification import relevance  # /rerank's score, as Bert.rank's


# --- OpenAI ------------------------------------------------------------------------------------------------------
class OpenAIEmbeddingsRequest(RequestBody):
    input: str | list[str] = Field(..., description="a text or a list of texts (token ids are not taken: bertkit "
                                                    "tokenizes with its own vocabulary)")
    model: str | None = Field(None, description="any name: this service serves one model, which the answer names")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32")
    dimensions: int | None = Field(None, description="the model's dimension (vectors are not shortened)")
    user: str | None = Field(None, description="ignored")


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    embedding: list[float] | str
    index: int


class OpenAIUsage(BaseModel):
    prompt_tokens: int = Field(..., description="the tokens the model read, [CLS] and [SEP] included")
    total_tokens: int


class OpenAIEmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


def base64_vector(vector: list[float]) -> str:
    """A vector as OpenAI's base64 encoding writes it: little-endian float32 bytes."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


# --- TEI -----------------------------------------------------------------------------------------------------------
class TokenizeRequest(RequestBody):
    inputs: str | list[str] = Field(..., description="a text or a list of texts")
    add_special_tokens: bool = Field(True, description="with [CLS] and [SEP], as the model reads a text")


class SimpleToken(BaseModel):
    id: int
    text: str = Field(..., description="the characters of the text the token stands for (a special token: itself)")
    special: bool
    start: int | None = Field(..., description="its first character in the text as sent (null for a special one)")
    stop: int | None = Field(..., description="one past its last character")


class RerankRequest(RequestBody):
    query: str
    texts: list[str] = Field(..., description="the texts to rank against the query")
    raw_scores: bool = Field(False, description="the logit instead of the probability")
    return_text: bool = Field(False, description="each text in its rank")
    truncate: bool | None = Field(None, description=(
        "cut a query and text longer than the model reads instead of refusing them with 413 (pairs are cut "
        "longest first, as at fine-tuning); left out: the service's --auto-truncate"))


class Rank(BaseModel):
    index: int = Field(..., description="the text's place in the request")
    score: float
    text: str | None = None


def service_version() -> str:
    """bertkit's version, as the installed distribution says (what `bertkit --version` prints)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertkit")
    except PackageNotFoundError:  # a checkout run from its src/ without installing it
        return "unknown (not installed)"


def model_type(predictor: Any) -> dict[str, Any]:
    """TEI's model_type: reranker for a pair classifier that /rerank serves, classifier for other sequence
    classifiers, embedding (with its pooling) for the rest (every folder's encoder embeds)."""
    names = (predictor.settings.label_names or []) if predictor.task is not None else []
    if predictor.task is not None and predictor.task.name == "classification":
        labels = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
        return {"reranker" if predictor.reranks else "classifier": labels}
    return {"embedding": {"pooling": predictor.encoder.default_pooling}}


OPENAI_PREFIX = "/v1/"
OPENAI_ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
                      422: "invalid_request_error", 503: "server_overloaded"}


def openai_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error as OpenAI's API writes it ({"error": {"message", "type", "code"}}), whose message its clients show."""
    kind = OPENAI_ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status, headers=headers)


def openai_errors(app: FastAPI) -> None:
    """Errors under /v1/ in OpenAI's shape (elsewhere FastAPI's {"detail": ...}, as before)."""
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith(OPENAI_PREFIX):
            return openai_error(exc.status_code, str(exc.detail), exc.headers)
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        if request.url.path.startswith(OPENAI_PREFIX):
            return openai_error(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
        return await request_validation_exception_handler(request, exc)


def add_protocol_routes(app: FastAPI, service: Any, model_id: str) -> None:
    """POST /v1/embeddings, /tokenize and /rerank (in the schema only for a folder that reranks), GET /info, on the
    app's `bertkit.serve.app.Service` (its predictor, limits and batchers)."""
    predictor, settings = service.predictor, service.settings
    dim = predictor.config.hidden_size
    openai_errors(app)

    @app.post("/v1/embeddings", response_model=OpenAIEmbeddingsResponse)
    async def openai_embeddings(req: OpenAIEmbeddingsRequest, request: Request) -> OpenAIEmbeddingsResponse:
        texts = [req.input] if isinstance(req.input, str) else req.input
        if req.dimensions is not None and req.dimensions != dim:
            raise HTTPException(400, f"dimensions {req.dimensions}: this model's vectors have {dim}; leave it out")
        each = (4 * math.ceil(4 * dim / 3) if req.encoding_format == "base64" else dim * NUMBER_BYTES) + OBJECT_BYTES
        service.check_answer(len(texts) * each + 3 * OBJECT_BYTES + json_bytes(model_id),
                             f"{len(texts)} texts x {dim} numbers ({req.encoding_format})")
        answers = await service.embed_vectors(texts, "input", request, truncate=service.truncation(None))
        encode = base64_vector if req.encoding_format == "base64" else (lambda v: v)
        tokens = sum(n for _, n in answers)
        return OpenAIEmbeddingsResponse(
            data=[OpenAIEmbedding(embedding=encode(v), index=i) for i, (v, _) in enumerate(answers)],
            model=model_id, usage=OpenAIUsage(prompt_tokens=tokens, total_tokens=tokens))

    tok = predictor.tokenizer
    # Per token: its object's keys, three integers (id, start, stop), `special` and a special token's text.
    token_bytes = (OBJECT_BYTES + 3 * (len(str(max(predictor.config.vocab_size, settings.max_text_chars))) + 1) + 6 +
                   max(json_bytes(x) for x in tok.convert_ids_to_tokens([tok.cls_token_id, tok.sep_token_id])))

    @app.post("/tokenize", response_model=list[list[SimpleToken]])
    async def tokenize(req: TokenizeRequest, request: Request) -> list[list[dict[str, Any]]]:
        texts = [req.inputs] if isinstance(req.inputs, str) else req.inputs
        service.check_texts(texts, "inputs")
        service.check_answer(sum(tokenize_bytes(x, token_bytes) for x in texts) + OBJECT_BYTES,
                             f"{len(texts)} texts of up to {max(map(len, texts)):,} characters, a token per "
                             "character at most")
        request.state.texts = len(texts)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: [tokens_of(predictor, x, req.add_special_tokens) for x in texts])

    @app.post("/rerank", response_model=list[Rank], response_model_exclude_none=True,
              include_in_schema=predictor.reranks)
    async def rerank(req: RerankRequest, request: Request) -> list[Rank]:
        service.batcher("rerank")  # 404 for a folder that is not a pair classifier
        from bertkit.tasks.classification import request_example

        service.check_texts([req.query], "query")
        service.check_texts(req.texts)
        service.check_answer(sum(OBJECT_BYTES + 2 * NUMBER_BYTES + (json_bytes(x) if req.return_text else 0)
                                 for x in req.texts) + OBJECT_BYTES, f"{len(req.texts)} ranks")
        examples = [request_example(req.query, x, None, predictor.settings, f"texts[{i}]")
                    for i, x in enumerate(req.texts)]
        cut = service.truncation(req.truncate) is not None
        answers = await service.run("rerank", [(ex, cut) for ex in examples], request)
        names = list(predictor.settings.label_names or [])
        ranks = [Rank(index=i, score=relevance(a, names, req.raw_scores), text=x if req.return_text else None)
                 for i, (a, x) in enumerate(zip(answers, req.texts))]
        return sorted(ranks, key=lambda r: -r.score)

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """The served model and the service's limits: text-embeddings-inference's fields, and bertkit's."""
        limits = {k: v for k, v in dataclasses.asdict(settings).items()
                  if k.startswith("max_") or k.endswith(("_s", "_ms")) or k == "auto_truncate"}
        return {"model_id": model_id, "model_folder": str(predictor.folder), "head": predictor.head,
                "model_type": model_type(predictor), "model_dtype": predictor.encoder.precision,
                "precision": predictor.encoder.precision, "max_input_length": predictor.encoder.max_length,
                "max_client_batch_size": settings.max_request_texts,
                "max_batch_tokens": settings.max_batch_size * predictor.encoder.max_length,
                "max_concurrent_requests": settings.max_queue, "auto_truncate": settings.auto_truncate,
                "tokenization_workers": 1, "endpoints": sorted(app.state.batchers), "limits": limits,
                "version": service_version()}


def tokenize_bytes(text: str, token_bytes: int) -> int:
    """The most JSON /tokenize's answer for `text` can take: a token stands for at least one character (lower-casing
    makes two of only one character, U+0130, whose two tokens may both show it) besides [CLS] and [SEP], each
    `token_bytes` and the characters it stands for."""
    tokens = len(text) + text.count("\u0130") + 2
    return tokens * token_bytes + 2 * json_bytes(text) + OBJECT_BYTES


def tokens_of(predictor: Any, text: str, special: bool) -> list[dict[str, Any]]:
    """TEI's /tokenize answer for one text: each token's id, the characters it stands for, whether it is special,
    and where those characters are in the text as sent (null for a special token)."""
    enc = predictor.tokenizer.encode(text, truncation=False, add_special_tokens=special)
    pieces = predictor.tokenizer.convert_ids_to_tokens(enc.input_ids)
    out = []
    for token_id, piece, (start, stop), mask in zip(enc.input_ids, pieces, enc.offsets, enc.special_tokens_mask):
        special_token = bool(mask)
        out.append({"id": token_id, "text": piece if special_token else text[start:stop], "special": special_token,
                    "start": None if special_token else start, "stop": None if special_token else stop})
    return out


__all__ = ["add_protocol_routes", "base64_vector", "relevance", "service_version"]
