"""bench_embedding_training's data and bookkeeping: SQuAD v1.1 dev split by article as the data README says
(questions of articles 0-37 train with their paragraphs, 38-47 search all 2,067 paragraphs), the cross-encoder's
negatives from the question's own article and never its paragraph, a stored unit reused only with the settings it
ran with, and two runs sharing a work folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_embedding_training as bench  # noqa: E402


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("bench")
    return work, bench.write_data(work, seed=1, negatives=2)


def squad(data_dir: Path) -> list[dict]:
    return json.loads((data_dir / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]


def test_the_split_is_by_article_and_the_corpus_is_every_paragraph(written: tuple[Path, dict],
                                                                   data_dir: Path) -> None:
    work, data = written
    articles = squad(data_dir)
    train_questions = {" ".join(qa["question"].split()) for a in articles[:38] for p in a["paragraphs"]
                       for qa in p["qas"]}
    assert data["counts"] == {"train_pairs": 8582, "train_paragraphs": 1646, "eval_queries": 1988, "corpus": 2067,
                              "reranker_pairs": 8582 * 3, "reranker_negatives": 2}
    pairs = bench.read_pairs(data["files"]["pairs"])
    assert {p["query"] for p in pairs} == train_questions
    eval_ids = {qa["id"] for a in articles[38:] for p in a["paragraphs"] for qa in p["qas"]}
    queries = [json.loads(line) for line in (work / "data" / "eval" / "queries.jsonl").read_text().splitlines()]
    assert {q["_id"] for q in queries} == eval_ids
    corpus = {json.loads(line)["_id"]: json.loads(line)["text"]
              for line in (work / "data" / "eval" / "corpus.jsonl").read_text().splitlines()}
    qrels = [line.split("\t") for line in (work / "data" / "eval" / "qrels.tsv").read_text().splitlines()[1:]]
    gold = {qa["id"]: " ".join(p["context"].split()) for a in articles[38:] for p in a["paragraphs"] for qa in p["qas"]}
    assert len(qrels) == 1988 and all(corpus[pid] == gold[qid] and score == "1" for qid, pid, score in qrels)
    assert (work / "data" / "train-paragraphs.txt").read_text().count("\n") == 1646


def test_cross_encoder_negatives_come_from_the_same_article(written: tuple[Path, dict], data_dir: Path) -> None:
    _, data = written
    article_of = {" ".join(p["context"].split()): n for n, a in enumerate(squad(data_dir)[:38])
                  for p in a["paragraphs"]}
    rows = bench.read_pairs(data["files"]["labelled"])
    by_query: dict[str, list[dict]] = {}
    for row in rows:
        by_query.setdefault(row["query"], []).append(row)
    positive = {q: next(r["text"] for r in group if r["label"] == 1) for q, group in by_query.items()}
    negatives = [(q, r["text"]) for q, group in by_query.items() for r in group if r["label"] == 0]
    assert len(negatives) == 2 * sum(r["label"] for r in rows)
    assert all(text != positive[q] and article_of[text] == article_of[positive[q]] for q, text in negatives)


def test_a_stored_unit_is_reused_only_with_its_settings(tmp_path: Path) -> None:
    calls = []
    state = bench.State(tmp_path)
    assert state.run("unit", lambda: calls.append(1) or {"x": 1}, {"steps": 5}) == {"x": 1, "settings": {"steps": 5}}
    again = bench.State(tmp_path)  # read back from state.json, as a restarted run reads it
    assert again.run("unit", lambda: calls.append(2) or {"x": 2}, {"steps": 5})["x"] == 1 and calls == [1]
    with pytest.raises(SystemExit, match="unit was run with {'steps': 5}, not {'steps': 6}"):
        again.run("unit", lambda: {"x": 3}, {"steps": 6})


def test_two_runs_on_one_work_folder_keep_each_others_units(tmp_path: Path) -> None:
    """Sections run by two processes at once on one WORK: each stores its units without dropping the other's."""
    first, second = bench.State(tmp_path), bench.State(tmp_path)
    first.run("a", lambda: {"x": 1})
    second.run("b", lambda: {"x": 2})
    first.run("c", lambda: {"x": 3})
    assert json.loads((tmp_path / "state.json").read_text()) == {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3}}


