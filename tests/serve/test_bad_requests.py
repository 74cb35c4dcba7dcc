"""Bad requests to the HTTP service: a bad request batched with good ones fails alone, library errors caused by the
input are 400s naming them (the connection stays open), a [MASK] beyond the window is refused by name, a /qa
context without text says so, and an unknown request field is a 422 naming it. (The 2026-11-24 attack report's
findings H1, T1, N10, C3 and N13.)"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
pytest.importorskip("uvicorn")
from inference_helpers import tiny_folder  # noqa: E402
from test_serve import Server  # noqa: E402


LONG_QUESTION = "why " * 600  # 600 word pieces: no room left for the context in 512
LATE_MASK = "word " * 600 + "[MASK]"  # its only [MASK] beyond the first 512 tokens


def post_together(url: str, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """The requests sent at once, each on its own connection (so the server batches them together)."""
    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            return await asyncio.gather(*(client.post(path, json=body) for path, body in requests))
    return asyncio.run(go())


def test_a_bad_request_fails_alone_not_the_requests_batched_with_it(tmp_path: Path) -> None:
    """H1: /qa with a 600-word question or a context of one zero-width space, and /fill-mask with its [MASK] beyond
    the window, sent at once with good requests, 5 rounds: the bad ones get their own 400, every good one its 200
    and the answer it gets alone."""
    questions = [("Where does John live?", "John lives in Paris, near the river."),
                 ("Who wrote it?", "The book was written by Jane Austen in 1815."),
                 ("What is red?", "The apple on the table is red and round."),
                 ("When did it open?", "The library opened on Tuesday after a long delay.")]
    masked = ["paris is the [MASK] of france .", "the [MASK] sat on the [MASK] .", "she was very [MASK] to see him .",
              "[MASK] is a city ."]
    with Server(tiny_folder(tmp_path, "BertForQuestionAnswering"), max_batch_delay_ms=50) as qa, \
            Server(tiny_folder(tmp_path, "BertForMaskedLM"), max_batch_delay_ms=50) as fm:
        alone_qa = [httpx.post(f"{qa.url}/qa", json={"question": q, "context": c}).json() for q, c in questions]
        alone_fm = [httpx.post(f"{fm.url}/fill-mask", json={"texts": [t], "top_k": 3}).json() for t in masked]
        for bad, reason in (({"question": LONG_QUESTION, "context": "John lives in Paris."}, "shorter question"),
                            ({"question": "Where?", "context": "\u200b"}, "the context has no text")):
            for _ in range(5):
                good = [("/qa", {"question": q, "context": c}) for q, c in questions] * 4
                answers = post_together(qa.url, [("/qa", bad), *good])
                for r, want in zip(answers[1:], alone_qa * 4):
                    assert r.status_code == 200, r.text
                    got = r.json()
                    assert (got["answer"], got["start_char"], got["end_char"]) == \
                        (want["answer"], want["start_char"], want["end_char"])
                    assert got["score"] == pytest.approx(want["score"], abs=1e-4)
                assert answers[0].status_code == 400 and reason in answers[0].json()["detail"]
        for _ in range(5):
            answers = post_together(fm.url, [("/fill-mask", {"texts": [LATE_MASK]}),
                                             *[("/fill-mask", {"texts": [t], "top_k": 3}) for t in masked * 4]])
            for r, want in zip(answers[1:], alone_fm * 4):
                assert r.status_code == 200, r.text
                got = r.json()["results"][0]
                assert [[p["token"] for p in m] for m in got] == [[p["token"] for p in m] for m in want["results"][0]]
            assert answers[0].status_code == 400 and "[MASK] #1" in answers[0].json()["detail"]
        assert qa.app.state.batchers["qa"].batches < 10 * 17  # they were batched together
        assert fm.app.state.batchers["fill-mask"].batches < 5 * 17


def test_the_batcher_answers_each_item_on_its_own() -> None:
    """H1 (the batcher): an item returned as an exception fails its request alone, and a batch function that
    raises is re-run item by item, so only the item that fails alone fails (with its index)."""
    from bertkit.serve.batching import DynamicBatcher, ItemError, prepare_each

    calls: list[list[int]] = []

    def raising(items: list[int]) -> list[int]:  # a whole-batch failure caused by one item
        calls.append(list(items))
        if any(x < 0 for x in items):
            raise RuntimeError(f"negative in {items}")
        return [2 * x for x in items]

    def per_item(items: list[int]) -> list:
        def prepare(x: int) -> int:
            if x < 0:
                raise ValueError(f"{x} is negative")
            return x
        return prepare_each(items, prepare, lambda xs: [2 * x for x in xs])

    async def scenario(fn) -> list:  # noqa: ANN001
        b = DynamicBatcher(fn, max_batch_size=8, max_delay_s=0.05)
        b.start()
        out = await asyncio.gather(b.submit([1, 2]), b.submit([3, -4, 5]), b.submit([6]), return_exceptions=True)
        await b.stop()
        return out

    for fn in (raising, per_item):
        good1, bad, good2 = asyncio.run(scenario(fn))
        assert good1 == [2, 4] and good2 == [12]
        assert isinstance(bad, ItemError) and bad.index == 1 and "-4" in str(bad.cause)
    assert calls[0] == [1, 2, 3, -4, 5, 6] and sorted(calls[1:]) == [[-4], [1], [2], [3], [5], [6]]


def test_library_errors_are_400_with_the_reason_and_the_connection_stays_open(tmp_path: Path) -> None:
    """T1: a TokenizerError or ConfigError caused by the input is a 400 naming it (was 500), and after it, or after
    a real 500, the client's keep-alive connection still serves the next request."""
    with Server(tiny_folder(tmp_path, "BertForQuestionAnswering")) as qa:
        with httpx.Client(base_url=qa.url) as c:
            first = c.post("/qa", json={"question": "Where?", "context": "John lives in Paris."})
            r = c.post("/qa", json={"question": LONG_QUESTION, "context": "John lives in Paris."})
            assert r.status_code == 400 and "the question has 600 word pieces" in r.json()["detail"]
            again = c.post("/qa", json={"question": "Where?", "context": "John lives in Paris."})
            assert again.status_code == 200 and again.json() == first.json()
            local = {x.extensions["network_stream"].get_extra_info("client_addr") for x in (first, r, again)}
            assert len(local) == 1  # one connection throughout
    with Server(tiny_folder(tmp_path, "BertForMaskedLM")) as fm:
        with httpx.Client(base_url=fm.url) as c:
            r = c.post("/fill-mask", json={"texts": ["fine [MASK] .", LATE_MASK]})
            assert r.status_code == 400
            assert r.json()["detail"].startswith("texts[1]: [MASK] #1 (at character 3000) is word piece 601")
            predictor = fm.app.state.predictor

            def broken(items: list) -> list:
                raise RuntimeError("out of memory, say")

            predictor_embed, fm.app.state.batchers["embed"].fn = fm.app.state.batchers["embed"].fn, broken
            r = c.post("/embed", json={"texts": ["x"]})
            assert r.status_code == 500 and "RuntimeError: out of memory, say" in r.json()["detail"]
            fm.app.state.batchers["embed"].fn = predictor_embed
            after = c.post("/embed", json={"texts": ["x"]})
            assert after.status_code == 200 and after.json()["dimension"] == predictor.config.hidden_size
            local = {x.extensions["network_stream"].get_extra_info("client_addr") for x in (r, after)}
            assert len(local) == 1


