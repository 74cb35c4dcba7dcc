"""bertkit.load(folder)'s calls: every head's answers from Python run the path the server's routes run, so Python,
the CLI (`bertkit predict --probabilities`; `bertkit embed` and `bertkit fill-mask` for the encoder and the
masked-LM head) and `bertkit serve` give the same numbers, bit for bit in float32, for every task; a call the head
cannot answer says which calls it has.

The models are tiny random ones saved as fine-tuned folders (config.json naming the task and its settings). Equal
bits need equal batches (a float32 product's last bit follows the batch's size), so each comparison sends the same
examples together: a request of several texts is one batch on the server, and /qa and /choose take one question
per request, which Python's one-question calls and `predict --batch-size 1` match."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import bertkit
from bertkit.cli import main
from bertkit.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent / "inference"))
from inference_helpers import tiny_folder  # noqa: E402

pytest.importorskip("fastapi", reason="the server tests need fastapi (pip install 'bertkit[serve]')")
pytest.importorskip("httpx", reason="the server tests need httpx (pip install 'bertkit[test]')")
from fastapi.testclient import TestClient  # noqa: E402

from bertkit.serve import ServeSettings, create_app  # noqa: E402

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["John Smith lives in New York.", "A slow, long and rather dull film about very little.", "fine"]
PAIRS = ["Where does he live?", "Is it good?", "a pair"]
CONTEXT = ("The committee met again on Tuesday in the old town hall of Lyon to discuss the budget of the new "
           "library, which Jane Austen opened in 1815 after a long debate about its opening hours and its books.")
QUESTIONS = ["Who opened the library?", "Where did the committee meet?"]
PROMPTS = [("She opened the umbrella", ["it rained.", "it was sunny.", "the cat slept."]),
           ("The library closed early", ["the readers went home to finish their long novels.", "it opened.", "no."])]


def finetuned(tmp: Path, name: str) -> Path:
    """A tiny random folder of each kind, saved as `bertkit finetune` saves one (the task and its settings)."""
    two = {"num_labels": 2, "label_names": ["neg", "pos"]}
    kinds: dict[str, tuple[str, dict[str, Any]]] = {
        "single": ("BertForSequenceClassification", {**two, "task": "classification", "task_settings": {
            "text_column": "text", "pairs": False, "max_length": 64}}),
        "pairs": ("BertForSequenceClassification", {**two, "task": "classification", "task_settings": {
            "text_column": "text", "text_pair_column": "pair", "pairs": True, "max_length": 64}}),
        "regression": ("BertForSequenceClassification", {
            "num_labels": 1, "label_names": None, "problem_type": "regression", "task": "classification",
            "task_settings": {"text_column": "text", "pairs": False, "problem": "regression"}}),
        "multi-label": ("BertForSequenceClassification", {
            "num_labels": 3, "label_names": ["a", "b", "c"], "problem_type": "multi_label_classification",
            "task": "classification", "task_settings": {"text_column": "text", "pairs": False,
                                                        "problem": "multi_label"}}),
        "ner": ("BertForTokenClassification", {"num_labels": 5, "label_names": TAGS, "task": "ner",
                                               "task_settings": {"max_length": 64}}),
        # 48 pieces a window, 16 of overlap: the context takes several windows
        "qa": ("BertForQuestionAnswering", {"task": "qa", "task_settings": {"max_length": 48, "doc_stride": 16}}),
        "qa-v2": ("BertForQuestionAnswering", {"task": "qa", "task_settings": {
            "max_length": 48, "doc_stride": 16, "version_2": True, "null_threshold": -100.0}}),
        "choice": ("BertForMultipleChoice", {"task": "multiple-choice", "task_settings": {"num_choices": 3}}),
    }
    class_name, overrides = kinds[name]
    (tmp / name).mkdir()
    return tiny_folder(tmp / name, class_name, **overrides)


def served(folder: Path, route: str, body: dict[str, Any], items: int = 1) -> Any:
    """The server's answer to one request of `items` items (fp32 on the CPU, as Python's and the CLI's), its items
    one batch: the batcher waits for them all, however slow a shared machine is."""
    settings = ServeSettings(precision="fp32", max_batch_size=items, max_batch_delay_ms=10_000)
    with TestClient(create_app(folder, settings)) as client:
        response = client.post(route, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def predicted(folder: Path, input: Path, batch_size: int = 64) -> list[Any]:
    """`bertkit predict --probabilities`'s answers, one per example of `input`, in its order."""
    output = input.with_suffix(".answers.jsonl")
    assert main(["predict", "--model", str(folder), "--input", str(input), "--output", str(output),
                 "--probabilities", "--batch-size", str(batch_size)]) == 0
    return [json.loads(line)["answer"] for line in output.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["single", "pairs", "regression", "multi-label"])
