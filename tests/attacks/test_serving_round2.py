"""Second attack round on the HTTP service (issue 24): a bad request batched with good ones, slow clients holding
connections, response amplification, library errors as 500s, a dropped [MASK], a misleading /qa message, frozen NER
folders without /ner, and unknown request fields ignored."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
pytest.importorskip("uvicorn")
from inference_helpers import minilm_folder, tiny_config, tiny_folder  # noqa: E402
from test_serve import Server, free_port  # noqa: E402

LONG_QUESTION = "why " * 600  # 600 word pieces: no room left for the context in 512
LATE_MASK = "word " * 600 + "[MASK]"  # its only [MASK] beyond the first 512 tokens


def post_together(url: str, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """The requests sent at once, each on its own connection (so the server batches them together)."""
    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            return await asyncio.gather(*(client.post(path, json=body) for path, body in requests))
    return asyncio.run(go())


def test_h1_a_bad_request_fails_alone_not_the_requests_batched_with_it(tmp_path: Path) -> None:
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


def test_h1_the_batcher_answers_each_item_on_its_own() -> None:
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


class GuardedServer(Server):
    """`bertkit.serve.build_server` in a thread: the server `bertkit serve` runs, with its connection guard."""

    def __init__(self, folder: Path | str, **settings: object) -> None:
        from bertkit.serve import ServeSettings, build_server

        self.port = free_port()
        self.server = build_server(folder, "127.0.0.1", self.port, ServeSettings(precision="fp32", **settings))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"


def stalled_connections(port: int, with_body: int, half_head: int) -> list[socket.socket]:
    """Connections that sent a request head and part of its body, then ones that sent half a head; all stall."""
    head = (f"POST /embed HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            "content-length: 200\r\n\r\n").encode()
    socks = []
    for i in range(with_body + half_head):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(head + b'{"texts": ["' if i < with_body else head[:40])
        socks.append(s)
    return socks


def answer_of(s: socket.socket, wait_s: float) -> bytes | None:
    """What the server sent before closing the connection; None if it is still open after wait_s."""
    s.settimeout(wait_s)
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (TimeoutError, socket.timeout):
        return None
    except ConnectionResetError:
        pass
    return data


def test_h2_stalled_connections_are_closed_and_make_room_for_real_clients(tmp_path: Path) -> None:
    """H2 (in-process): with room for 20 connections and 2 s to send a request, 40 stalled ones (25 in the body,
    15 in the head) cannot lock a client out: the oldest make room for the newer, /embed answers at once, and
    every stalled connection is closed within the read deadline (with a 408); an endless body still gets 413."""
    with GuardedServer(tiny_folder(tmp_path, "BertModel"), max_connections=20, read_timeout_s=2.0) as server:
        guard = server.server.guard
        socks = stalled_connections(server.port, 25, 15)
        start = time.perf_counter()
        with httpx.Client(base_url=server.url, timeout=10) as client:
            r = client.post("/embed", json={"texts": ["a normal request"]})
        assert r.status_code == 200 and time.perf_counter() - start < 2.0
        answers = [answer_of(s, 4.0) for s in socks]
        for s in socks:
            s.close()
        assert None not in answers  # every one closed by the server
        evicted = guard.counts["made_room"]
        assert evicted == 21  # 40 + the client's connection, 20 fit: the 21 oldest (all sending a body) made room
        assert all(a == b"" for a in answers[:evicted])
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers[evicted:])  # the rest ran out of time
        assert guard.counts["timed_out"] >= 40 - evicted and len(guard.open) == 0

        def chunks():  # no Content-Length, over the body limit: still refused as it streams in
            for _ in range(80):
                yield b"a" * 2**16
        r = httpx.post(f"{server.url}/embed", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "the limit is 4194304" in r.json()["detail"]


def _fd_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.slow
def test_h2_slowloris_at_ulimit_1024_does_not_lock_out_clients_or_flood_the_log(tmp_path: Path) -> None:
    """H2 (the report's attack): `bertkit serve` under `ulimit -n 1024` (soft and hard), 1,100 stalled connections
    (800 in the body, 300 in the head): a normal /embed answers within 2 s, the log stays under 1 MB, and every
    stalled connection is closed by the read deadline (all with the default settings)."""
    port, log_path = free_port(), tmp_path / "serve.log"
    import bertkit

    env = dict(os.environ, PYTHONPATH=str(Path(bertkit.__file__).resolve().parents[1]))  # the bertkit under test
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", minilm_folder(), "--port",
                                 str(port), "--precision", "fp32"],
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_fd_limit_1024, env=env)
    url = f"http://127.0.0.1:{port}"
    socks: list[socket.socket] = []
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None and time.time() < deadline, log_path.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        opened = time.perf_counter()
        socks = stalled_connections(port, 800, 300)
        seconds = []
        for pause in (0.0, 2.0, 0.0):  # at once, then with the attack established
            time.sleep(pause)
            start = time.perf_counter()
            r = httpx.post(f"{url}/embed", json={"texts": ["a normal request"]}, timeout=10)
            seconds.append(time.perf_counter() - start)
            assert r.status_code == 200
        time.sleep(max(0.0, opened + 11.0 - time.perf_counter()))  # past the default 10 s read deadline
        still_open = sum(answer_of(s, 0.5) is None for s in socks)
        size = log_path.stat().st_size
        print(f"/embed under 1,100 stalled connections: {', '.join(f'{s:.2f}' for s in seconds)} s; "
              f"log {size} bytes; still open after the deadline: {still_open}")
        assert max(seconds) < 2.0 and size < 2**20 and still_open == 0
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_h3_fill_mask_amplification_is_refused_before_computing(tmp_path: Path) -> None:
    """H3: masks per text and masks x top_k per request are bounded (413 with the reason, nothing computed)."""
    with Server(tiny_folder(tmp_path, "BertForMaskedLM")) as server:
        batcher = server.app.state.batchers["fill-mask"]
        c = httpx.Client(base_url=server.url, timeout=60)
        r = c.post("/fill-mask", json={"texts": ["[MASK]" * 100] * 8, "top_k": 100})
        assert r.status_code == 413 and "100 [MASK]s; the limit is 80 per text" in r.json()["detail"]
        r = c.post("/fill-mask", json={"texts": ["[MASK] " * 60] * 4, "top_k": 100})
        assert r.status_code == 413 and "240 [MASK]s x top_k 100 = 24000 predictions; the limit is 20000" in r.text
        assert batcher.items == 0  # refused before anything reached the model
        r = c.post("/fill-mask", json={"texts": ["[MASK] " * 80] * 2, "top_k": 100})  # 16,000: within both
        assert r.status_code == 200 and [len(m) for m in r.json()["results"]] == [80, 80]


def test_t1_library_errors_are_400_with_the_reason_and_the_connection_stays_open(tmp_path: Path) -> None:
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


def test_n10_a_mask_beyond_the_window_is_refused_by_name_never_dropped(tmp_path: Path,
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
def test_c3_qa_context_without_text_says_so(context: str, tmp_path: Path) -> None:
    """C3: a context that tokenizes to nothing is named as the problem, not the question."""
    with Server(tiny_folder(tmp_path, "BertForQuestionAnswering")) as server:
        r = httpx.post(f"{server.url}/qa", json={"question": "Where does John live?", "context": context})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the context has no text left once tokenized") and "question" not in r.text


def test_c7_frozen_ner_folder_is_served_as_predict_answers(tmp_path: Path) -> None:
    """C7: a feature-based (--frozen) NER folder gets /ner (was 404), tagging each word as `bertkit predict` does."""
    from bertkit.jobs import predict
    from bertkit.model.heads import BertForFrozenTokenClassification

    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    settings = {"max_length": 64, "label_names": labels, "frozen": True, "frozen_features": "weighted_sum",
                "tagger": "bilstm", "tagger_hidden": 8, "tagger_dropout": 0.1}
    torch.manual_seed(3)
    model = BertForFrozenTokenClassification(tiny_config(num_labels=5, label_names=labels, task="ner",
                                                         task_settings=settings))
    folder = tiny_folder(tmp_path, "BertModel")  # for its vocabulary files
    model.save_pretrained(str(folder))
    sentences = ["john smith lives in paris near the river", "the committee met in london on tuesday",
                 "unbelievably", "angela merkel visited new york and washington last week"]
    (tmp_path / "in.txt").write_text("\n\n".join("\n".join(s.split()) for s in sentences) + "\n")
    predict.run(predict.PredictConfig(str(folder), str(tmp_path / "in.txt"), str(tmp_path / "out.txt")))
    blocks = (tmp_path / "out.txt").read_text().strip().split("\n\n")
    want = [[line.split("\t") for line in block.splitlines()] for block in blocks]
    with Server(folder) as server:
        r = httpx.post(f"{server.url}/ner", json={"texts": sentences})
    assert r.status_code == 200, r.text
    got = [[[t["token"], t["label"]] for t in tagged] for tagged in r.json()["results"]]
    assert got == want
    assert len({label for s in want for _, label in s}) > 1  # the tagger does not just say O


@pytest.mark.parametrize("path,body,field", [
    ("/embed", {"texts": ["a"], "poolng": "cls"}, "poolng"),
    ("/fill-mask", {"texts": ["a [MASK]"], "topk": 3}, "topk"),
    ("/classify", {"texts": ["a"], "pair": ["b"]}, "pair"),
    ("/ner", {"texts": ["a"], "labels": True}, "labels"),
    ("/qa", {"question": "a", "context": "b", "max_answer_length": 3}, "max_answer_length"),
])
def test_n13_unknown_request_fields_are_422_naming_them(path: str, body: dict, field: str, tmp_path: Path) -> None:
    """N13: a field the endpoint does not know is refused, named (was ignored: "poolng" gave mean pooling)."""
    with Server(tiny_folder(tmp_path, "BertForMaskedLM")) as server:
        r = httpx.post(f"{server.url}{path}", json=body)
        assert r.status_code == 422 and field in r.text and "extra" in r.text.lower()
        assert httpx.post(f"{server.url}/embed", json={"texts": ["a"], "pooling": "cls"}).status_code == 200
