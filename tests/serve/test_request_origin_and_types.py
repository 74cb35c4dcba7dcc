"""What the server takes a request from, and what it takes in one (the 2026-11-28 attack report's C4): only Host names
that are this service's (DNS rebinding reached a loopback server that has no authentication), a page that runs only
its own script, and request bodies of the declared types (`"top_k": true` was a top_k of 1, `"3"` one of 3)."""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
pytest.importorskip("uvicorn")
from inference_helpers import tiny_folder  # noqa: E402
from test_serve import Server  # noqa: E402


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("origin"), "BertForMaskedLM")


# --- Host ----------------------------------------------------------------------------------------------------------
ANSWERED = ["127.0.0.1", "127.0.0.1:{port}", "localhost", "localhost:{port}", "LOCALHOST.", "app.localhost:{port}",
            "[::1]:{port}", "[::1]", "10.1.2.3:{port}", "bertkit.internal:{port}", "a.b.example.org"]
REFUSED = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example:{port}",
           "example.org", "bertkit.internal.evil.example", "", "xn--80ak6aa92e.com"]


def test_only_this_services_names_are_answered(masked_lm: Path) -> None:
    """Generated over Host values: IP addresses, localhost and its subdomains, and the --allowed-hosts names (one
    exact, one `*.example.org`) are answered; any other name (a rebinding page's own) or none gets 400 naming it,
    on every path, before the request is read further."""
    with Server(masked_lm) as server:  # the defaults: a rebinding page's name is refused
        r = httpx.get(f"{server.url}/health", headers={"Host": f"evil.example:{server.port}"})
        assert r.status_code == 400 and "evil.example" in r.json()["detail"]
    with Server(masked_lm, allowed_hosts=["bertkit.internal", "*.example.org"]) as server:
        for path, method in (("/health", "GET"), ("/", "GET"), ("/fill-mask", "POST")):
            body = {"texts": ["a [MASK] sat"]} if method == "POST" else None
            for host in ANSWERED:
                r = httpx.request(method, f"{server.url}{path}", json=body,
                                  headers={"Host": host.format(port=server.port)})
                assert r.status_code == 200, (host, path, r.text[:200])
            for host in REFUSED:
                r = httpx.request(method, f"{server.url}{path}", json=body,
                                  headers={"Host": host.format(port=server.port)})
                assert r.status_code == 400, (host, path)
                detail = r.json()["detail"]
                assert (f"Host {host.format(port=server.port)!r} is not a name of this service" in detail
                        and "--allowed-hosts" in detail) if host else detail == "no Host header"


# --- the page's Content-Security-Policy ---------------------------------------------------------------------------
def test_the_page_runs_only_its_own_script_and_style(masked_lm: Path) -> None:
    """The page comes with a Content-Security-Policy: no inline script or style but the page's own (by hash), no
    other origin to fetch from, frame it or post a form to; the page sets no style attribute the policy would
    block (tests/serve/test_page.py runs it in a browser)."""
    with Server(masked_lm) as server:
        r = httpx.get(f"{server.url}/")
    policy = dict(part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";"))
    page = r.text

    def sha(text: str) -> str:
        return f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"

    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert policy["default-src"] == "'none'" and policy["script-src"] == sha(script)
    assert policy["style-src"] == sha(style) and policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'none'"
    assert "unsafe" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert not re.search(r"\bstyle:|setAttribute\(\"style|\son\w+=", script)  # no style attribute, no handler


# --- strict request bodies -------------------------------------------------------------------------------------------
# Values pydantic's lax mode turned into another type: per JSON schema type, what a client might send instead.
LAX = {"integer": [True, "3", 3.0, "1e2"], "boolean": ["true", 1, 0, "yes"], "string": [3, True, ["x"]],
       "number": [True, "2.5"]}


JSON_TYPES = {"integer": int, "boolean": bool, "string": str, "number": (int, float), "null": type(None)}


