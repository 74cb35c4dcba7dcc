"""The server answers what the library answers for the same folder: every head's endpoint what the Python call
computes; every task's endpoint what `bertkit predict` answers, on inputs longer than the fine-tuning length (the
server read up to the model's position limit and decoded QA itself: the 2026-11-24 attack report's N4); frozen NER
and multiple choice are served too; ONNX export reads the task's inputs, so a classifier with numeric/categorical
columns exports and equals PyTorch.

Each model is MiniLM or a tiny random BERT fine-tuned for a few steps on real data: what matters is that two paths
agree, not what they answer. The figures (n of n equal) are printed."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
pytest.importorskip("fastapi", reason="the server tests need fastapi (pip install 'bertkit[serve]')")
try:
    from fastapi.testclient import TestClient
except RuntimeError as e:  # starlette's TestClient says so when its HTTP client is missing
    pytest.skip(f"fastapi's TestClient cannot run here: {e}", allow_module_level=True)

from bertkit.serve import ServeSettings, create_app  # noqa: E402


def client(folder: Path) -> TestClient:
    return TestClient(create_app(folder, ServeSettings(precision="fp32")))


def pieces(tokenizer, text: str, pair: str | None = None) -> int:  # noqa: ANN001
    return len(tokenizer.encode(text, pair, truncation=False).input_ids)


# --- every head, through a real server -------------------------------------------------------------------------
@pytest.mark.parametrize("class_name", ["BertForMaskedLM", "BertForSequenceClassification",
                                        "BertForTokenClassification", "BertForQuestionAnswering"])
def test_every_head_answers_what_the_python_api_computes(class_name: str, tmp_path: Path) -> None:
    """Each endpoint against the library call on the same folder (batched with other requests, too), through a real
    server."""
    pytest.importorskip("uvicorn")
    import httpx

    import bertkit
    from bertkit.inference.fill_mask import fill_mask
    from bertkit.tasks import qa as qa_task
    from inference_helpers import tiny_folder
    from test_serve import Server

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


# --- /classify ---------------------------------------------------------------------------------------------------
def test_classify_of_a_regression_model_equals_predict_beyond_its_length(
        tmp_path: Path, minilm_dir: Path, data_dir: Path, tokenizer, finetune_best) -> None:  # noqa: ANN001
    """N4: a regression classifier fine-tuned at --max-length 32: /classify's value equals `bertkit predict`'s on
    40 reviews, most of them longer than 32 word pieces (the server read 512 of them: 4 of 40 differed)."""
    with open(data_dir / "clothing_reviews" / "train.csv", newline="", encoding="utf-8") as f:
        reviews = [r for r in csv.DictReader(f) if r["Review Text"].strip()]
    train = tmp_path / "train.csv"
    with open(train, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["Review Text", "Rating"], *[[r["Review Text"], r["Rating"]] for r in reviews[:48]]])
    best = finetune_best(minilm_dir, tmp_path / "run", "classification", train, "--text-column", "Review Text",
                         "--label-column", "Rating", "--regression", "--max-length", "32")
    texts = [r["Review Text"] for r in reviews[100:140]]
    assert sum(pieces(tokenizer, t) > 32 for t in texts) >= 20
    source = tmp_path / "texts.csv"
    with open(source, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["Review Text"], *[[t] for t in texts]])
    assert main(["predict", "--model", str(best), "--input", str(source), "--output", str(tmp_path / "p.csv")]) == 0
    with open(tmp_path / "p.csv", newline="", encoding="utf-8") as f:
        predicted = [float(row["prediction"]) for row in csv.DictReader(f)]
    with client(best) as c:
        r = c.post("/classify", json={"texts": texts})
    assert r.status_code == 200, r.text
    served = [x["value"] for x in r.json()["results"]]
    equal = sum(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(served, predicted))  # predict writes 6 digits
    print(f"/classify (regression, fine-tuned at 32 pieces) equals predict on {equal} of {len(texts)} texts")
    assert equal == len(texts) == 40
    assert len({f"{v:.4g}" for v in served}) > 20  # the model's answers depend on the text


# --- /ner --------------------------------------------------------------------------------------------------------
def conll_file(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(words) for words in sentences) + "\n", encoding="utf-8")
    return path


def predicted_tags(path: Path) -> list[list[str]]:
    return [[line.split("\t")[1] for line in block.splitlines()]
            for block in path.read_text(encoding="utf-8").strip().split("\n\n")]


def long_sentences(data_dir: Path, n: int, words: int) -> list[str]:
    """The first n CoNLL-2003 dev sentences of at least `words` words, as texts."""
    from bertkit.tasks.ner import read_conll

    return [" ".join(s.words) for s in read_conll(data_dir / "conll2003" / "valid.txt") if len(s.words) >= words][:n]


def check_ner_parity(folder: Path, texts: list[str], tmp_path: Path, max_length: int, tokenizer) -> int:  # noqa: ANN001
    """/ner against `bertkit predict` on the same words (those the server splits each text into): the tags equal,
    and a word beyond the fine-tuning length is "O" with probability 1 in both (predict never reads it)."""
    words = [[w for w, _, _ in tokenizer.words(t)] for t in texts]
    source = conll_file(tmp_path / "words.txt", words)
    assert main(["predict", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "p.txt")]) == 0
    want = predicted_tags(tmp_path / "p.txt")
    with client(folder) as c:
        r = c.post("/ner", json={"texts": texts})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [[t["token"] for t in tagged] for tagged in results] == words
    equal = sum([t["label"] for t in tagged] == tags for tagged, tags in zip(results, want))
    beyond = 0
    for sentence, tagged in zip(words, results):
        used = 0  # word pieces between [CLS] and [SEP]
        for word, t in zip(sentence, tagged):
            n = len(tokenizer.tokenize(word)) or 1
            if used + n > max_length - 2:  # no room: predict reads the word as "O"
                beyond += 1
                assert (t["label"], t["probability"]) == ("O", 1.0)
            else:
                used += n
    assert beyond >= len(texts)  # every sentence has words past the length
    return equal


def test_ner_equals_predict_beyond_its_length(tmp_path: Path, minilm_dir: Path, data_dir: Path,
                                              tokenizer, finetune_best) -> None:
    """N4: a tagger fine-tuned at --max-length 16: /ner equals `bertkit predict` on 30 dev sentences of 12 words or
    more (the server read 512 pieces: 8 of 30 differed)."""
    train = tmp_path / "train.txt"
    train.write_text("\n".join((data_dir / "conll2003" / "train.txt").read_text().splitlines()[:1500]) + "\n")
    best = finetune_best(minilm_dir, tmp_path / "run", "ner", train, "--max-length", "16", "--lr", "1e-4")
    texts = long_sentences(data_dir, 30, 12)
    equal = check_ner_parity(best, texts, tmp_path, 16, tokenizer)
    print(f"/ner (fine-tuned at 16 pieces) equals predict on {equal} of {len(texts)} sentences")
    assert equal == len(texts) == 30


def test_frozen_ner_equals_predict_beyond_its_length(tmp_path: Path, tiny_dir: Path, data_dir: Path,
                                                     tokenizer, finetune_best) -> None:
    """A feature-based (--frozen) tagger fine-tuned at --max-length 16 is served (/ner) and answers what its
    `bertkit predict` answers, past the length too."""
    train = tmp_path / "train.txt"
    train.write_text("\n".join((data_dir / "conll2003" / "train.txt").read_text().splitlines()[:600]) + "\n")
    best = finetune_best(tiny_dir, tmp_path / "run", "ner", train, "--max-length", "16", "--frozen", "--tagger",
                         "linear", "--frozen-features", "last", "--lr", "1e-2",
                         "--feature-cache", str(tmp_path / "cache"))
    texts = long_sentences(data_dir, 12, 12)
    equal = check_ner_parity(best, texts, tmp_path, 16, tokenizer)
    print(f"/ner of a frozen tagger (fine-tuned at 16 pieces) equals predict on {equal} of {len(texts)} sentences")
    assert equal == len(texts)
    config = json.loads((best / "config.json").read_text())  # the tagger is sized by its own config field
    assert config["architectures"] == ["BertForFrozenTokenClassification"]
    assert config["frozen_tagger"]["tagger"] == "linear" and config["task_settings"]["max_length"] == 16


def test_a_frozen_ner_folder_is_served_as_predict_answers(tmp_path: Path) -> None:
    """A feature-based (--frozen) NER folder gets /ner (C7: it was 404), tagging each word as `bertkit predict` does,
    through a real server."""
    pytest.importorskip("uvicorn")
    import httpx

    from bertkit.jobs import predict
    from bertkit.model.heads import BertForFrozenTokenClassification
    from inference_helpers import tiny_config, tiny_folder
    from test_serve import Server

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


# --- /qa ---------------------------------------------------------------------------------------------------------
def test_qa_equals_predict_on_contexts_of_several_windows(tmp_path: Path, tiny_dir: Path, data_dir: Path,
                                                              tokenizer, finetune_best) -> None:
    """N4: a QA model fine-tuned with --max-length 128 --doc-stride 32: /qa equals `bertkit predict` on 27 SQuAD
    dev questions whose contexts need several windows (the server read one window of 512 and decoded on its own:
    8 of 27 equal)."""
    from bertkit.tasks.qa import read_squad

    squad = data_dir / "squad_v1.1" / "dev-v1.1.json"
    best = finetune_best(tiny_dir, tmp_path / "run", "qa", Path(f"{squad}#0:1"), "--max-length", "128",
                         "--doc-stride", "32", "--max-train-examples", "48")
    questions = [q for q in read_squad(f"{squad}#1:3") if pieces(tokenizer, q.question, q.context) > 128][:27]
    assert len(questions) == 27
    subset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": q.context, "qas": [{"id": q.id, "question": q.question, "answers": []}]} for q in questions]}]}
    source = tmp_path / "questions.json"
    source.write_text(json.dumps(subset))
    assert main(["predict", "--model", str(best), "--input", str(source), "--output", str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    with client(best) as c:
        served = [c.post("/qa", json={"question": q.question, "context": q.context}).json() for q in questions]
    for q, s in zip(questions, served):
        assert s["answer"] == q.context[s["start_char"]:s["end_char"]]
    equal = sum(s["answer"] == predicted[q.id] for q, s in zip(questions, served))
    print(f"/qa (fine-tuned at 128 pieces, doc stride 32) equals predict on {equal} of {len(questions)} questions")
    assert equal == len(questions)


# --- /choose -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def choice_folder(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path, finetune_best,  # noqa: ANN001
                  choice_questions: list[dict]) -> Path:
    tmp = tmp_path_factory.mktemp("choice")
    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps(q) + "\n" for q in choice_questions * 4))
    return finetune_best(tiny_dir, tmp / "run", "multiple-choice", train, "--max-length", "24")


def test_multiple_choice_is_served_as_predict_answers(choice_folder: Path, tmp_path: Path,
                                                     choice_questions: list[dict]) -> None:
    """Multiple choice was never served: /choose answers `bertkit predict`'s choice for each question (its
    choices cut to the fine-tuning length as predict cuts them), with a probability per choice; a question with
    another number of choices than the model was fine-tuned on is a 400 naming it."""
    questions = [{**q, "label": None} for q in choice_questions]
    source = tmp_path / "q.jsonl"
    source.write_text("".join(json.dumps({k: v for k, v in q.items() if k != "label"}) + "\n" for q in questions))
    assert main(["predict", "--model", str(choice_folder), "--input", str(source),
                 "--output", str(tmp_path / "p.jsonl")]) == 0
    want = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    with client(choice_folder) as c:
        served = [c.post("/choose", json={k: q[k] for k in ("context", "question", "choices")}) for q in questions]
        assert all(r.status_code == 200 for r in served), [r.text for r in served]
        bad = c.post("/choose", json={"context": "x", "choices": ["a", "b"]})
        assert bad.status_code == 400 and "choices has 2 entries; this model chooses among 3" in bad.text
        assert "choose" in c.get("/health").json()["endpoints"]
    answers = [r.json() for r in served]
    assert [(a["label"], a["choice"]) for a in answers] == [(w["label"], w["choice"]) for w in want]
    assert all(abs(sum(a["probabilities"]) - 1) < 1e-6 and len(a["probabilities"]) == 3 for a in answers)
    print(f"/choose equals predict on {len(answers)} of {len(want)} questions")


# --- ONNX with the task's inputs ---------------------------------------------------------------------------------
def test_onnx_of_a_classifier_with_columns_equals_pytorch(tmp_path: Path, tiny_dir: Path, tokenizer,  # noqa: ANN001
                                                          finetune_best) -> None:
    """export-onnx raised on a classifier with numeric columns; now its graph takes numeric_features and
    categorical_ids beside the text (the task's inputs), and equals PyTorch within 1e-4 on a batch unlike the
    traced one (every category id, the unknown bucket included)."""
    ort = pytest.importorskip("onnxruntime")
    from test_tabular import OPTIONS, ROWS, write_csv

    from bertkit.model import BertForSequenceClassification

    train = write_csv(tmp_path / "train.csv", ROWS * 2)
    best = finetune_best(tiny_dir, tmp_path / "run", "classification", train, "--max-length", "32",
                         "--template", "{Title}. {Review Text}", "--label-column", "Recommended IND", *OPTIONS)
    path = tmp_path / "m.onnx"
    assert main(["export-onnx", str(best), "-o", str(path)]) == 0
    model = BertForSequenceClassification.from_pretrained(str(best)).eval()
    tabular = model.config.tabular_inputs
    texts = ["Nice. Soft and warm", "Returned. Cheap fabric, thin and badly sewn at the seams", "Meh.", "Great fit"]
    batch = tokenizer(texts, padding=True).to_tensors()
    generator = torch.Generator().manual_seed(0)
    batch["numeric_features"] = torch.randn(len(texts), tabular["numeric"], generator=generator)
    batch["categorical_ids"] = torch.tensor([[k % n for n in tabular["categories"]] for k in range(len(texts))])
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    assert names == ["input_ids", "attention_mask", "token_type_ids", "numeric_features", "categorical_ids"]
    (got,) = session.run(None, {n: batch[n].numpy() for n in names})
    with torch.no_grad():
        want = model(**{n: batch[n] for n in names}).logits.numpy()
    diff = float(np.abs(got - want).max())
    print(f"ONNX of a classifier with columns: max |diff| {diff:.2e} on {len(texts)} rows")
    assert diff <= 1e-4
