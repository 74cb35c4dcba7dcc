"""Operating the service: /metrics read by prometheus_client's own parser as requests arrive, the API key (its header,
its open routes, the environment variable, the OpenAI client's key), JSON access logs, and /docs served without a
CDN."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from test_serve import Server, httpx  # noqa: E402
from inference_helpers import tiny_folder  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser", reason="/metrics needs prometheus_client "
                                                                "(pip install 'bertkit[serve]')")
KEY = "0123456789abcdef-test-key"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client: (name, sorted labels) -> value."""
    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(r.text) for s in family.samples}


def test_metrics_move_as_requests_arrive(tmp_path: Path) -> None:
    """Requests by route and status, latency and batch-size histograms, texts and tokens computed, queue depth:
    each counter moves by what three /embed requests of two texts, one refused request and one 404 did."""
    with Server(tiny_folder(tmp_path, "BertForMaskedLM")) as server:
        before = scrape(server.url)
        c = httpx.Client(base_url=server.url)
        for _ in range(3):
            assert c.post("/embed", json={"texts": ["a cat sat", "on the mat"]}).status_code == 200
        assert c.post("/embed", json={"texts": []}).status_code == 400
        assert c.get("/no-such-route").status_code == 404
        after = scrape(server.url)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("bertkit_requests_total", route="/embed", method="POST", status="200") == 3
    assert moved("bertkit_requests_total", route="/embed", method="POST", status="400") == 1
    assert moved("bertkit_requests_total", route="other", method="GET", status="404") == 1
    assert moved("bertkit_request_duration_seconds_count", route="/embed") == 4
    assert moved("bertkit_request_duration_seconds_sum", route="/embed") > 0
    assert moved("bertkit_texts_total", endpoint="embed") == 6
    assert moved("bertkit_tokens_total", endpoint="embed") == 3 * (5 + 5)  # [CLS] a cat sat [SEP], on the mat
    assert 1 <= moved("bertkit_batch_size_count", endpoint="embed") <= 3
    assert moved("bertkit_batch_size_sum", endpoint="embed") == 6
    assert moved("bertkit_batches_total", endpoint="embed") >= 1
    assert after[("bertkit_queue_depth", (("endpoint", "embed"),))] == 0
    assert ("bertkit_queue_depth", (("endpoint", "fill-mask"),)) in after