def of_type(value: Any, member: dict[str, Any]) -> bool:
    """Whether `value` is of a JSON schema member's type (an array: a list of its items' type)."""
    kind = member.get("type")
    if kind == "array":
        return isinstance(value, list) and all(of_type(v, member.get("items", {})) for v in value)
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return kind in JSON_TYPES and isinstance(value, JSON_TYPES[kind])


def wrong_values(prop: dict[str, Any]) -> list[Any]:
    """Values of another type for a request field of this JSON schema (its type, or each of its `anyOf`; an array's
    items): what lax parsing converted. A value of another member's type (["x"] for a text or a list of texts) is
    not wrong."""
    members = prop.get("anyOf", [prop])
    out = []
    for member in members:
        out += LAX.get(member.get("type"), [])
        out += [[value] for value in LAX.get(member.get("items", {}).get("type"), [])]
    return [v for v in out if not any(of_type(v, m) for m in members)]


@pytest.fixture(scope="module")
def servers(masked_lm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    pytest.importorskip("faiss")
    from bertkit.inference.index import IndexOptions, build_index
    from bertkit.jobs.embed import EmbedConfig
    from bertkit.jobs.embed import run as embed

    tmp = tmp_path_factory.mktemp("strict")
    (tmp / "corpus.txt").write_text("the river bank\nfish in the river\n")
    embed(EmbedConfig(input=str(tmp / "corpus.txt"), output=str(tmp / "emb"), model=str(masked_lm), normalize=True,
                      precision="fp32", progress=False))
    build_index(tmp / "emb", tmp / "idx", IndexOptions())
    heads = ["BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
             "BertForMultipleChoice"]
    started = [Server(masked_lm, index=str(tmp / "idx"))] + [Server(tiny_folder(tmp, h)) for h in heads]
    for s in started:
        s.__enter__()
    yield started
    for s in started:
        s.__exit__(None, None, None)


def test_every_request_field_refuses_values_of_another_type_naming_it(servers: list[Server]) -> None:
    """Generated from each endpoint's own OpenAPI schema: every field of every request body (top_k, normalize,
    texts, question, choices, ...) sent with a value of another JSON type that lax parsing would have converted
    (true or "3" for a count, 1 or "true" for a switch, a number for a text) is a 422 naming that field, while the
    endpoint's example request is answered."""
    from bertkit.serve.app import PAGE_EXAMPLES
    from bertkit.tasks import TASKS

    examples = {**PAGE_EXAMPLES, **{c.serving.endpoint: c.serving.examples[0] for c in TASKS.values() if c.serving}}
    tried = set()
    for server in servers:
        spec = httpx.get(f"{server.url}/openapi.json").json()
        components = spec["components"]["schemas"]
        for path in [p[1:] for p, operations in spec["paths"].items() if "post" in operations]:  # every POST route
            body_schema = spec["paths"][f"/{path}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            props = components[body_schema["$ref"].rsplit("/", 1)[1]]["properties"]
            assert httpx.post(f"{server.url}/{path}", json=examples[path]).status_code == 200, path
            for field, prop in props.items():
                for value in wrong_values(prop):
                    r = httpx.post(f"{server.url}/{path}", json={**examples[path], field: value})
                    assert r.status_code == 422, (path, field, value, r.text[:200])
                    answer = r.json()  # FastAPI's {"detail": [...]}, or OpenAI's {"error": {"message"}} under /v1/
                    named = (field in answer["detail"][0]["loc"] if "detail" in answer else
                             f"body.{field}" in answer["error"]["message"])
                    assert named, (path, field, value, answer)
                    tried.add((path, field))
    assert {("fill-mask", "top_k"), ("search", "top_k"), ("embed", "normalize"), ("qa", "question"),
            ("choose", "choices"), ("classify", "texts"), ("ner", "texts"), ("embed", "inputs"), ("embed", "truncate"),
            ("v1/embeddings", "input"), ("v1/embeddings", "dimensions"), ("tokenize", "inputs"),
            ("tokenize", "add_special_tokens"), ("rerank", "query"), ("rerank", "raw_scores")} <= tried
