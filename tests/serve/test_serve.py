"""The real server on a loopback port, called over HTTP: endpoints per head, limits, bad input, a bounded load test."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import DATA, REPO, minilm_folder, tiny_folder  # noqa: E402

# The `serve` and `test` extras: without them these tests skip, naming what is missing (never a collection error).
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (pip install 'bertkit[test]')")
uvicorn = pytest.importorskip("uvicorn", reason="the server tests need uvicorn (pip install 'bertkit[serve]')")
pytest.importorskip("fastapi", reason="the server tests need fastapi (pip install 'bertkit[serve]')")
from bertkit.serve import ServeSettings, create_app  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """uvicorn in a thread on 127.0.0.1; stopped gracefully at the end."""

    def __init__(self, folder: Path | str, **settings: object) -> None:
        settings.setdefault("precision", "fp32")  # exact answers to compare with, on any CPU
        self.app = create_app(folder, ServeSettings(**settings))  # type: ignore[arg-type]
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Server":
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def minilm_server() -> Iterator[Server]:
    with Server(minilm_folder(), max_request_texts=8, max_text_chars=500) as server:
        yield server


def test_health_openapi_and_embed_equals_direct_call(minilm_server: Server) -> None:
    c = httpx.Client(base_url=minilm_server.url)
    health = c.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "BertModel" and "embed" in health["endpoints"]
    assert health["precision"] == "fp32"  # as the test server asks; `bertkit serve` defaults to auto
    assert "/embed" in c.get("/openapi.json").json()["paths"]
    texts = ["The cat sat on the mat.", "A second, longer sentence about lobsters in the Atlantic."]
    r = c.post("/embed", json={"texts": texts})
    assert r.status_code == 200
    direct = minilm_server.app.state.predictor.encoder.encode(texts)
    assert (torch.tensor(r.json()["embeddings"]) - direct).abs().max() <= 1e-5


def test_bad_requests_are_clear_4xx_and_the_server_keeps_serving(minilm_server: Server) -> None:
    c = httpx.Client(base_url=minilm_server.url)
    r = c.post("/embed", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.text
    r = c.post("/embed", json={"texts": "not a list"})
    assert r.status_code == 422 and "texts" in r.text
    r = c.post("/embed", json={"texts": ["x"] * 9})
    assert r.status_code == 413 and "limit is 8" in r.json()["detail"]
    r = c.post("/embed", json={"texts": ["x" * 501]})
    assert r.status_code == 413 and "500" in r.json()["detail"]
    r = c.post("/embed", json={"texts": []})
    assert r.status_code == 400
    r = c.post("/fill-mask", json={"texts": ["a [MASK]"]})
    assert r.status_code == 404 and "no head for /fill-mask" in r.json()["detail"]
    assert c.post("/embed", json={"texts": ["still alive"]}).status_code == 200


def test_bounded_load_from_a_second_process(minilm_server: Server, tmp_path: Path) -> None:
    if not (DATA / "wikitext2" / "valid.txt").is_file():
        pytest.skip(f"WikiText-2 not found under {DATA}")
    dump = tmp_path / "load.json"
    batcher = minilm_server.app.state.batchers["embed"]
    batches, items = batcher.batches, batcher.items  # the module's server has answered other tests already
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--url", minilm_server.url,
                           "--requests", "200", "--concurrency", "32", "--timeout", "100", "--dump", str(dump)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    result = json.loads(dump.read_text())
    encoder = minilm_server.app.state.predictor.encoder
    unique = sorted({t for body in result["texts"] for t in body})
    direct = dict(zip(unique, encoder.encode(unique)))
    for body, answer in zip(result["texts"], result["embeddings"]):
        got = torch.tensor(answer)
        want = torch.stack([direct[t] for t in body])
        assert (got - want).abs().max() <= 1e-5
    assert batcher.items - items == sum(len(body) for body in result["texts"])  # each text computed once
    assert batcher.batches - batches < len(result["texts"]) == 200  # concurrent requests shared batches


@pytest.mark.parametrize("class_name,endpoint,body", [
    ("BertForMaskedLM", "/fill-mask", {"texts": ["Paris is the [MASK] of France."], "top_k": 3}),
    ("BertForSequenceClassification", "/classify", {"texts": ["good movie"], "pairs": ["really"]}),
    ("BertForTokenClassification", "/ner", {"texts": ["John lives in Paris"]}),
    ("BertForQuestionAnswering", "/qa", {"question": "Where does John live?", "context": "John lives in Paris."}),
])
def test_head_endpoints(class_name: str, endpoint: str, body: dict, tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    with Server(tiny_folder(tmp_path, class_name)) as server:
        c = httpx.Client(base_url=server.url)
        r = c.post(endpoint, json=body)
        assert r.status_code == 200, r.text
        data = r.json()
        if endpoint == "/fill-mask":
            assert len(data["results"][0][0]) == 3
            assert c.post(endpoint, json={"texts": ["no mask"]}).status_code == 400
        elif endpoint == "/classify":
            assert data["results"][0]["label"] in ("neg", "pos")
        elif endpoint == "/ner":
            assert [t["token"] for t in data["results"][0]] == ["john", "lives", "in", "paris"]
            text = body["texts"][0]  # each word's place in the text as sent, case kept
            assert [text[t["start"]:t["end"]] for t in data["results"][0]] == ["John", "lives", "in", "Paris"]
            accented = c.post(endpoint, json={"texts": ["  Café  Zürich, [SEP]"]}).json()["results"][0]
            assert [(t["token"], "  Café  Zürich, [SEP]"[t["start"]:t["end"]]) for t in accented] == [
                ("cafe", "Café"), ("zurich", "Zürich"), (",", ","), ("[SEP]", "[SEP]")]
        else:
            context = body["context"]
            assert data["answer"] == context[data["start_char"]:data["end_char"]] and data["answer"]
            assert isinstance(data["score"], float)
        assert c.post("/classify" if endpoint != "/classify" else "/qa", json=body).status_code in (404, 422)


def test_embed_uses_the_folders_pooling_normalisation_and_length() -> None:
    """/embed answers what bertkit.load(folder).encode does: MiniLM's mean pooling, unit norm, 256 tokens (a longer
    text is refused naming the limit, or cut as encode cuts it when the request says truncate)."""
    import bertkit

    long_text = " ".join(["The committee met again on Tuesday to discuss the budget of the new library."] * 36)
    texts = [long_text, "a short one"]
    with Server(minilm_folder()) as server:
        c = httpx.Client(base_url=server.url)
        r = c.post("/embed", json={"texts": texts})
        assert r.status_code == 413 and "texts[0] has 542 tokens; this model reads at most 256" in r.json()["detail"]
        r = c.post("/embed", json={"texts": texts, "truncate": True})
        assert r.status_code == 200
        served = torch.tensor(r.json()["embeddings"])
    with pytest.warns(UserWarning, match="longer than 256 tokens and were truncated"):
        api = torch.from_numpy(bertkit.load(minilm_folder()).encode(texts, precision="fp32"))
    assert (served - api).abs().max() <= 1e-5
    assert torch.allclose(served.norm(dim=-1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("overrides", [
    {"num_labels": 1, "label_names": None, "problem_type": "regression"},
    {"num_labels": 3, "label_names": ["a", "b", "c"], "problem_type": "multi_label_classification"},
])
def test_classify_reads_logits_as_the_heads_problem_type(overrides: dict, tmp_path: Path) -> None:
    from bertkit.model import BertForSequenceClassification

    folder = tiny_folder(tmp_path, "BertForSequenceClassification", **overrides)
    model = BertForSequenceClassification.from_pretrained(str(folder)).eval()
    tok = __import__("bertkit").BertTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        logits = model(**tok(["good movie"]).to_tensors()).logits[0]
    with Server(folder) as server:
        result = httpx.Client(base_url=server.url).post("/classify", json={"texts": ["good movie"]}).json()
    (r,) = result["results"]
    if overrides["num_labels"] == 1:  # regression: the number itself, no softmax over one logit
        assert r["label"] is None and r["value"] == pytest.approx(float(logits[0]), abs=1e-5)
    else:  # multi-label: one sigmoid per label
        probs = logits.sigmoid().tolist()
        assert [r["probabilities"][k] for k in "abc"] == pytest.approx(probs, abs=1e-5)
        assert r["labels"] == [k for k, p in zip("abc", probs) if p > 0.5]


def test_ner_answers_what_predict_decodes(tmp_path: Path) -> None:
    """/ner tags each word as `bertkit predict` does (the tag at its first word piece), with that tag's softmax
    probability from a plain forward pass."""
    from bertkit.serve.app import Predictor
    from bertkit.tasks.base import predict
    from bertkit.tasks.ner import NerTask, TaggedSentence

    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    folder = tiny_folder(tmp_path, "BertForTokenClassification", num_labels=5, label_names=labels)
    predictor = Predictor(folder, precision="fp32")
    texts = ["John Smithson lives in Paris.", "unbelievably"]
    answers = predictor.task_batch(predictor.examples({"texts": texts}))
    task = NerTask()
    settings = task.settings_class(max_length=512, label_names=labels)
    tok = predictor.tokenizer
    for text, answer in zip(texts, answers):
        words = [w for w, _, _ in tok.words(text)]
        assert [a["token"] for a in answer] == words
        sentence = TaggedSentence(0, words, None)
        features = task.features([sentence], tok, settings, training=False)
        assert [a["label"] for a in answer] == predict(task, predictor.model, [sentence], features, settings, 8, tok)[0]
        ids = features[0]["input_ids"]
        with torch.inference_mode():
            probs = predictor.model(torch.tensor([ids])).logits[0].softmax(-1)
        for a, start in zip(answer, features[0]["word_starts"]):
            assert a["probability"] == pytest.approx(float(probs[start].max()), abs=1e-6)
            assert a["label"] == labels[int(probs[start].argmax())]