def test_an_api_key_guards_every_route_but_the_open_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a key: a request without `Authorization: Bearer KEY`, or with another key, is a 401 on every route
    (before its body is read), /health, /metrics and the page at / answer anyway (the page's own requests carry the
    key: tests/serve/test_page.py); the key is compared with hmac.compare_digest."""
    import bertkit.serve.operations as operations

    compared: list[bytes] = []
    real = operations.hmac.compare_digest
    monkeypatch.setattr(operations.hmac, "compare_digest", lambda a, b: compared.append(b) or real(a, b))
    with Server(tiny_folder(tmp_path, "BertForMaskedLM"), api_key=KEY) as server:
        c = httpx.Client(base_url=server.url)
        for method, path in (("POST", "/embed"), ("POST", "/fill-mask"), ("POST", "/v1/embeddings"),
                             ("POST", "/tokenize"), ("GET", "/info"), ("GET", "/docs"), ("GET", "/docs/x"),
                             ("GET", "/openapi.json"), ("POST", "/nowhere")):
            for headers in ({}, {"Authorization": "Bearer wrong-key-of-some-length"}, {"Authorization": KEY}):
                r = c.request(method, path, json={"texts": ["a [MASK]"]}, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (method, path, headers)
                assert "API key" in r.json()["detail"] and KEY not in r.text
        auth = {"Authorization": f"Bearer {KEY}"}
        assert c.post("/embed", json={"texts": ["a"]}, headers=auth).status_code == 200
        assert c.post("/fill-mask", json={"texts": ["a [MASK]"]}, headers=auth).status_code == 200
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
        assert c.get("/").status_code == 200 and c.get("/health").json()["api_key"] is True
        security = c.get("/openapi.json", headers=auth).json()
        assert security["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert security["paths"]["/embed"]["post"]["security"] == [{"bearer": []}]
        assert "security" not in security["paths"]["/health"]["get"]
        metrics = c.get("/metrics").text
    assert compared and set(compared) == {KEY.encode()}
    assert re.search(r'bertkit_requests_total\{method="POST",route="/embed",status="401"\} 3', metrics)


def test_the_key_from_the_environment_and_open_routes_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BERTKIT_API_KEY gives the key when --api-key does not; open_routes replaces the defaults (here nothing is
    open, Swagger UI is); a key too short to be safe is refused when the service starts."""
    from bertkit.errors import ConfigError
    from bertkit.serve import ServeSettings, create_app

    folder = tiny_folder(tmp_path, "BertModel")
    monkeypatch.setenv("BERTKIT_API_KEY", KEY)
    with Server(folder, open_routes=["/docs"]) as server:
        c = httpx.Client(base_url=server.url)
        assert c.get("/health").status_code == 401 and c.get("/metrics").status_code == 401
        assert c.get("/docs").status_code == 200 and c.get("/docs/swagger-ui.css").status_code == 200
        assert c.get("/health", headers={"Authorization": f"bearer {KEY}"}).status_code == 200
    monkeypatch.setenv("BERTKIT_API_KEY", "short")
    with pytest.raises(ConfigError, match="BERTKIT_API_KEY: expected at least 16"):
        create_app(folder, ServeSettings(precision="fp32"))
    with pytest.raises(ConfigError, match="api_key"):
        ServeSettings(api_key="has a space in it, too").validate()


def test_the_openai_client_sends_the_key(tmp_path: Path) -> None:
    openai = pytest.importorskip("openai", reason="the OpenAI client test needs openai (pip install 'bertkit[test]')")
    with Server(tiny_folder(tmp_path, "BertModel"), api_key=KEY) as server:
        good = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        assert len(good.embeddings.create(input="a cat", model="m").data[0].embedding) == 32
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{server.url}/v1", api_key="another-key-entirely", max_retries=0) \
                .embeddings.create(input="a cat", model="m")


def test_json_access_log_writes_one_object_per_request(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    with Server(tiny_folder(tmp_path, "BertModel"), access_log="json") as server:
        c = httpx.Client(base_url=server.url)
        c.post("/embed", json={"texts": ["a", "b", "c"]})
        c.post("/v1/embeddings", json={"input": "a", "model": "m"})
        c.get("/health")
        c.post("/embed", json={"texts": "not a list"})
    lines = [json.loads(x) for x in capfd.readouterr().err.splitlines() if x.startswith("{")]
    assert [(x["method"], x["route"], x["status"], x["texts"]) for x in lines] == [
        ("POST", "/embed", 200, 3), ("POST", "/v1/embeddings", 200, 1), ("GET", "/health", 200, 0),
        ("POST", "/embed", 422, 0)]
    assert all(x["latency_ms"] > 0 and x["time"].endswith("+00:00") and x["client"] == "127.0.0.1" for x in lines)


def test_docs_are_served_from_the_package(tmp_path: Path) -> None:
    """/docs loads Swagger UI's script and style from this service, nothing from a CDN."""
    with Server(tiny_folder(tmp_path, "BertModel")) as server:
        page = httpx.get(f"{server.url}/docs").text
        refs = re.findall(r'(?:src|href)="([^"]+)"', page)
        assert refs and all(ref.startswith("/docs/") for ref in refs), refs
        for ref in refs:
            r = httpx.get(f"{server.url}{ref}")
            assert r.status_code == 200 and len(r.content) > 1000, ref
        assert "'/openapi.json'" in page and "http" not in re.sub(r"<!--.*?-->", "", page)
