"""The protocols clients already speak, called by their own clients against the real server on a loopback port: the
OpenAI SDK on /v1/embeddings, huggingface_hub's InferenceClient (text-embeddings-inference's client) on /embed, and
TEI's /tokenize, /rerank and /info; the OpenAPI document lists only what the folder serves."""

from __future__ import annotations

import math
import sys
from importlib.metadata import version
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from test_serve import Server, httpx  # noqa: E402
from inference_helpers import minilm_folder, tiny_folder  # noqa: E402

import bertkit  # noqa: E402

TEXTS = ["The cat sat on the mat.", "A second, longer sentence about lobsters in the Atlantic.", "short"]
LONG = " ".join(["The committee met again on Tuesday to discuss the budget of the new library."] * 36)  # > 256


@pytest.fixture(scope="module")
def minilm() -> Iterator[Server]:
    with Server(minilm_folder()) as server:
        yield server


@pytest.fixture(scope="module")
def direct() -> np.ndarray:
    """What `bertkit.load(folder).encode` gives for TEXTS, in float32."""
    return bertkit.load(minilm_folder()).encode(TEXTS, precision="fp32")


def tokens(text: str) -> int:
    return len(bertkit.BertTokenizer.from_pretrained(str(minilm_folder())).encode(text, truncation=False).input_ids)


# --- OpenAI -------------------------------------------------------------------------------------------------------
def test_the_openai_client_gets_the_vectors_of_encode(minilm: Server, direct: np.ndarray) -> None:
    """The OpenAI SDK pointed at the service: its default (base64) and float answers are bitwise the vectors of
    `bertkit.load(folder).encode`, one string or a list, with the tokens read as usage."""
    openai = pytest.importorskip("openai", reason="the OpenAI client test needs openai (pip install 'bertkit[test]')")
    client = openai.OpenAI(base_url=f"{minilm.url}/v1", api_key="not-checked-without-api-key", max_retries=0)
    answer = client.embeddings.create(input=TEXTS, model="all-MiniLM-L6-v2")  # the SDK asks for base64
    got = np.array([d.embedding for d in answer.data], dtype=np.float32)
    assert np.array_equal(got, direct), np.abs(got - direct).max()
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == sum(map(tokens, TEXTS))
    assert answer.model == str(minilm_folder())
    floats = client.embeddings.create(input=TEXTS, model="any", encoding_format="float")
    assert np.array_equal(np.array([d.embedding for d in floats.data], dtype=np.float32), direct)
    one = client.embeddings.create(input=TEXTS[0], model="any")  # alone, as encode([text]) computes it alone
    alone = bertkit.load(minilm_folder()).encode([TEXTS[0]], precision="fp32")[0]
    assert np.array_equal(np.array(one.data[0].embedding, dtype=np.float32), alone)
    with pytest.raises(openai.APIStatusError) as refused:  # no field in the protocol to cut it: refused, named
        client.embeddings.create(input=[TEXTS[0], LONG], model="any")
    assert refused.value.status_code == 413
    assert "input[1] has" in str(refused.value) and "at most 256" in str(refused.value)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(input="x", model="any", dimensions=8)


def test_openai_requests_are_typed_strictly(minilm: Server) -> None:
    c = httpx.Client(base_url=minilm.url)
    for body in ({"input": [1, 2, 3], "model": "m"}, {"input": "x", "encoding_format": "binary"},
                 {"input": "x", "modle": "m"}):
        r = c.post("/v1/embeddings", json=body)
        assert r.status_code == 422, body


def test_auto_truncate_cuts_what_openai_clients_cannot_ask_to_cut(tmp_path: Path) -> None:
    with Server(minilm_folder(), auto_truncate=True) as server:
        r = httpx.post(f"{server.url}/v1/embeddings", json={"input": [LONG], "model": "m"})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 256
        assert httpx.get(f"{server.url}/info").json()["auto_truncate"] is True
    with pytest.warns(UserWarning, match="truncated"):  # the API cuts it too, saying so
        cut = bertkit.load(minilm_folder()).encode([LONG], precision="fp32")[0]
    assert np.array_equal(np.array(r.json()["data"][0]["embedding"], dtype=np.float32), cut)


