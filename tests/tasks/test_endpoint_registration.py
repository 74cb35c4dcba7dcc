"""A plug-in task whose endpoint is already served is refused by `register_task`, naming both, with the registry left
as it was (the 2026-11-28 attack report's C3: it used to register, and every server created after it in the process
failed)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import tiny_folder  # noqa: E402

from bertkit.tasks import ALIASES, TASKS, register_task  # noqa: E402
from bertkit.tasks.base import Serving, Task  # noqa: E402

SERVED = [(cls.serving.endpoint, name) for name, cls in TASKS.items() if cls.serving is not None]


@dataclass
class Texts:
    texts: list[str]


@dataclass
class Answers:
    results: list[str]


def plugin(endpoint: str) -> type[Task]:
    """A plug-in task serving `endpoint` (its name made from it, so that only the endpoint clashes)."""
    return type(f"Clash_{endpoint.replace('-', '_')}", (Task,), {
        "name": f"clash-{endpoint}",
        "serving": type("ClashServing", (Serving,), {"endpoint": endpoint, "request": Texts, "response": Answers})})


@pytest.mark.parametrize("endpoint,owner", SERVED + [(e, None) for e in ("health", "embed", "fill-mask", "search")])
def test_a_plugin_on_a_served_endpoint_is_refused_at_registration_naming_both(endpoint: str, owner: str | None,
                                                                              tmp_path: Path) -> None:
    """Generated over every built-in task's endpoint and the server's own: a TypeError naming the plug-in and what
    serves the endpoint already; the registries unchanged, and a server can still be created."""
    from bertkit.serve import ServeSettings, create_app

    before = dict(TASKS), dict(ALIASES)
    cls = plugin(endpoint)
    try:
        with pytest.raises(TypeError) as raised:
            register_task(cls)
        message = str(raised.value)
        assert f"task {cls.name!r} declares the endpoint /{endpoint}" in message
        assert (f"task {owner!r} serves already" if owner else "the server serves itself") in message
        assert (dict(TASKS), dict(ALIASES)) == before
    finally:  # a registration that went through (the defect) must not break the other tests
        TASKS.pop(cls.name, None)
    create_app(tiny_folder(tmp_path, "BertForSequenceClassification"), ServeSettings(precision="fp32"))