def test_classify_is_predict_is_the_server_bitwise(kind: str, tmp_path: Path) -> None:
    folder = finetuned(tmp_path, kind)
    bert = bertkit.load(folder)
    pairs = PAIRS if kind == "pairs" else None
    python = bert.classify(list(zip(TEXTS, pairs)) if pairs else TEXTS)
    assert python == bert.classify(TEXTS, pairs) == bert.request({"texts": TEXTS, "pairs": pairs})["results"]
    rows = ["text\tpair", *map("\t".join, zip(TEXTS, pairs))] if pairs else ["text", *TEXTS]
    (tmp_path / "in.tsv").write_text("\n".join(rows) + "\n")
    assert predicted(folder, tmp_path / "in.tsv") == python
    assert served(folder, "/classify", {"texts": TEXTS, "pairs": pairs}, len(TEXTS))["results"] == python
    first = python[0]
    if kind == "regression":
        assert first["value"] is not None and first["label"] is None and first["probabilities"] == {}
    elif kind == "multi-label":
        assert first["labels"] == [k for k, p in first["probabilities"].items() if p > 0.5]
    else:
        assert first["label"] in ("neg", "pos") and first["probability"] == max(first["probabilities"].values())
    assert bert.classify(("one", "pair") if pairs else "one") == bert.classify([("one", "pair")] if pairs else ["one"])[0]


def test_rank_orders_documents_by_the_pair_classifiers_relevance(tmp_path: Path) -> None:
    """CrossEncoder.rank's shape: corpus_id and score, best first; the score is /classify's probability of the
    positive (second) label for the pair (query, document), as the server's /rerank scores it."""
    folder = finetuned(tmp_path, "pairs")
    bert = bertkit.load(folder)
    ranked = bert.rank("Where does he live?", TEXTS, return_documents=True)
    reranked = served(folder, "/rerank", {"query": "Where does he live?", "texts": TEXTS}, len(TEXTS))
    assert [(hit["corpus_id"], hit["score"]) for hit in ranked] == [(hit["index"], hit["score"]) for hit in reranked]
    answers = bert.classify([("Where does he live?", text) for text in TEXTS])
    assert sorted(hit["corpus_id"] for hit in ranked) == [0, 1, 2]
    assert [hit["score"] for hit in ranked] == sorted((a["probabilities"]["pos"] for a in answers), reverse=True)
    assert all(hit["text"] == TEXTS[hit["corpus_id"]] for hit in ranked)
    assert bert.rank("Where does he live?", TEXTS, top_k=2) == [{k: h[k] for k in ("corpus_id", "score")}
                                                                  for h in ranked[:2]]
    assert bert.rank("q", []) == []
    with pytest.raises(ConfigError, match="top_k"):
        bert.rank("q", TEXTS, top_k=0)


