"""Bounded answers: what one request can make the server or a verb compute or return is bounded, and checked before
the work, the same way for every endpoint: the answer's worst-case size against max_response_bytes (the 2026-11-28
attack report's H1: a 347-byte /search request answered 58 MB), the masks and predictions of /fill-mask, top_k capped
at the index's rows before FAISS allocates (H2: --top-k 1e9 took all of a 23 GB machine), the attention picture's
pixels; and every answer's numbers finite (S7: `Infinity` printed, `null` served)."""

from __future__ import annotations

import math
import os
import random
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
pytest.importorskip("uvicorn")
pytest.importorskip("faiss", reason="/search needs faiss-cpu (pip install 'bertkit[index]')")
from inference_helpers import tiny_folder  # noqa: E402
from test_serve import Server  # noqa: E402

from bertkit.inference.index import IndexOptions, VectorIndex, build_index  # noqa: E402
from bertkit.jobs.embed import EmbedConfig  # noqa: E402
from bertkit.jobs.embed import run as embed  # noqa: E402
from bertkit.model.heads import base_model  # noqa: E402
from bertkit.serve import protocols  # noqa: E402


WORDS = "the river bank loan fish song train music night forest road car boat water film good bad".split()


def index_of(tmp: Path, model: Path, texts: list[str], name: str = "idx") -> Path:
    """A `bertkit index` folder of `texts` embedded by `model`."""
    (tmp / f"{name}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    embed(EmbedConfig(input=str(tmp / f"{name}.txt"), output=str(tmp / f"{name}-emb"), model=str(model),
                      normalize=True, precision="fp32", progress=False))
    build_index(tmp / f"{name}-emb", tmp / name, IndexOptions())
    return tmp / name


def words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars))[:chars].strip()


# --- the answer's size ---------------------------------------------------------------------------------------


def test_search_amplification_is_refused_before_searching(tmp_path: Path) -> None:
    """H1 as reported, with the default limits: 64 queries x top_k 100 over rows of 9,000 characters (a 347-byte
    request, answered 58 MB) is a 413 naming the sizes, before anything is embedded or searched; a usual search of
    the same index is answered, within the bound."""
    rng = random.Random(0)
    model = tiny_folder(tmp_path, "BertModel")
    folder = index_of(tmp_path, model, [words(rng, 9000) for _ in range(100)])
    with Server(model, index=str(folder)) as server:
        batcher = server.app.state.batchers["search"]
        r = httpx.post(f"{server.url}/search", json={"queries": ["x"] * 64, "top_k": 100}, timeout=120)
        assert r.status_code == 413, (r.status_code, len(r.content))
        detail = r.json()["detail"]
        assert "64 queries x top_k 100" in detail and "the limit is 16,777,216 per request" in detail
        assert batcher.items == 0  # refused before the queries were embedded
        r = httpx.post(f"{server.url}/search", json={"queries": ["a film about a river"], "top_k": 10}, timeout=60)
        assert r.status_code == 200 and len(r.json()["results"][0]) == 10
        assert len(r.content) <= server.app.state.predictor.hit_bytes(10) + 64


def test_fill_mask_amplification_is_refused_before_computing(tmp_path: Path) -> None:
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