# --- TEI -------------------------------------------------------------------------------------------------------
def test_tei_client_embeds_as_encode(minilm: Server, direct: np.ndarray) -> None:
    """huggingface_hub's InferenceClient, TEI's Python client, on /embed: `inputs` a list or one string, answered
    with a list of vectors, unit length by default as TEI's; a text over the model's 256 tokens is a 413 naming the
    limit unless the request asks to truncate."""
    hub = pytest.importorskip("huggingface_hub", reason="the TEI client test needs huggingface_hub")
    client = hub.InferenceClient(model=f"{minilm.url}/embed", api_key="unused")
    got = client.feature_extraction(TEXTS)
    assert got.dtype == np.float32 and np.array_equal(got, direct)
    alone = bertkit.load(minilm_folder()).encode([TEXTS[0]], precision="fp32")
    assert np.array_equal(client.feature_extraction(TEXTS[0]), alone)
    with pytest.raises(hub.errors.HfHubHTTPError) as refused:
        client.feature_extraction([LONG])
    assert refused.value.response.status_code == 413 and "at most 256" in refused.value.response.text
    cut = client.feature_extraction([LONG], truncate=True)
    with pytest.warns(UserWarning, match="truncated"):
        assert np.array_equal(cut, bertkit.load(minilm_folder()).encode([LONG], precision="fp32"))
    left = client.feature_extraction([LONG + " lobsters"], truncate=True, truncation_direction="left")
    assert not np.array_equal(left, cut)  # the end kept, not the start


def test_bertkit_shape_of_embed_still_answers_and_one_shape_is_asked_for(minilm: Server, direct: np.ndarray) -> None:
    c = httpx.Client(base_url=minilm.url)
    r = c.post("/embed", json={"texts": TEXTS})
    assert r.status_code == 200 and r.json()["dimension"] == 384
    assert np.array_equal(np.array(r.json()["embeddings"], dtype=np.float32), direct)
    for body, says in (({"texts": ["a"], "inputs": "a"}, "both"), ({"normalize": True}, "neither")):
        r = c.post("/embed", json=body)
        assert r.status_code == 422 and "`inputs`" in r.json()["detail"] and says in r.json()["detail"]
    r = c.post("/embed", json={"texts": [LONG]})
    assert r.status_code == 413 and "texts[0] has" in r.json()["detail"] and '"truncate": true' in r.json()["detail"]


