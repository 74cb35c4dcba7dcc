"""The base of every request body the service takes: strict, so a field an endpoint does not know, or a value not of
its type, is a 422 naming it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestBody(BaseModel):
    """A request body: a field the endpoint does not know is a 422 naming it (a misspelt option, e.g. "poolng",
    must not be ignored silently), and so is a value not of the field's type: strict, so `true` or "3" is not a
    top_k of 1 or 3, nor 2.5 a count."""

    model_config = ConfigDict(extra="forbid", strict=True)
