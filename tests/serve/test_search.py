"""/search over HTTP (`bertkit serve --index DIR`): the answers of `bertkit search`, the limits and errors of every
endpoint, and an index of another model refused when the service starts."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from test_serve import Server, httpx  # noqa: E402
from inference_helpers import tiny_folder  # noqa: E402

pytest.importorskip("faiss", reason="/search needs faiss-cpu (pip install 'bertkit[index]')")

from bertkit.errors import ConfigError  # noqa: E402
from bertkit.inference.index import IndexOptions, build_index  # noqa: E402
from bertkit.jobs.embed import EmbedConfig  # noqa: E402
from bertkit.jobs.embed import run as embed  # noqa: E402
from bertkit.jobs.search import SearchConfig, search  # noqa: E402
from bertkit.serve import ServeSettings, create_app  # noqa: E402

TEXTS = ["the river bank", "a loan from the bank", "fish in the river", "a song about trains", "music all night",
         "the forest road", "cars on the road", "a boat on the water"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("search")
    model = tiny_folder(tmp, "BertModel")
    (tmp / "corpus.txt").write_text("\n".join(TEXTS) + "\n")
    embed(EmbedConfig(input=str(tmp / "corpus.txt"), output=str(tmp / "emb"), model=str(model), normalize=True,
                      precision="fp32", progress=False))
    build_index(tmp / "emb", tmp / "idx", IndexOptions())
    return {"tmp": tmp, "model": model, "index": tmp / "idx"}


@pytest.fixture(scope="module")
def server(indexed: dict) -> Iterator[Server]:
    with Server(indexed["model"], index=str(indexed["index"]), max_request_texts=4, max_text_chars=100,
                max_top_k=5) as s:
        yield s


def test_search_answers_what_the_search_verb_answers(indexed: dict, server: Server) -> None:
    c = httpx.Client(base_url=server.url)
    assert "search" in c.get("/health").json()["endpoints"]
    queries = ["water and fish", "songs"]
    r = c.post("/search", json={"queries": queries, "top_k": 3})
    assert r.status_code == 200, r.text
    want = search(SearchConfig(index=str(indexed["index"]), queries=queries, top_k=3))
    got = r.json()["results"]
    assert [[(h["row"], h["id"], h["text"]) for h in hits] for hits in got] == \
        [[(h["row"], h["id"], h["text"]) for h in a["results"]] for a in want]
    for hits, answer in zip(got, want):
        assert [h["score"] for h in hits] == pytest.approx([h["score"] for h in answer["results"]], abs=1e-5)
    assert got[0][0]["text"] in TEXTS and got[0][0]["id"] == got[0][0]["row"] + 1


def test_search_has_the_limits_and_errors_of_every_endpoint(server: Server) -> None:
    c = httpx.Client(base_url=server.url)
    r = c.post("/search", json={"queries": ["x" * 101]})
    assert r.status_code == 413 and r.json()["detail"] == "queries[0] has 101 characters; the limit is 100"
    r = c.post("/search", json={"queries": ["a"] * 5})
    assert r.status_code == 413 and "limit is 4" in r.json()["detail"]
    assert c.post("/search", json={"queries": []}).status_code == 400
    assert c.post("/search", json={"queries": ["ok", " "]}).json()["detail"] == "queries[1] is empty"
    r = c.post("/search", json={"queries": ["ok"], "top_k": 6})
    assert r.status_code == 422 and "top_k" in r.text
    r = c.post("/search", json={"queries": ["ok"], "topk": 2})
    assert r.status_code == 422 and "topk" in r.text
    assert c.post("/search", json={"queries": ["still alive"]}).status_code == 200


def test_no_index_no_search_and_another_models_index_is_refused(indexed: dict, tmp_path: Path) -> None:
    with Server(indexed["model"]) as plain:
        r = httpx.post(f"{plain.url}/search", json={"queries": ["river"]})
        assert r.status_code == 404 and "no head for /search" in r.json()["detail"]
    other = tiny_folder(tmp_path, "BertModel", seed=1)
    with pytest.raises(ConfigError, match=r"built with other embedding settings \(model_sha256: "):
        create_app(other, ServeSettings(index=str(indexed["index"]), precision="fp32"))
    meta = json.loads((indexed["index"] / "index.json").read_text())
    assert meta["settings"]["pooling"] == "mean" and meta["settings"]["dim"] == 32