def test_tokenize_gives_each_tokens_characters(minilm: Server) -> None:
    text = "Héllo, Zürich!"
    r = httpx.post(f"{minilm.url}/tokenize", json={"inputs": text})
    assert r.status_code == 200
    (toks,) = r.json()
    assert toks[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert toks[-1]["text"] == "[SEP]" and toks[-1]["special"]
    assert [t["text"] for t in toks[1:-1]] == [text[t["start"]:t["stop"]] for t in toks[1:-1]]
    assert "".join(t["text"] for t in toks[1:-1]) == text.replace(" ", "")
    plain = httpx.post(f"{minilm.url}/tokenize", json={"inputs": [text, "a"], "add_special_tokens": False}).json()
    assert [len(x) for x in plain] == [len(toks) - 2, 1] and not any(t["special"] for t in plain[0])


@pytest.mark.parametrize("overrides", [{}, {"num_labels": 1, "label_names": None, "problem_type": "regression"}])
def test_rerank_orders_texts_by_the_classifiers_relevance(overrides: dict, tmp_path: Path) -> None:
    """/rerank on a pair classifier: every text's score is read from /classify's answer to (query, text) (a
    two-label head: the second label's probability; one output: its sigmoid), best first, with the text when asked;
    raw_scores gives the logit."""
    folder = tiny_folder(tmp_path, "BertForSequenceClassification", **overrides)
    query, texts = "where do lobsters live", ["in the sea", "a cat sat on the mat", "the Atlantic", "taxes"]
    with Server(folder) as server:
        c = httpx.Client(base_url=server.url)
        ranks = c.post("/rerank", json={"query": query, "texts": texts, "return_text": True}).json()
        raw = c.post("/rerank", json={"query": query, "texts": texts, "raw_scores": True}).json()
        classified = c.post("/classify", json={"texts": [query] * 4, "pairs": texts}).json()["results"]
        info = c.get("/info").json()
        assert "/rerank" in c.get("/openapi.json").json()["paths"]
        r = c.post("/rerank", json={"query": query, "texts": ["word " * 600]})
        assert r.status_code == 413 and "texts[0] has more than" in r.json()["detail"]
        assert c.post("/rerank", json={"query": query, "texts": ["word " * 600], "truncate": True}).status_code == 200
    if overrides:
        want = [1 / (1 + math.exp(-a["value"])) for a in classified]
        logits = [a["value"] for a in classified]
        assert "reranker" in info["model_type"]
    else:
        want = [a["probabilities"]["pos"] for a in classified]
        logits = [math.log(a["probabilities"]["pos"]) - math.log(a["probabilities"]["neg"]) for a in classified]
        assert info["model_type"]["reranker"]["id2label"] == {"0": "neg", "1": "pos"}
    assert [r["index"] for r in ranks] == sorted(range(4), key=lambda i: -want[i])
    assert [r["score"] for r in ranks] == pytest.approx(sorted(want, reverse=True), abs=1e-12)
    assert [r["text"] for r in ranks] == [texts[r["index"]] for r in ranks]
    assert {r["index"]: r["score"] for r in raw} == pytest.approx(dict(enumerate(logits)), abs=1e-9)
    assert "text" not in raw[0]


def test_info_names_the_folder_head_precision_length_limits_and_version(minilm: Server) -> None:
    info = httpx.get(f"{minilm.url}/info").json()
    assert info["model_id"] == str(minilm_folder()) and info["head"] == "BertModel"
    assert info["precision"] == info["model_dtype"] == "fp32" and info["max_input_length"] == 256
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["version"] == version("bertkit") and info["limits"]["max_request_texts"] == 64
    assert info["max_client_batch_size"] == 64 and info["endpoints"] == ["embed"]


# --- the OpenAPI document --------------------------------------------------------------------------------------
SERVED = {"BertModel": set(), "BertForMaskedLM": {"/fill-mask"}, "BertForTokenClassification": {"/ner"},
          "BertForQuestionAnswering": {"/qa"}, "BertForMultipleChoice": {"/choose"},
          "BertForSequenceClassification": {"/classify", "/rerank"}}
EVERY_FOLDER = {"/health", "/embed", "/v1/embeddings", "/tokenize", "/info", "/metrics"}


@pytest.mark.parametrize("head", list(SERVED))
def test_openapi_lists_only_the_routes_this_folder_serves(head: str, tmp_path: Path) -> None:
    """Each head's /openapi.json: the routes every folder has and its own, no other head's (which answer 404
    naming what the folder has)."""
    with Server(tiny_folder(tmp_path, head)) as server:
        paths = set(httpx.get(f"{server.url}/openapi.json").json()["paths"])
        others = {p for extra in SERVED.values() for p in extra} - SERVED[head]
        answers = {p: httpx.post(f"{server.url}{p}", json={"texts": ["a"], "query": "a", "question": "a",
                                                            "context": "a", "choices": ["a", "b"]}).status_code
                   for p in sorted(others | {"/search"})}
    assert paths == EVERY_FOLDER | SERVED[head]
    assert set(answers.values()) <= {404, 422}, answers