def test_tag_is_predict_is_the_server_bitwise(tmp_path: Path) -> None:
    from bertkit.tasks.ner import entities

    folder = finetuned(tmp_path, "ner")
    bert = bertkit.load(folder)
    words = bert.tag(TEXTS, words=True)
    assert served(folder, "/ner", {"texts": TEXTS}, len(TEXTS))["results"] == words
    assert bert.tag(TEXTS) == [entities(w, text) for w, text in zip(words, TEXTS)]
    for text, tagged in zip(TEXTS, words):  # each word where it lies in the text as sent
        assert all(text[w["start"]:w["end"]].lower() == w["token"] for w in tagged)
    conll = "\n\n".join("\n".join(w["token"] for w in tagged) for tagged in words)
    (tmp_path / "in.conll").write_text(conll + "\n")
    assert predicted(folder, tmp_path / "in.conll") == [  # a file's words have no place in a text
        [{k: w[k] for k in ("token", "label", "probability")} for w in tagged] for tagged in words]


@pytest.mark.parametrize("kind", ["qa", "qa-v2"])
def test_answer_is_predict_is_the_server_bitwise(kind: str, tmp_path: Path) -> None:
    folder = finetuned(tmp_path, kind)
    bert = bertkit.load(folder)
    squad = {"data": [{"paragraphs": [{"context": CONTEXT, "qas": [
        {"id": f"q{i}", "question": q} for i, q in enumerate(QUESTIONS)]}]}]}
    (tmp_path / "in.json").write_text(json.dumps(squad))
    alone = [bert.answer(q, CONTEXT) for q in QUESTIONS]  # one question per batch, as /qa's requests
    assert [served(folder, "/qa", {"question": q, "context": CONTEXT}) for q in QUESTIONS] == alone
    assert predicted(folder, tmp_path / "in.json", batch_size=1) == alone
    together = bert.answer(QUESTIONS, [CONTEXT] * len(QUESTIONS))
    assert predicted(folder, tmp_path / "in.json") == together
    for answer in together:
        assert answer["answer"] == CONTEXT[answer["start_char"]:answer["end_char"]]
    if kind == "qa-v2":  # a null threshold far below any span's lead: every question is unanswerable
        assert all(a["answer"] == "" and a["start_char"] == a["end_char"] == 0 for a in together)
    else:
        assert all(a["answer"] for a in together)


def test_choose_is_predict_is_the_server_bitwise(tmp_path: Path) -> None:
    folder = finetuned(tmp_path, "choice")
    bert = bertkit.load(folder)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": f"c{i}", "context": p, "choices": c}) + "\n"
                                               for i, (p, c) in enumerate(PROMPTS)))
    alone = [bert.choose(p, c) for p, c in PROMPTS]
    assert [served(folder, "/choose", {"context": p, "choices": c}) for p, c in PROMPTS] == alone
    assert predicted(folder, tmp_path / "in.jsonl", batch_size=1) == alone
    together = bert.choose([p for p, _ in PROMPTS], [c for _, c in PROMPTS])
    assert predicted(folder, tmp_path / "in.jsonl") == together
    assert all(a["choice"] == c[a["label"]] and len(a["probabilities"]) == 3 for a, (_, c) in zip(together, PROMPTS))


def test_fill_mask_is_the_cli_is_the_server_bitwise(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path, "BertForMaskedLM")
    bert = bertkit.load(folder)
    texts = ["Paris is the [MASK] of France.", "The [MASK] sat on the [MASK]."]
    python = bert.fill_mask(texts, top_k=3)
    assert served(folder, "/fill-mask", {"texts": texts, "top_k": 3}, len(texts))["results"] == python
    assert [len(masks) for masks in python] == [1, 2] and all(len(top) == 3 for masks in python for top in masks)
    one = bert.fill_mask(texts[1], top_k=3)  # the CLI's one text, printed to 4 decimals
    assert served(folder, "/fill-mask", {"texts": texts[1:], "top_k": 3})["results"] == [one]
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["fill-mask", texts[1], "--model", str(folder), "--top-k", "3"]) == 0
    assert printed.getvalue() == "".join(f"[MASK] #{i}:\n" + "".join(
        f"  {p['token']:20s} {p['probability']:.4f}\n" for p in top) for i, top in enumerate(one, start=1))