def test_a_mask_beyond_the_window_is_refused_by_name_never_dropped(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """N10: a text with one [MASK] in the window and one beyond: the server, the library and `bertkit fill-mask`
    refuse it naming the second mask (the server answered one mask's list, the CLI printed one); masks all in the
    window of a longer text are all answered."""
    from bertkit.cli import main
    from bertkit.errors import ConfigError
    from bertkit.inference.fill_mask import fill_mask

    folder = tiny_folder(tmp_path, "BertForMaskedLM")
    text = "[MASK] " + "word " * 600 + "[MASK]"
    reason = "[MASK] #2 (at character 3007) is word piece 602 of the text, beyond the 510 the model reads"
    with Server(folder) as server:
        c = httpx.Client(base_url=server.url)
        r = c.post("/fill-mask", json={"texts": [text]})
        assert r.status_code == 400 and r.json()["detail"].startswith(f"texts[0]: {reason}")
        r = c.post("/fill-mask", json={"texts": ["[MASK] is [MASK] ." + " word" * 600]})
        assert r.status_code == 200 and len(r.json()["results"][0]) == 2
        model, tokenizer = server.app.state.predictor.model, server.app.state.predictor.tokenizer
    with pytest.raises(ConfigError, match=r"\[MASK\] #2 \(at character 3007\)"):
        fill_mask(model, tokenizer, text)
    capsys.readouterr()
    assert main(["fill-mask", text, "--model", str(folder)]) == 1
    out = capsys.readouterr()
    assert reason in out.err and "[MASK] #1:" not in out.out


@pytest.mark.parametrize("context", ["\u200b", "\x00\x01\x02"])
def test_a_qa_context_without_text_says_so(context: str, tmp_path: Path) -> None:
    """C3: a context that tokenizes to nothing is named as the problem, not the question."""
    with Server(tiny_folder(tmp_path, "BertForQuestionAnswering")) as server:
        r = httpx.post(f"{server.url}/qa", json={"question": "Where does John live?", "context": context})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the context has no text left once tokenized") and "question" not in r.text


@pytest.mark.parametrize("path,body,field", [
    ("/embed", {"texts": ["a"], "poolng": "cls"}, "poolng"),
    ("/fill-mask", {"texts": ["a [MASK]"], "topk": 3}, "topk"),
    ("/classify", {"texts": ["a"], "pair": ["b"]}, "pair"),
    ("/ner", {"texts": ["a"], "labels": True}, "labels"),
    ("/qa", {"question": "a", "context": "b", "max_answer_length": 3}, "max_answer_length"),
])
def test_unknown_request_fields_are_422_naming_them(path: str, body: dict, field: str, tmp_path: Path) -> None:
    """N13: a field the endpoint does not know is refused, named (was ignored: "poolng" gave mean pooling)."""
    with Server(tiny_folder(tmp_path, "BertForMaskedLM")) as server:
        r = httpx.post(f"{server.url}{path}", json=body)
        assert r.status_code == 422 and field in r.text and "extra" in r.text.lower()
        assert httpx.post(f"{server.url}/embed", json={"texts": ["a"], "pooling": "cls"}).status_code == 200
