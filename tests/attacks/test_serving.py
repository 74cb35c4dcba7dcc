"""Attacks on the HTTP service: oversized and endless bodies, abandoned requests, floods, slow work. The server
answers each with a clear status and stays responsive; work no client waits for is not computed."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

# The server and its client are the `serve` and `test` extras: without them these tests skip, naming what is missing
# (never a collection error).
httpx = pytest.importorskip("httpx", reason="the HTTP attack tests need httpx (pip install 'bertkit[test]')")
pytest.importorskip("uvicorn", reason="the HTTP attack tests need uvicorn (pip install 'bertkit[serve]')")
pytest.importorskip("fastapi", reason="the HTTP attack tests need fastapi (pip install 'bertkit[serve]')")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from inference_helpers import minilm_folder  # noqa: E402
from test_serve import Server  # noqa: E402

LONG = "The committee met again on Tuesday to discuss the budget of the new library and its opening hours. " * 20


def test_oversized_body_is_refused_before_it_is_read() -> None:
    with Server(minilm_folder(), max_body_bytes=2**20) as server:
        c = httpx.Client(base_url=server.url)
        big = b'{"texts": ["' + b"a" * (5 * 2**20) + b'"]}'
        r = c.post("/embed", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "the limit is 1048576" in r.json()["detail"]

        def chunks():  # no Content-Length: counted as it streams in
            yield b'{"texts": ["'
            for _ in range(40):
                yield b"a" * 2**16
            yield b'"]}'

        r = c.post("/embed", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post("/embed", json={"texts": ["still serving"]}).status_code == 200


def test_abandoned_requests_are_not_computed_and_the_next_one_is_fast() -> None:
    """30 requests of 64 long texts whose clients leave after 0.05 s; a one-word request right after them."""
    with Server(minilm_folder()) as server:
        batcher = server.app.state.batchers["embed"]

        async def abandon() -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=0.05) as client:
                async def one() -> None:
                    try:
                        await client.post("/embed", json={"texts": [LONG] * 64, "truncate": True})
                    except httpx.TimeoutException:
                        pass
                await asyncio.gather(*(one() for _ in range(30)))

        asyncio.run(abandon())
        start = time.perf_counter()
        r = httpx.post(f"{server.url}/embed", json={"texts": ["hello"]}, timeout=60)
        latency = time.perf_counter() - start
        assert r.status_code == 200
        print(f"next request after 30 abandoned ones: {latency:.2f} s; texts computed {batcher.items} of "
              f"{30 * 64 + 1}, skipped {batcher.skipped}")
        assert latency < 2.0
        assert batcher.items < 30 * 64 // 4  # most of the abandoned work was never computed


def test_a_full_queue_answers_503_at_once_and_recovers() -> None:
    with Server(minilm_folder(), max_queue=64, max_request_texts=64) as server:
        async def flood() -> list[int]:
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                rs = await asyncio.gather(*(client.post("/embed", json={"texts": [LONG[:600]] * 40})
                                            for _ in range(6)))
                return [r.status_code for r in rs], [r.headers.get("retry-after") for r in rs]

        codes, retry = asyncio.run(flood())
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        assert all(r == "1" for c, r in zip(codes, retry) if c == 503)
        assert httpx.post(f"{server.url}/embed", json={"texts": ["after the flood"]}).status_code == 200


def test_a_request_over_its_time_limit_gets_503() -> None:
    with Server(minilm_folder(), request_timeout_s=0.01) as server:
        r = httpx.post(f"{server.url}/embed", json={"texts": [LONG] * 32, "truncate": True}, timeout=60)
        assert r.status_code == 503 and "not done within 0.01 s" in r.json()["detail"]


@pytest.mark.parametrize("class_name", ["BertForMaskedLM", "BertForSequenceClassification",
                                        "BertForTokenClassification", "BertForQuestionAnswering"])
def test_every_head_answers_what_the_python_api_computes(class_name: str, tmp_path: Path) -> None:
    """Each endpoint against the library call on the same folder (batched with other requests, too)."""
    import numpy as np
    import torch

    import bertkit
    from bertkit.inference.fill_mask import fill_mask
    from bertkit.tasks import qa as qa_task
    from inference_helpers import tiny_folder

    folder = tiny_folder(tmp_path, class_name)
    bert = bertkit.load(folder)
    model, tok = bert.model.eval(), bert.tokenizer
    texts = ["paris is the [MASK] of france .", "the [MASK] sat on the [MASK] ."]
    with Server(folder) as server:
        c = httpx.Client(base_url=server.url)
        if class_name == "BertForMaskedLM":
            got = c.post("/fill-mask", json={"texts": texts, "top_k": 3}).json()["results"]
            for text, answer in zip(texts, got):
                want = [[(p.token, p.probability) for p in mask] for mask in fill_mask(model, tok, text, 3)]
                assert [[(p["token"], pytest.approx(p["probability"], abs=1e-5)) for p in m] for m in answer] == want
        elif class_name == "BertForSequenceClassification":
            (r,) = c.post("/classify", json={"texts": ["good movie"], "pairs": ["really"]}).json()["results"]
            with torch.no_grad():
                probs = model(**tok(["good movie"], ["really"]).to_tensors()).logits.softmax(-1)[0].tolist()
            assert [r["probabilities"][k] for k in ("neg", "pos")] == pytest.approx(probs, abs=1e-5)
        elif class_name == "BertForTokenClassification":
            (r,) = c.post("/ner", json={"texts": ["John lives in Paris"]}).json()["results"]
            enc = tok(["John lives in Paris"])
            with torch.no_grad():
                best = model(**enc.to_tensors()).logits[0].argmax(-1).tolist()[1:-1]  # without [CLS], [SEP]
            names = model.config.label_names
            assert [t["label"] for t in r] == [names[i] for i in best]
        else:
            question, context = "Where does John live?", "John lives in Paris, near the river."
            r = c.post("/qa", json={"question": question, "context": context}).json()
            enc = tok.encode(question, pair=context, max_length=512, truncation="only_second")
            with torch.no_grad():
                out = model(**tok([question], [context]).to_tensors())
            offsets = qa_task.context_offsets(enc)
            window = {"start_logits": out.start_logits[0].numpy(), "end_logits": out.end_logits[0].numpy(),
                      "offsets": offsets, "max_context": [o is not None for o in offsets]}
            answer, _ = qa_task.decode_answer(context, [window], n_best=len(offsets), max_answer_length=30)
            assert r["answer"] == answer and r["answer"] in context and np.isfinite(r["score"])