def test_encode_is_embed_is_the_server_bitwise(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path, "BertModel")
    python = bertkit.load(folder).encode(TEXTS, precision="fp32")
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    assert main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder),
                 "--precision", "fp32", "--no-progress"]) == 0
    assert np.array_equal(np.load(tmp_path / "e.npy"), python)
    vectors = np.asarray(served(folder, "/embed", {"texts": TEXTS}, len(TEXTS))["embeddings"], np.float32)
    assert np.array_equal(vectors, python)


def test_similarity_is_cos_sim_of_the_embeddings(tmp_path: Path) -> None:
    bert = bertkit.load(tiny_folder(tmp_path, "BertModel"))
    vectors = bert.encode(TEXTS, precision="fp32")
    scores = bert.similarity(TEXTS[:2], TEXTS, precision="fp32")
    assert scores.shape == (2, 3) and np.array_equal(scores, bertkit.cos_sim(vectors[:2], vectors))
    assert bert.similarity(TEXTS[0], TEXTS, precision="fp32").shape == (3,)
    assert bert.similarity("a cat", "a cat", precision="fp32") == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("class_name,calls", [
    ("BertModel", ("encode", "similarity")),
    ("BertForMaskedLM", ("encode", "similarity", "fill_mask")),
    ("BertForSequenceClassification", ("encode", "similarity", "classify", "request")),
    ("BertForTokenClassification", ("encode", "similarity", "tag", "request")),
    ("BertForQuestionAnswering", ("encode", "similarity", "answer", "request")),
    ("BertForMultipleChoice", ("encode", "similarity", "choose", "request")),
])
def test_a_call_the_head_cannot_answer_names_the_calls_it_has(class_name: str, calls: tuple, tmp_path: Path) -> None:
    """A head bertkit did not fine-tune (a transformers checkpoint) is served with its task's defaults; a
    classifier of single texts cannot rank (query, document) pairs."""
    single_texts = {"task": "classification", "num_labels": 2, "label_names": ["neg", "pos"],
                    "task_settings": {"pairs": False}}
    folder = tiny_folder(tmp_path, class_name, **(single_texts if class_name == "BertForSequenceClassification" else {}))
    bert = bertkit.load(folder)
    assert bert.calls == calls
    wrong = {"fill_mask": lambda: bert.fill_mask("a [MASK]"), "classify": lambda: bert.classify("a"),
             "rank": lambda: bert.rank("q", ["d"]), "tag": lambda: bert.tag("a"),
             "answer": lambda: bert.answer("q", "c"), "choose": lambda: bert.choose("p", ["a", "b"])}
    for call, run in wrong.items():
        if call in calls:
            continue
        with pytest.raises(ConfigError) as error:
            run()
        assert str(error.value).startswith(f"{folder}: {call}() needs ")
        assert f"this folder holds a {class_name}, whose calls are {', '.join(calls)}" in str(error.value)


def test_bad_inputs_are_named_as_the_server_names_them(tmp_path: Path) -> None:
    bert = bertkit.load(finetuned(tmp_path, "single"))
    with pytest.raises(Exception, match="a pair .* was sent, but this model was trained on single texts"):
        bert.classify([("a", "b")])
    with pytest.raises(ConfigError, match="batch_size"):
        bert.classify(["a"], batch_size=0)
    qa = bertkit.load(finetuned(tmp_path, "qa"))
    with pytest.raises(ValueError, match=r"questions\[1\]: the question has \d+ word pieces"):
        qa.answer(["Who?", "why " * 60], [CONTEXT, CONTEXT])
    with pytest.raises(ValueError, match="2 questions but 1 contexts"):
        qa.answer(["Who?", "Why?"], [CONTEXT])
