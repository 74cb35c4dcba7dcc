"""The embedding task (`bertkit finetune --task embedding`): reading pairs, triples, scored pairs, plain text and
retrieval sets; the folder it trains, loaded unchanged by sentence-transformers (the same vectors), `bertkit embed`,
`index`, `search` and the server; retrieval evaluation during training and by `bertkit evaluate`, equal to
sentence-transformers' InformationRetrievalEvaluator on the same embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.data.retrieval import RetrievalSet, read_retrieval_set
from bertkit.errors import ConfigError, DataError
from bertkit.model.folder import read_folder
from bertkit.model.heads import BertForEmbedding
from bertkit.model.losses import cosent_loss, in_batch_negatives_loss
from bertkit.tasks import get_task, metrics
from bertkit.tasks.embedding import QueryExample, TextsExample, evaluate_retrieval, retrieval_metrics, retrieval_set

TOPICS = ["cat", "dog", "car", "tree", "rain", "music", "bread", "river", "moon", "book", "chess", "coffee"]
TEXTS = ["A cat sat on the mat.", "what about the dog", "Something entirely different, and much longer than the others."]


def pair_rows() -> list[dict[str, str]]:
    """36 query / positive / hard-negative rows, three per topic (every positive distinct)."""
    return [{"query": f"what about the {t} {i}", "positive": f"A text about the {t}, number {i}.",
             "negative": f"Something about the {TOPICS[(n + 1) % len(TOPICS)]}."}
            for n, t in enumerate(TOPICS) for i in range(3)]


def write_beir(folder: Path, rows: list[dict[str, str]]) -> Path:
    """A BEIR folder of the rows: queries, their positives as the corpus (plus the negatives), qrels/test.tsv."""
    (folder / "qrels").mkdir(parents=True)
    docs = list(dict.fromkeys([r["positive"] for r in rows] + [r["negative"] for r in rows]))
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": d}) + "\n"
                                                 for i, d in enumerate(docs)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": r["query"]}) + "\n"
                                                  for i, r in enumerate(rows)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{docs.index(r['positive'])}\t1\n" for i, r in enumerate(rows)))
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> dict[str, Path]:
    """The tiny model trained by the real CLI on query/positive/negative triples for two epochs, a BEIR folder of
    the same rows as its dev set (the best checkpoint by MRR@10)."""
    tmp = tmp_path_factory.mktemp("embedding")
    rows = pair_rows()
    (tmp / "triples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    beir = write_beir(tmp / "beir", rows)
    assert main(["finetune", "--task", "embedding", "--model", str(tiny_dir), "--train", str(tmp / "triples.jsonl"),
                 "--dev", str(beir), "--max-length", "32", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3",
                 "--seed", "1", "--output", str(tmp / "out"), "--no-progress"]) == 0
    return {"tmp": tmp, "best": tmp / "out" / "best", "beir": beir, "triples": tmp / "triples.jsonl"}


def test_finetune_keeps_the_best_model_by_mrr_at_10(trained: dict[str, Path]) -> None:
    results = json.loads((trained["tmp"] / "out" / "results.json").read_text())
    assert results["main_metric"] == "mrr@10" and results["training"]["metric_for_best"] == "mrr@10"
    evals = [json.loads(line) for line in (trained["tmp"] / "out" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "eval"]
    assert len(evals) == 2 and results["best_metrics"]["mrr@10"] == max(e["mrr@10"] for e in evals)
    config = json.loads((trained["best"] / "config.json").read_text())
    assert config["architectures"] == ["BertForEmbedding"] and config["task"] == "embedding"
    assert config["task_settings"]["pooling"] == "mean" and config["task_settings"]["normalize"] is True


def test_the_folder_loads_in_sentence_transformers_with_the_same_vectors(trained: dict[str, Path]) -> None:
    """SentenceTransformer(folder) reads the pooling, normalisation and length bertkit trained with, and embeds as
    `bertkit.load(folder).encode` does (cosine >= 0.99999)."""
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(trained["best"]), device="cpu")
    assert theirs.max_seq_length == 32
    a = theirs.encode(TEXTS, convert_to_numpy=True)
    b = np.asarray(bertkit.load(trained["best"]).encode(TEXTS, precision="fp32"))
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() >= 0.99999 and np.allclose(np.linalg.norm(b, axis=1), 1, atol=1e-5)


def test_embed_index_search_and_serve_read_the_folder_unchanged(trained: dict[str, Path], tmp_path: Path) -> None:
    """`bertkit embed` (the folder's pooling and normalisation, no flags), `bertkit index` and `bertkit search`, and
    the server's /embed give what the folder's encoder gives."""
    pytest.importorskip("faiss")
    from fastapi.testclient import TestClient

    from bertkit.jobs.search import SearchConfig, search
    from bertkit.serve import ServeSettings, create_app

    best = trained["best"]
    expected = np.asarray(bertkit.load(best).encode(TEXTS, precision="fp32"))
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    assert main(["embed", "--model", str(best), "--precision", "fp32", str(tmp_path / "texts.txt"),
                 "-o", str(tmp_path / "emb")]) == 0
    got = np.concatenate([np.load(p) for p in sorted((tmp_path / "emb").glob("shard-*.npy"))])
    assert np.allclose(got, expected, atol=1e-6)
    assert main(["index", str(tmp_path / "emb"), "-o", str(tmp_path / "index")]) == 0
    hits = search(SearchConfig(index=str(tmp_path / "index"), queries=[TEXTS[0]], top_k=2))[0]["results"]
    assert hits[0]["text"] == TEXTS[0] and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    with TestClient(create_app(str(best), ServeSettings(precision="fp32"))) as client:
        r = client.post("/embed", json={"texts": TEXTS})
    assert r.status_code == 200, r.text
    assert np.allclose(np.asarray(r.json()["embeddings"]), expected, atol=1e-6)


def test_evaluate_scores_a_retrieval_set_as_any_encoder_does(trained: dict[str, Path], tmp_path: Path) -> None:
    """`bertkit evaluate` on a BEIR folder (and on one of its qrels files) gives recall@k, MRR@10 and nDCG@10 equal
    to evaluate_retrieval with the folder's own encoder."""
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--model", str(trained["best"]), "--input", str(trained["beir"]), "--output",
                 str(out)]) == 0
    got = json.loads(out.read_text())
    bert = bertkit.load(trained["best"])
    want = evaluate_retrieval(lambda texts: bert.encode(texts, precision="fp32"), read_retrieval_set(trained["beir"]))
    assert set(want) == {"recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"}
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert got["examples"] == 36
    assert main(["evaluate", "--model", str(trained["best"]), "--input",
                 str(trained["beir"] / "qrels" / "test.tsv"), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["mrr@10"] == pytest.approx(want["mrr@10"], abs=1e-6)


def test_predict_writes_each_querys_ranking(trained: dict[str, Path], tmp_path: Path) -> None:
    """`bertkit predict` on a retrieval set: each query's ten best document ids, whose MRR@10 is evaluate's; on the
    training triples: each query with the file's texts ranked."""
    out = tmp_path / "rankings.jsonl"
    assert main(["predict", "--model", str(trained["best"]), "--input", str(trained["beir"]), "--output",
                 str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    retrieval = read_retrieval_set(trained["beir"])
    assert [r["id"] for r in rows] == list(retrieval.queries) and all(len(r["ranking"]) == 10 for r in rows)
    got = metrics.retrieval_scores([r["ranking"] for r in rows], [retrieval.relevant[r["id"]] for r in rows])
    assert main(["evaluate", "--model", str(trained["best"]), "--input", str(trained["beir"]), "--output",
                 str(tmp_path / "m.json")]) == 0
    assert got["mrr@10"] == pytest.approx(json.loads((tmp_path / "m.json").read_text())["mrr@10"], abs=1e-9)
    assert main(["predict", "--model", str(trained["best"]), "--input", str(trained["triples"]), "--output",
                 str(out)]) == 0
    first = json.loads(out.read_text().splitlines()[0])
    assert first["line"] == 1 and first["query"] == pair_rows()[0]["query"]
    assert set(first["ranking"]) <= {t for r in pair_rows() for t in (r["positive"], r["negative"])}


class FixedEncoder:
    """What sentence-transformers' evaluators call of a model, answering with given embeddings: both sides then
    score the very same vectors."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.model_card_data = SimpleNamespace(set_evaluation_metrics=lambda *args: None)  # where it keeps scores

    def encode_query(self, texts: list[str], **options: object) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.vectors[t] for t in texts]))

    encode_document = encode_query


def test_retrieval_metrics_equal_sentence_transformers_evaluator() -> None:
    """60 queries, 200 documents, 1-3 relevant each, embeddings planted near the relevant documents with noise (so
    that some rank first and some lower): recall@k, MRR@10 and nDCG@10 equal InformationRetrievalEvaluator's on the
    same embeddings."""
    evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    util = pytest.importorskip("sentence_transformers.util")
    rng = np.random.default_rng(0)
    docs = {f"doc {i}": rng.normal(size=16).astype(np.float32) for i in range(200)}
    corpus = {f"d{i}": text for i, text in enumerate(docs)}
    queries, relevant, vectors = {}, {}, dict(docs)
    for q in range(60):
        chosen = rng.choice(200, size=rng.integers(1, 4), replace=False)
        queries[f"q{q}"], relevant[f"q{q}"] = f"query {q}", {f"d{i}" for i in chosen}
        vectors[f"query {q}"] = (docs[f"doc {chosen[0]}"] + rng.normal(scale=1.3, size=16)).astype(np.float32)
    evaluator = evaluation.InformationRetrievalEvaluator(queries, corpus, relevant, accuracy_at_k=[1],
                                                         precision_recall_at_k=[1, 5, 10], map_at_k=[10],
                                                         score_functions={"cosine": util.cos_sim}, write_csv=False)
    theirs = evaluator(FixedEncoder(vectors))
    ours = retrieval_metrics(RetrievalSet(queries, corpus, relevant), np.stack([vectors[t] for t in queries.values()]),
                             np.stack(list(docs.values())))
    for key in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"):
        assert ours[key] == pytest.approx(theirs[f"cosine_{key}"], abs=1e-12), key
    assert 0.2 < ours["mrr@10"] < 0.9 and ours["recall@10"] < 1  # neither trivial nor broken


def test_simcse_trains_from_a_plain_text_file(tiny_dir: Path, tmp_path: Path) -> None:
    """--loss simcse reads one text per line (blank lines left out), each text its own positive; without a dev
    file the result is OUTPUT/final, an embedding folder."""
    lines = [r["positive"] for r in pair_rows()]
    (tmp_path / "corpus.txt").write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]) + "\n")
    assert main(["finetune", "--task", "embedding", "--loss", "simcse", "--model", str(tiny_dir), "--train",
                 str(tmp_path / "corpus.txt"), "--max-length", "32", "--epochs", "1", "--batch-size", "12",
                 "--output", str(tmp_path / "out"), "--no-progress"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["train_examples"] == 36 and results["final_dir"] == str(tmp_path / "out" / "final")
    train = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert train and all(np.isfinite(r["loss"]) for r in train if r["split"] == "train")
    assert json.loads((tmp_path / "out" / "final" / "config.json").read_text())["task_settings"]["loss"] == "simcse"


def test_cosent_trains_on_scored_pairs_and_reports_spearman(tiny_dir: Path, tmp_path: Path) -> None:
    rows = "".join(f"{r['query']},\"{r['positive']}\",{i % 5 / 4}\n" for i, r in enumerate(pair_rows()))
    (tmp_path / "scored.csv").write_text("text_a,text_b,score\n" + rows)
    assert main(["finetune", "--task", "embedding", "--loss", "cosent", "--model", str(tiny_dir), "--train",
                 str(tmp_path / "scored.csv"), "--dev", str(tmp_path / "scored.csv"), "--max-length", "32",
                 "--epochs", "1", "--batch-size", "12", "--output", str(tmp_path / "out"), "--no-progress"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["main_metric"] == "spearman" and -1 <= results["best_metrics"]["spearman"] <= 1
    assert "pearson" in results["best_metrics"]


# ----------------------------------------------------------------------------------------------------------------
# Reading and settings.
# ----------------------------------------------------------------------------------------------------------------


def test_reads_pairs_triples_and_scored_pairs_by_field_name(tmp_path: Path) -> None:
    task = get_task("embedding")
    (tmp_path / "pairs.tsv").write_text("positive\tquery\nthe doc\tthe question\n")
    assert task.read(tmp_path / "pairs.tsv", task.settings()) == [TextsExample(2, ("the question", "the doc"))]
    (tmp_path / "triples.jsonl").write_text('{"query": "q", "positive": "p", "negative": "n"}\n')
    assert task.read(tmp_path / "triples.jsonl", task.settings())[0].texts == ("q", "p", "n")
    (tmp_path / "own.csv").write_text("question,answer,wrong,worse\nq,a,w1,w2\n")
    own = task.settings({"columns": ["question", "answer", "wrong", "worse"]})
    assert task.read(tmp_path / "own.csv", own)[0].texts == ("q", "a", "w1", "w2")
    (tmp_path / "scored.jsonl").write_text('{"text_a": "a", "text_b": "b", "score": 4}\n')
    scored = task.read(tmp_path / "scored.jsonl", task.settings({"loss": "cosent"}))
    assert scored == [TextsExample(1, ("a", "b"), 4.0, True)]


def test_reading_errors_name_the_file_line_and_field(tmp_path: Path) -> None:
    task = get_task("embedding")
    (tmp_path / "bad.jsonl").write_text('{"query": "q", "positive": "p", "negative": "n"}\n{"query": "q2", '
                                        '"positive": "p2"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: no field 'negative'.*--columns"):
        task.read(tmp_path / "bad.jsonl", task.settings())
    (tmp_path / "scores.tsv").write_text("text_a\ttext_b\tscore\na\tb\thigh\n")
    with pytest.raises(DataError, match=r"scores.tsv:2: field 'score' is 'high'; expected a finite number"):
        task.read(tmp_path / "scores.tsv", task.settings({"loss": "cosent"}))
    (tmp_path / "plain.txt").write_text("a\nb\n")
    with pytest.raises(DataError, match="expected a file of named fields"):
        task.read(tmp_path / "plain.txt", task.settings())
    (tmp_path / "texts.jsonl").write_text('{"sentence": "a"}\n')
    with pytest.raises(DataError, match=r"texts.jsonl:1: no field 'text'.*--columns.*simcse: text"):
        task.read(tmp_path / "texts.jsonl", task.settings({"loss": "simcse"}))
    assert task.read(tmp_path / "texts.jsonl", task.settings({"loss": "simcse", "columns": ["sentence"]})) == \
        [TextsExample(1, ("a",))]
    with pytest.raises(ConfigError, match="cosent reads three fields"):
        task.read(tmp_path / "scores.tsv", task.settings({"loss": "cosent", "columns": ["text_a", "text_b"]}))


def test_a_retrieval_set_is_read_from_beir_layout(tmp_path: Path) -> None:
    """Titles join their texts; score-0 judgements are not relevant; queries with no relevant document are left
    out; a judgement of an unknown document names its line; a folder with two qrels files asks which."""
    beir = tmp_path / "set"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "title": "Cats", "text": "They purr."}\n'
                                       '{"_id": 2, "text": "Dogs bark."}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "purring"}\n{"_id": "q2", "text": "nothing"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\t2\t0\n")
    found = read_retrieval_set(beir)
    assert found == RetrievalSet({"q1": "purring"}, {"d1": "Cats They purr.", "2": "Dogs bark."}, {"q1": {"d1"}})
    examples = get_task("embedding").read(beir, get_task("embedding").settings())
    assert [(e.id, e.text, e.relevant) for e in examples] == [("q1", "purring", frozenset({"d1"}))]
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\n")
    with pytest.raises(DataError, match="needs one relevance file.*qrels/dev.tsv, qrels/test.tsv"):
        read_retrieval_set(beir)
    with pytest.raises(DataError, match=r"dev.tsv:2: document id 'd9' is not in .*corpus.jsonl"):
        read_retrieval_set(beir / "qrels" / "dev.tsv")


def test_pairs_stand_for_the_retrieval_set_of_their_queries_and_texts() -> None:
    examples = [TextsExample(1, ("q", "p1", "n")), TextsExample(2, ("q", "p2")), TextsExample(3, ("r", "n"))]
    assert retrieval_set(examples) == RetrievalSet({"q0": "q", "q1": "r"}, {"d0": "p1", "d1": "n", "d2": "p2"},
                                                   {"q0": {"d0", "d2"}, "q1": {"d1"}})
    corpus = {"d": "doc"}
    assert retrieval_set([QueryExample("x", "query", frozenset({"d"}), corpus)]).corpus is corpus


def test_settings_started_from_a_sentence_transformers_folder_take_its_pooling(minilm_dir: Path,
                                                                               tiny_dir: Path) -> None:
    """`settings(options, start=folder)`: options left unset take all-MiniLM-L6-v2's mean pooling, normalisation
    and length 256; given ones win; a folder without sentence-transformers files gives mean, normalised, 128."""
    task = get_task("embedding")
    minilm = task.settings({}, start=read_folder(minilm_dir))
    assert (minilm.pooling, minilm.normalize, minilm.max_length) == ("mean", True, 256)
    given = task.settings({"pooling": "cls", "normalize": False, "max_length": 64}, start=read_folder(minilm_dir))
    assert (given.pooling, given.normalize, given.max_length) == ("cls", False, 64)
    plain = task.settings({}, start=read_folder(tiny_dir))
    assert (plain.pooling, plain.normalize, plain.max_length) == ("mean", True, 128)


def test_batches_keep_examples_that_share_a_text_apart(tokenizer) -> None:  # noqa: ANN001
    """The task's sampler sees texts as tokenized: two pairs with one positive never share a batch (in-batch,
    SimCSE); CoSENT batches plainly."""
    task = get_task("embedding")
    settings = task.settings({"max_length": 16})
    examples = [TextsExample(i, (f"query {i}", "the same doc" if i % 2 else f"doc {i}")) for i in range(8)]
    features = task.features(examples, tokenizer, settings, training=True)
    sampler = task.batch_sampler(features, settings)
    for batch in sampler(list(range(8)), 4, False):
        assert sum(i % 2 for i in batch) <= 1
    assert task.batch_sampler(features, task.settings({"loss": "cosent"})) is None


# ----------------------------------------------------------------------------------------------------------------
# The head.
# ----------------------------------------------------------------------------------------------------------------


def _head(tiny_config_kwargs: dict, **settings: object) -> BertForEmbedding:
    from bertkit.model import BertConfig

    torch.manual_seed(0)
    return BertForEmbedding(BertConfig(**tiny_config_kwargs, task_settings=settings))


TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


def test_the_head_pools_normalises_and_trains_with_the_losses() -> None:
    """(batch, texts, seq) embeds each text as (batch, seq) does; without labels the loss is in-batch negatives of
    its embeddings, with labels CoSENT; a learned scale gets a gradient."""
    ids = torch.randint(5, 99, (4, 3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 1, 4:] = 0
    model = _head(TINY, pooling="cls", normalize=False).eval()
    out = model(ids, mask)
    flat = model(ids.view(12, 7), mask.view(12, 7)).embeddings.view(4, 3, -1)
    assert torch.allclose(out.embeddings, flat, atol=1e-6) and out.embeddings.shape == (4, 3, 32)
    assert out.loss.item() == pytest.approx(in_batch_negatives_loss(*out.embeddings.unbind(1)).item(), rel=1e-6)
    scores = torch.tensor([0.1, 0.9, 0.5, 0.3])
    cosent = model(ids[:, :2], mask[:, :2], labels=scores)
    assert cosent.loss.item() == pytest.approx(cosent_loss(*cosent.embeddings.unbind(1), scores).item(), rel=1e-6)
    assert model(ids[:, 0], mask[:, 0]).loss is None
    normalised = _head(TINY).eval()(ids[:, 0], mask[:, 0]).embeddings
    assert torch.allclose(normalised.norm(dim=-1), torch.ones(4), atol=1e-6)
    learned = _head(TINY, learn_scale=True, scale=10.0).train()
    assert learned.scale.item() == pytest.approx(10.0)
    learned(ids, mask).loss.backward()
    assert learned.logit_scale.grad is not None and learned.bert.pooler.dense.weight.grad is None


def test_simcse_pairs_differ_only_by_dropout() -> None:
    """The same text twice in one pass: different vectors in training (dropout), the same in evaluation."""
    ids = torch.randint(5, 99, (3, 1, 6), generator=torch.Generator().manual_seed(2)).expand(3, 2, 6)
    model = _head(TINY)
    train = model.train()(ids).embeddings
    assert not torch.allclose(train[:, 0], train[:, 1])
    evaluation = model.eval()(ids).embeddings
    assert torch.equal(evaluation[:, 0], evaluation[:, 1])


def test_simcse_trains_with_the_papers_dropout_when_the_start_folder_has_none(tiny_dir: Path, tmp_path: Path) -> None:
    """Dropout is SimCSE's only noise: from a folder pre-trained without dropout (as bertkit-mini ships), SimCSE
    trains with 0.1 (Gao et al.), so the two views of a text differ; --dropout sets another value; the other losses
    keep the folder's dropout."""
    from bertkit.jobs.finetune import build_model

    start = tmp_path / "no-dropout"
    start.mkdir()
    for f in tiny_dir.iterdir():
        (start / f.name).write_bytes(f.read_bytes())
    config = json.loads((start / "config.json").read_text())
    (start / "config.json").write_text(json.dumps({**config, "hidden_dropout_prob": 0.0,
                                                   "attention_probs_dropout_prob": 0.0}))
    task, folder = get_task("embedding"), read_folder(start)
    ids = torch.randint(1000, 2000, (3, 1, 6), generator=torch.Generator().manual_seed(3)).expand(3, 2, 6)

    def trained_with(**options: object) -> tuple[float, bool]:
        torch.manual_seed(0)
        model = build_model(task, folder, task.settings(options, folder)).train()
        views = model(ids).embeddings
        return model.config.hidden_dropout_prob, not torch.allclose(views[:, 0], views[:, 1])

    assert trained_with(loss="simcse") == (0.1, True)
    assert trained_with(loss="simcse", dropout=0.25) == (0.25, True)
    assert trained_with() == (0.0, False)