def test_simcse_dev_split_never_reads_the_evaluation_articles(tmp_path: Path, data_dir: Path) -> None:
    """SimCSE's setting search: text from articles 0-29, questions of 30-37 against every paragraph of 0-37; no text
    of articles 38-47 in any file it writes."""
    dev = bench.write_dev_data(tmp_path, wiki_sentences=50, seed=1)
    articles = squad(data_dir)
    contexts = lambda part: {" ".join(p["context"].split()) for a in part for p in a["paragraphs"]}  # noqa: E731
    held_out = contexts(articles[38:])
    written = {name: Path(path).read_text(encoding="utf-8") for name, path in dev["files"].items() if name != "eval"}
    assert set(written["paragraphs"].splitlines()) == contexts(articles[:30])
    corpus = [json.loads(line)["text"] for line in (tmp_path / "data" / "dev" / "eval" / "corpus.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert set(corpus) == contexts(articles[:38]) and not set(corpus) & held_out
    queries = {json.loads(line)["_id"] for line in (tmp_path / "data" / "dev" / "eval" / "queries.jsonl").read_text(
        encoding="utf-8").splitlines()}
    assert queries == {qa["id"] for a in articles[30:38] for p in a["paragraphs"] for qa in p["qas"]}
    assert dev["counts"]["wiki_sentences"] == 50 and not any(
        sentence in text for text in held_out for sentence in written["sentences"].splitlines())


def test_sentences_split_at_sentence_ends_and_drop_fragments() -> None:
    """A full stop, question or exclamation mark before a capital ends a sentence (an abbreviation too: the split is
    a regular expression, not a sentence model); pieces under 4 words are dropped."""
    assert bench.sentences_of(["The cat sat on the mat. It was warm there! Was it? Dr. Smith went home at noon."]) == [
        "The cat sat on the mat.", "It was warm there!", "Smith went home at noon."]


@pytest.mark.parametrize("long_ratio, met", [(1.33, "**met**"), (1.25, "**not met**")])
def test_the_speed_goal_is_judged_on_the_longest_rounds_with_the_shorter_shown(long_ratio: float, met: str) -> None:
    """Rounds of 15 steps (`minilm:throughput:R:WHO`) and of 100 (`minilm:throughput-100:R:WHO`) in one WORK: the
    speed table has a row for each, and the goal's verdict is the longest runs' median ratio."""
    units = {}
    for prefix, steps, ratios in (("minilm:throughput", 15, [1.20, 1.25, 1.28]),
                                  ("minilm:throughput-100", 100, [long_ratio - 0.01, long_ratio, long_ratio + 0.01])):
        for r, ratio in enumerate(ratios, 1):
            units[f"{prefix}:{r}:sentence-transformers"] = {"examples_per_s": 10.0, "settings": {"steps": steps}}
            units[f"{prefix}:{r}:bertkit"] = {"examples_per_s": 10.0 * ratio, "settings": {"steps": steps}}
    assert [(steps, len(b)) for steps, b, _ in bench.round_sets(units, "").values()] == [(15, 3), (100, 3)]
    rows = bench.speed_table(units, None)["rows"]
    assert [r["id"] for r in rows] == ["fp32-rounds", "fp32-rounds-100"]
    (goal,) = bench.goals_table(units)["rows"]
    assert goal["met"] == met and goal["steps"] == 100 and goal["n"] == 3
    assert "runs of 15 steps: 1.25x (median of 3)" in goal["_templates"]["measured"]


def test_a_merge_never_pieces_a_set_of_rounds_together_from_two_runs() -> None:
    """Another run's units join a report where this WORK lacks them, except rounds of a set (prefix and precision)
    this WORK has begun: 15-step fp32 rounds 3-4 of an older run stay out beside this run's rounds 1-2, while its
    bf16 rounds, 100-step rounds and other units come in."""
    have = {f"minilm:throughput:{r}:{who}": {} for r in (1, 2) for who in ("bertkit", "sentence-transformers")}
    have["data"] = {}
    older = {f"minilm:throughput{p}:{r}:{who}{s}": {} for p in ("", "-100") for s in ("", ":bf16")
             for r in (1, 2, 3, 4) for who in ("bertkit", "sentence-transformers")}
    older.update({"data": {}, "step:bf16": {}, "mini:before": {}})
    merged = bench.mergeable(older, have)
    assert not [k for k in merged if bench.round_set(k) == ("minilm:throughput", "")]
    assert {bench.round_set(k) for k in merged} == {None, ("minilm:throughput", ":bf16"), ("minilm:throughput-100", ""),
                                                    ("minilm:throughput-100", ":bf16")}
    assert "step:bf16" in merged and "mini:before" in merged and "data" not in merged
    assert len(merged) == 3 * 8 + 2
    assert bench.round_set("minilm:throughput-100:12:sentence-transformers:bf16") == ("minilm:throughput-100", ":bf16")
    assert bench.round_set("minilm:train:bertkit") is None


def test_a_subset_is_seeded_and_written_where_no_folder_exists_yet(tmp_path: Path) -> None:
    """A WORK whose data unit another WORK wrote has no data/ folder: the rounds' and the step's subsets make it."""
    pairs = [{"query": f"q{i}", "positive": f"p{i}"} for i in range(50)]
    path, rows = bench.subset_file(pairs, 10, 1, tmp_path / "work" / "data" / "subset.jsonl")
    assert bench.read_pairs(path) == rows and len(rows) == 10 and len({r["query"] for r in rows}) == 10
    assert bench.subset_file(pairs, 10, 1, tmp_path / "again.jsonl")[1] == rows