def _text_of(chars: int) -> str:
    return ("a cat sat on the mat " * (chars // 21 + 1))[:chars]


# Each endpoint: its head, a request made larger by n (n texts, masks, queries, choices or characters), and a
# max_response_bytes that the sweep n = 1, 2, 4, 8, 15 crosses; under max_request_texts 16, max_text_chars 2,000.
SWEEP: dict[str, tuple[str, dict[str, Any], Callable[[int], dict[str, Any]], int]] = {
    "embed": ("BertModel", {}, lambda n: {"texts": [_text_of(2000)] * n, "truncate": True}, 6_000),
    "v1/embeddings": ("BertModel", {}, lambda n: {"input": [_text_of(300)] * n, "model": "m"}, 6_000),
    "tokenize": ("BertModel", {}, lambda n: {"inputs": [_text_of(2000)] * n}, 500_000),
    "rerank": ("BertForSequenceClassification", {}, lambda n: {"query": "Where?", "texts": [_text_of(300)] * n,
                                                               "return_text": True}, 2_000),
    "fill-mask": ("BertForMaskedLM", {}, lambda n: {"texts": ["[MASK] " * 80] * n, "top_k": 5}, 150_000),
    "search": ("BertModel", {}, lambda n: {"queries": ["a river"] * n, "top_k": 50}, 250_000),
    "classify": ("BertForSequenceClassification",
                 {"num_labels": 200, "label_names": [f"label-{i:03d}-{'x' * 30}" for i in range(200)]},
                 lambda n: {"texts": ["a good film"] * n}, 100_000),
    "ner": ("BertForTokenClassification", {}, lambda n: {"texts": ["," * 2000] * n}, 700_000),  # a word per comma
    "qa": ("BertForQuestionAnswering", {}, lambda n: {"question": "Where?", "context": _text_of(125 * n)}, 1_100),
    "choose": ("BertForMultipleChoice", {}, lambda n: {"context": "She opened the umbrella",
                                                      "choices": [_text_of(1000)] * max(n, 2)}, 1_300),
}


WORK = {"v1/embeddings": "embed"}  # the batcher of an endpoint that shares another's


@pytest.mark.parametrize("endpoint", list(SWEEP))
def test_every_endpoint_answers_within_its_bound_or_refuses_before_computing(endpoint: str, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated: every endpoint, with requests growing up to the largest the other limits allow. Each answer is at
    most max_response_bytes; each request whose answer could be larger is a 413 naming the limit, and nothing of it
    reached the model. Both happen for every endpoint."""
    head, config, body, limit = SWEEP[endpoint]
    folder = tiny_folder(tmp_path, head, **config)
    settings: dict[str, Any] = {"max_request_texts": 16, "max_text_chars": 2000, "max_top_k": 50,
                                "max_response_bytes": limit}
    if endpoint == "search":
        rng = random.Random(1)
        rows = [words(rng, rng.choice([20, 300, 2000])) for _ in range(60)]
        settings["index"] = str(index_of(tmp_path, folder, rows))
    outcomes = set()
    tokenized: list[str] = []  # /tokenize's work is the tokenizer's, not a batcher's
    tokens_of = protocols.tokens_of
    monkeypatch.setattr(protocols, "tokens_of", lambda *args: tokenized.append(args[1]) or tokens_of(*args))
    with Server(folder, **settings) as server:
        batcher = server.app.state.batchers.get(WORK.get(endpoint, endpoint))

        def work() -> int:
            return batcher.items if batcher is not None else len(tokenized)

        for n in (1, 2, 4, 8, 15):
            before = work()
            r = httpx.post(f"{server.url}/{endpoint}", json=body(n), timeout=120)
            outcomes.add(r.status_code)
            if r.status_code == 413:
                answer = r.json()  # OpenAI's shape under /v1/
                assert f"the limit is {limit:,} per request" in (answer.get("detail") or answer["error"]["message"])
                assert work() == before, f"n={n}: refused after computing"
            else:
                assert r.status_code == 200, r.text[:300]
                assert len(r.content) <= limit, f"n={n}: {len(r.content)} bytes answered, the bound is {limit}"
    assert outcomes == {200, 413}


# --- top_k beyond the index -------------------------------------------------------------------------------------
def _capped(code: str, gigabytes: float = 6.0) -> subprocess.CompletedProcess:
    """`code` in a fresh Python whose address space is capped: an uncapped k would fail to allocate, not swap."""
    limit = int(gigabytes * 2**30)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)})


def test_top_k_beyond_the_index_gives_every_row_without_allocating_k(tmp_path: Path) -> None:
    """H2: k = 10**9 over an 8-row index, for the Python API and the CLI, in a process capped at 6 GB (FAISS would
    allocate 12 GB per query): every row once, best first, and no traceback."""
    model = tiny_folder(tmp_path, "BertModel")
    folder = index_of(tmp_path, model, [f"{w} {v}" for w, v in zip(WORDS, WORDS[8:16])])
    done = _capped(textwrap.dedent(f"""
        import numpy as np
        from bertkit.inference.index import VectorIndex
        index = VectorIndex({str(folder)!r})
        scores, rows = index.search(np.ones((2, index.dim), np.float32), 10**9)
        print(scores.shape, sorted(rows[0].tolist()), [len(h) for h in index.results(scores, rows)])
        """))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"(2, 8) {list(range(8))} [8, 8]"
    done = _capped(f"from bertkit.cli import main; raise SystemExit(main(['search', '--index', {str(folder)!r}, "
                   "'--top-k', '100000000', 'a river']))")
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-2000:]
    if done.returncode == 0:  # the options layer may also refuse a top_k this large, by name
        assert done.stdout.count('"rank"') == 8
    else:
        assert "top_k" in done.stderr


# --- the output side: never Infinity, NaN or null ---------------------------------------------------------------
def _inf_first(index: VectorIndex) -> None:
    """Make `index` answer as one holding an infinite vector would: its first hit scores inf."""
    search = index.search

    def poisoned(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = search(vectors, k)
        scores[:, 0] = np.inf
        return scores, rows

    index.search = poisoned  # type: ignore[method-assign]


def test_a_non_finite_score_is_an_error_naming_the_row_never_infinity_or_null(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """S7: a hit scoring inf is a message naming its row: `bertkit search` prints no `Infinity` (exit 1, no
    traceback), /search answers 500 with the same message instead of "score": null."""
    from bertkit.cli import main
    import bertkit.inference.index as index_module

    model = tiny_folder(tmp_path, "BertModel")
    folder = index_of(tmp_path, model, ["the river bank", "a loan from the bank", "fish in the river"])
    opened = index_module.VectorIndex.__init__

    def opened_poisoned(self: VectorIndex, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        _inf_first(self)

    monkeypatch.setattr(index_module.VectorIndex, "__init__", opened_poisoned)
    assert main(["search", "--index", str(folder), "--top-k", "2", "river"]) == 1
    out, err = capsys.readouterr()
    assert "Infinity" not in out and "NaN" not in out and "Traceback" not in err
    assert "scores inf for query 0: its vector is not finite" in err and "row " in err
    monkeypatch.undo()
    with Server(model, index=str(folder)) as server:
        _inf_first(server.app.state.predictor.index)
        r = httpx.post(f"{server.url}/search", json={"queries": ["river"], "top_k": 2})
        assert r.status_code == 500 and "scores inf for query 0: its vector is not finite" in r.json()["detail"]
        assert "null" not in r.text


@pytest.mark.parametrize("head,endpoint,body", [
    ("BertModel", "embed", {"texts": ["a cat", "a dog"]}),
    ("BertForMaskedLM", "fill-mask", {"texts": ["a [MASK] sat"], "top_k": 3}),
    ("BertForTokenClassification", "ner", {"texts": ["John lives in Paris"]}),
    ("BertForQuestionAnswering", "qa", {"question": "Where?", "context": "John lives in Paris."}),
])
def test_a_model_that_computes_nan_gets_a_500_naming_it_never_null(head: str, endpoint: str, body: dict,
                                                                   tmp_path: Path) -> None:
    """S7 for every endpoint: a model whose weights hold NaN answers 500 with a message saying so (and where),
    never a 200 whose numbers are null."""
    with Server(tiny_folder(tmp_path, head)) as server:
        with torch.no_grad():
            base_model(server.app.state.predictor.model).embeddings.LayerNorm.weight.fill_(math.nan)
        r = httpx.post(f"{server.url}/{endpoint}", json=body)
        assert r.status_code == 500, r.text[:300]
        assert "not a finite number" in r.json()["detail"] or "not finite" in r.json()["detail"]
        assert "null" not in r.text


# --- the attention picture ---------------------------------------------------------------------------------------
def test_the_attention_picture_is_bounded_before_it_is_drawn() -> None:
    """`bertkit attention --max-length 250` on a 6 x 12 model drew 37,000 x 19,000 pixels for minutes and ran out of
    6 GB; the picture's resolution is lowered to stay within MAX_PICTURE_PIXELS, for any grid and length."""
    from bertkit.inference import attention

    for layers, heads, tokens in [(6, 12, 64), (12, 12, 64), (6, 12, 250), (24, 16, 512), (48, 64, 512)]:
        width, height, dpi = attention.picture_size(layers, heads, tokens)
        assert width * height * dpi**2 <= attention.MAX_PICTURE_PIXELS * 1.0001
    assert attention.picture_size(6, 12, 64)[2] == attention.DPI  # the default picture of MiniLM as before
