"""`bertkit search --rerank FOLDER --rerank-top N`: the index's top N hits re-scored by a cross-encoder trained by
`bertkit finetune --task classification` on (query, text) pairs, two labels or regression. The re-ordered hits are
the index's top N sorted by sentence-transformers' CrossEncoder.predict on the same folder (an independent
implementation reading the same files), each with both scores; `bertkit.load(FOLDER).rank` is CrossEncoder.rank;
a folder that is no pair classifier, and more hits than are re-scored, are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss", reason="vector indexes need faiss-cpu (pip install 'bertkit[index]')")

import bertkit  # noqa: E402
from bertkit.cli import main  # noqa: E402
from bertkit.errors import ConfigError  # noqa: E402
from bertkit.jobs.embed import EmbedConfig  # noqa: E402
from bertkit.jobs.embed import run as embed  # noqa: E402
from bertkit.jobs.search import SearchConfig, search  # noqa: E402

DOCUMENTS = ["The river floods the valley every spring.", "Banks lend money to families who buy houses.",
             "A violin and a cello played the old song.", "The train to the city leaves at nine.",
             "Salmon swim up the river to lay their eggs.", "Interest rates rose again this year.",
             "The orchestra rehearsed the symphony all night.", "Cars queue on the road into town.",
             "Fishermen mend their nets on the boat.", "The loan was paid back within a year.",
             "She sang a song about the sea.", "Buses and trams carry people through the city."]
QUERIES = ["where do fish live", "how do I borrow money", "music played by an orchestra"]
RELEVANT = {0: (0, 4, 8), 1: (1, 5, 9), 2: (2, 6, 10)}  # each query's documents (the rest are negatives)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> Path:
    """The documents embedded by the tiny random encoder (normalised) and indexed exactly."""
    tmp = tmp_path_factory.mktemp("rerank-index")
    (tmp / "docs.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                                            for i, t in enumerate(DOCUMENTS)))
    embed(EmbedConfig(input=str(tmp / "docs.jsonl"), output=str(tmp / "emb"), model=str(tiny_dir), normalize=True,
                      precision="fp32", id_field="id", progress=False))
    assert main(["index", str(tmp / "emb"), "-o", str(tmp / "index")]) == 0
    return tmp / "index"


@pytest.fixture(scope="module", params=["binary", "regression"])
def reranker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> Path:
    """A cross-encoder fine-tuned by the real CLI from the tiny model on (query, text) pairs: 0/1 labels (two
    labels, softmax) or relevance scores (--regression, one output)."""
    tmp = tmp_path_factory.mktemp(f"reranker-{request.param}")
    rows = [{"query": q, "text": d, "label": float(i in RELEVANT[n]) if request.param == "regression"
             else int(i in RELEVANT[n])} for n, q in enumerate(QUERIES) for i, d in enumerate(DOCUMENTS)]
    (tmp / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["finetune", "--task", "classification", "--model", str(tiny_dir), "--train", str(tmp / "pairs.jsonl"),
                 "--text-column", "query", "--text-pair-column", "text", "--max-length", "64", "--epochs", "2",
                 "--batch-size", "8", "--lr", "1e-3", "--seed", "1", "--output", str(tmp / "out"), "--no-progress",
                 *(["--regression"] if request.param == "regression" else [])]) == 0
    return tmp / "out" / "final"


def cross_encoder_scores(folder: Path, query: str, texts: list[str]) -> np.ndarray:
    """sentence-transformers' CrossEncoder on the folder: a one-output head's sigmoid, a two-label head's softmax
    probability of its second label ("1")."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu")
    scores = model.predict([(query, t) for t in texts], apply_softmax=True, batch_size=64)
    return scores if scores.ndim == 1 else scores[:, 1]


def test_reranked_hits_are_the_index_top_n_sorted_by_the_cross_encoders_scores(index: Path, reranker: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("sentence_transformers")
    top = 8
    plain = search(SearchConfig(index=str(index), queries=QUERIES, top_k=top))
    reranked = search(SearchConfig(index=str(index), queries=QUERIES, top_k=5, rerank=str(reranker), rerank_top=top))
    for before, after in zip(plain, reranked):
        hits = before["results"]
        want = dict(zip((h["row"] for h in hits), cross_encoder_scores(reranker, before["query"],
                                                                       [h["text"] for h in hits])))
        got = after["results"]
        scores = [h["rerank_score"] for h in got]
        assert len(got) == 5 and [h["rank"] for h in got] == [1, 2, 3, 4, 5]
        assert scores == sorted(scores, reverse=True)
        np.testing.assert_allclose(scores, [want[h["row"]] for h in got], rtol=0, atol=1e-5)
        # the five kept are the cross-encoder's best five: a hit left out scores no higher than the fifth (up to
        # float rounding, which may order near-equal scores either way)
        assert max(w for row, w in want.items() if row not in {h["row"] for h in got}) <= scores[-1] + 1e-5
        by_row = {h["row"]: h for h in hits}
        assert [(h["score"], h["index_rank"], h["id"], h["text"]) for h in got] == [
            (by_row[h["row"]]["score"], by_row[h["row"]]["rank"], by_row[h["row"]]["id"], by_row[h["row"]]["text"])
            for h in got]
    # the CLI prints the same answers, one JSON line per query
    assert main(["search", "--index", str(index), "--top-k", "5", "--rerank", str(reranker), "--rerank-top",
                 str(top), *QUERIES]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == reranked


def test_rank_on_a_trained_reranker_is_cross_encoder_rank(reranker: Path) -> None:
    """Bert.rank on a folder `bertkit finetune` wrote gives CrossEncoder.rank's order and scores."""
    pytest.importorskip("sentence_transformers")
    ranked = bertkit.load(reranker).rank(QUERIES[0], DOCUMENTS, top_k=6)
    want = cross_encoder_scores(reranker, QUERIES[0], DOCUMENTS)
    order = np.argsort(-want, kind="stable")[:6]
    assert [hit["corpus_id"] for hit in ranked] == order.tolist()
    np.testing.assert_allclose([hit["score"] for hit in ranked], want[order], rtol=0, atol=1e-5)


def test_rerank_refuses_a_folder_that_is_not_a_pair_classifier(index: Path, tiny_dir: Path, finetuned_dir: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    """A bare encoder and a classifier of single texts (SST-2) are named with what they hold; the CLI says so."""
    for folder, held in ((tiny_dir, "holds a BertModel"),
                         (finetuned_dir, "holds a classifier of single texts with 2 labels")):
        with pytest.raises(ConfigError, match=f"{held}; reranking needs a classifier of \\(query, text\\) pairs"):
            search(SearchConfig(index=str(index), queries=["q"], rerank=str(folder)))
    assert main(["search", "--index", str(index), "--rerank", str(tiny_dir), "q"]) != 0
    err = capsys.readouterr().err
    assert "holds a BertModel" in err and "Traceback" not in err


def test_more_hits_than_are_reranked_is_refused(index: Path, reranker: Path) -> None:
    with pytest.raises(ConfigError, match="give --top-k 5 or less, or --rerank-top 6 or more"):
        search(SearchConfig(index=str(index), queries=["q"], top_k=6, rerank=str(reranker), rerank_top=5))
