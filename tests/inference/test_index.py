"""Vector indexes over an embeddings folder: exact search equals a numpy brute force, the approximate kinds equal it
when told to look everywhere, and an index refuses a query encoder of another model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inference_helpers import tiny_folder  # noqa: E402

pytest.importorskip("faiss", reason="vector indexes need faiss-cpu (pip install 'bertkit[index]')")

import bertkit  # noqa: E402
from bertkit.cli import main  # noqa: E402
from bertkit.errors import ConfigError  # noqa: E402
from bertkit.inference.index import IndexOptions, VectorIndex, build_index  # noqa: E402
from bertkit.jobs.embed import EmbedConfig  # noqa: E402
from bertkit.jobs.embed import run as embed  # noqa: E402
from bertkit.jobs.search import SearchConfig, search  # noqa: E402

WORDS = "river bank money loan tree forest water fish boat field city road car train music song".split()


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 12)))) for _ in range(n)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A tiny model, 80 texts embedded (normalised, shards of 30) and their exact index."""
    tmp = tmp_path_factory.mktemp("index")
    model = str(tiny_folder(tmp, "BertModel"))
    texts = corpus(80)
    (tmp / "corpus.jsonl").write_text("".join(json.dumps({"key": f"doc-{i}", "text": t}) + "\n"
                                              for i, t in enumerate(texts)))
    embed(EmbedConfig(input=str(tmp / "corpus.jsonl"), output=str(tmp / "emb"), model=model, normalize=True,
                      precision="fp32", id_field="key", shard_size=30, progress=False))
    assert main(["index", str(tmp / "emb"), "-o", str(tmp / "exact")]) == 0
    return {"tmp": tmp, "model": model, "texts": texts}


def brute_force(built: dict, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows by inner product of normalised vectors, in numpy."""
    bert = bertkit.load(built["model"])
    rows = bert.encode(built["texts"], normalize=True, precision="fp32")
    q = bert.encode(queries, normalize=True, precision="fp32")
    scores = q @ rows.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def test_exact_search_equals_numpy_brute_force(built: dict, capsys: pytest.CaptureFixture) -> None:
    queries = ["river bank water", "music song train", "loan money"]
    want_scores, want_rows = brute_force(built, queries, 5)
    answers = search(SearchConfig(index=str(built["tmp"] / "exact"), queries=queries, top_k=5))
    for answer, scores, rows in zip(answers, want_scores, want_rows):
        got = answer["results"]
        np.testing.assert_allclose([h["score"] for h in got], scores, rtol=0, atol=1e-5)
        assert [h["row"] for h in got] == rows.tolist() or np.allclose(np.diff(scores), 0, atol=1e-6)
        assert [h["id"] for h in got] == [f"doc-{r}" for r in [h["row"] for h in got]]
        assert [h["text"] for h in got] == [built["texts"][h["row"]] for h in got]
    # the CLI prints the same, one JSON line per query
    assert main(["search", "--index", str(built["tmp"] / "exact"), "--top-k", "5", *queries]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == answers


@pytest.mark.parametrize("kind,options", [("hnsw", {"hnsw_m": 8, "ef_search": 200}),
                                          ("ivf", {"nlist": 4, "nprobe": 4, "train_size": 80})])
def test_approximate_kinds_that_look_everywhere_equal_exact(built: dict, kind: str, options: dict) -> None:
    folder = built["tmp"] / kind
    build_index(built["tmp"] / "emb", folder, IndexOptions(kind=kind, **options))
    queries = corpus(6, seed=9)
    exact = search(SearchConfig(index=str(built["tmp"] / "exact"), queries=queries, top_k=10))
    approx = search(SearchConfig(index=str(folder), queries=queries, top_k=10))
    for e, a in zip(exact, approx):
        np.testing.assert_allclose([h["score"] for h in a["results"]], [h["score"] for h in e["results"]], atol=1e-5)
    index = VectorIndex(folder)
    assert index.options.kind == kind and len(index) == 80 and index.settings["normalize"] is True
    index.close()


def test_an_index_refuses_another_model_and_bad_options(built: dict, tmp_path: Path) -> None:
    other = str(tiny_folder(tmp_path, "BertModel", seed=1))
    with pytest.raises(ConfigError, match=r"index .*exact: built with other embedding settings \(model_sha256: "):
        search(SearchConfig(index=str(built["tmp"] / "exact"), queries=["river"], model=other))
    with pytest.raises(ConfigError, match="IndexOptions.pq_m: expected a divisor of the embeddings' dimension 32"):
        build_index(built["tmp"] / "emb", tmp_path / "pq", IndexOptions(kind="ivf", pq_m=5))
    with pytest.raises(ConfigError, match="IndexOptions.kind: expected one of exact, hnsw, ivf, found 'lsh'"):
        IndexOptions(kind="lsh")
    with pytest.raises(ConfigError, match="no queries"):
        search(SearchConfig(index=str(built["tmp"] / "exact")))
    assert main(["index", str(tmp_path / "nothing"), "-o", str(tmp_path / "i")]) == 1


def test_ivf_pq_finds_most_of_the_exact_neighbours(built: dict) -> None:
    """IVF-PQ (8 sub-vectors of 8 bits) on 80 rows: lossy codes, but the best hit is still among its top 3."""
    folder = built["tmp"] / "ivfpq"
    build_index(built["tmp"] / "emb", folder, IndexOptions(kind="ivf", nlist=2, nprobe=2, pq_m=8, pq_bits=4,
                                                           train_size=80))
    queries = built["texts"][:10]  # each query's best row is itself
    approx = search(SearchConfig(index=str(folder), queries=queries, top_k=3))
    assert sum(i in [h["row"] for h in a["results"]] for i, a in enumerate(approx)) >= 8
