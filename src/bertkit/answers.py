"""Answers as JSON: the numbers they may hold, and how large they may be.

Every endpoint of `bertkit serve` and every verb that prints JSON answers with finite numbers only: a NaN or an
infinity is not JSON (json.dumps writes `Infinity`, which parsers refuse; pydantic writes `null`, which the schema
says is a float), so one is an error naming where it is, never an answer.

The server bounds each answer's size before computing it, the same way for every endpoint: the endpoint adds up the
most it can return for the request it was given (NUMBER_BYTES per number, OBJECT_BYTES per object, the strings' own
JSON) and a request whose answer could exceed `ServeSettings.max_response_bytes` is refused with 413 before any work.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from bertkit.errors import CheckpointError

NUMBER_BYTES = 25  # the longest number an answer's JSON holds, a float's repr ("-2.2250738585072014e-308"), and a comma
OBJECT_BYTES = 64  # one answer object's keys, quotes and punctuation at most (/ner's token object, the longest, has 50)


def json_bytes(value: Any) -> int:
    """The bytes `value` takes in an answer (UTF-8 JSON, non-ASCII kept as the server writes it), and a comma."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8")) + 1


def check_finite(value: Any, where: str) -> None:
    """A CheckpointError naming the first number of `value` (lists, tuples, dicts and dataclasses within) that is NaN
    or infinite, as `where[i].key`: only the model or the index that computed it can hold such numbers."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CheckpointError(f"{where} is {value}, not a finite number: the model or index that computed it "
                                  "holds NaN or infinite values (check its weights or rebuild the index)")
    elif isinstance(value, (list, tuple)):
        if value and all(type(v) is float for v in value):  # a vector: one pass, no path built per number
            if all(map(math.isfinite, value)):
                return
        for i, v in enumerate(value):
            check_finite(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_finite(v, f"{where}.{k}")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            check_finite(getattr(value, f.name), f"{where}.{f.name}")


def json_line(value: Any, where: str) -> str:
    """`value` as one line of JSON (non-ASCII kept), after `check_finite`: never `NaN` or `Infinity`."""
    check_finite(value, where)
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


__all__ = ["NUMBER_BYTES", "OBJECT_BYTES", "check_finite", "json_bytes", "json_line"]
