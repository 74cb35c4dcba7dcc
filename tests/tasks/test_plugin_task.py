"""The worked example of a task as a plug-in (issue 26, item 1): a task with a NEW model input, defined here, outside
bertkit, with its own head, joins with one call (`register_task`) and is then fine-tuned, evaluated, predicted,
served over HTTP and exported to ONNX by bertkit's own jobs, server and exporter, with no change to src/.

The toy task, "casing": is a sentence about someone? Its head reads, beside the word pieces, `casing_ids`: 1 for a
piece of a capitalised word, 0 otherwise (an uncased tokenizer loses that). What it costs: this one module (its
settings, reader, features, head, decoding, metric, and its endpoint beside it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.io import atomic_open
from bertkit.model.heads import MODEL_CLASSES, BertHeadModel, ClassifierOutput
from bertkit.tasks import ALIASES, TASKS, register_task
from bertkit.tasks.base import Feature, Head, Serving, Task, TaskSettings, TextsRequest, collator, read_table, softmax


# --- the plug-in: one module --------------------------------------------------------------------------------------
class BertForCasedClassification(BertHeadModel):
    """A sentence label from the mean of its tokens' vectors, each plus an embedding of its casing id."""

    reads_pooled_output = False

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.casing = nn.Embedding(2, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                casing_ids: Tensor | None = None, labels: Tensor | None = None) -> ClassifierOutput:
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state  # (batch, seq, hidden)
        hidden = hidden + self.casing(casing_ids if casing_ids is not None else torch.zeros_like(input_ids))
        mask = (attention_mask if attention_mask is not None else torch.ones_like(input_ids)).unsqueeze(-1)
        pooled = (hidden * mask).sum(1) / mask.sum(1)  # (batch, hidden)
        logits = self.classifier(pooled)
        return ClassifierOutput(None if labels is None else F.cross_entropy(logits, labels.view(-1)), logits)


@dataclass
class Sentence:
    line: int
    text: str
    label: str | None


@dataclass
class CasingSettings(TaskSettings):
    label_names: list[str] | None = None
    """The labels, fitted on the training file."""


@dataclass
class CasingAnswer:
    label: str
    probability: float


@dataclass
class CasingResponse:
    results: list[CasingAnswer]


class CasingServing(Serving):
    endpoint, response = "casing", CasingResponse
    examples = ({"texts": ["Anna met Bob.", "the cat sat on the mat all day long, and then slept."]},)

    def request_examples(self, request: TextsRequest) -> list[Sentence]:
        return [Sentence(0, text, None) for text in request.texts]

    def answer(self, example: Sentence, features: Sequence[Feature], outputs: Sequence[dict[str, np.ndarray]]) -> dict:
        probs = softmax(outputs[0]["logits"].astype(np.float64))
        return {"label": self.settings.label_names[int(probs.argmax())], "probability": float(probs.max())}


class CasingTask(Task):
    """TSV `text<TAB>label` with a header -> one label per sentence, read with the words' casing."""

    name = "casing"
    settings_class = CasingSettings
    serving = CasingServing

    def read(self, path: Any, settings: CasingSettings, labelled: bool = True) -> list[Sentence]:
        rows = read_table(path)[1:]  # the header first
        return [Sentence(line, row[0], row[1] if len(row) > 1 and labelled else None) for line, row in rows]

    def fit_labels(self, examples: Sequence[Sentence], settings: CasingSettings) -> CasingSettings:
        return dataclasses.replace(settings, label_names=sorted({ex.label for ex in examples}), main_metric="accuracy")

    def head(self, settings: CasingSettings) -> Head:
        return Head("BertForCasedClassification", {"num_labels": len(settings.label_names or []),
                                                   "label_names": settings.label_names},
                    inputs=("input_ids", "token_type_ids", "casing_ids"))

    def features(self, examples: Sequence[Sentence], tokenizer: Any, settings: CasingSettings,
                 training: bool) -> list[Feature]:
        index = {name: i for i, name in enumerate(settings.label_names or [])}
        out = []
        for ex in examples:
            enc = tokenizer.encode(ex.text, max_length=settings.max_length, truncation=True)
            casing = [int(not special and ex.text[a:b][:1].isupper())
                      for (a, b), special in zip(enc.offsets, enc.special_tokens_mask)]
            feature: Feature = {"input_ids": list(enc.input_ids), "token_type_ids": list(enc.token_type_ids),
                                "casing_ids": casing}
            if ex.label is not None:
                feature["labels"] = index[ex.label]
            out.append(feature)
        return out

    def decode(self, examples: Sequence[Sentence], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: CasingSettings) -> list[str]:
        return [settings.label_names[int(out["logits"].argmax())] for out in outputs]

    def score(self, examples: Sequence[Sentence], predictions: Sequence[str], settings: CasingSettings) -> dict:
        return {"accuracy": float(np.mean([p == ex.label for p, ex in zip(predictions, examples)]))}

    def write_predictions(self, path: Any, examples: Sequence[Sentence], predictions: Sequence[str],
                          settings: CasingSettings) -> None:
        with atomic_open(path) as f:
            f.writelines(f"{ex.text}\t{p}\n" for ex, p in zip(examples, predictions))


# --- the worked example -------------------------------------------------------------------------------------------
TRAIN = [("Anna met Bob in Paris.", "person"), ("the rain fell all day.", "none"), ("Tom laughed.", "person"),
         ("a cold wind blew over the hills.", "none"), ("Mary and John sang.", "person"),
         ("the soup was too salty.", "none")] * 4


@pytest.fixture(scope="module")
def registered() -> Iterator[type[Task]]:
    """CasingTask registered for this module; the registries as they were afterwards (other tests list them)."""
    saved = dict(TASKS), dict(ALIASES), dict(MODEL_CLASSES)
    yield register_task(CasingTask, BertForCasedClassification)
    for registry, before in zip((TASKS, ALIASES, MODEL_CLASSES), saved):
        registry.clear()
        registry.update(before)


def test_a_plugin_task_is_finetuned_evaluated_served_and_exported(registered: type[Task], tmp_path: Path,
                                                                  tiny_dir: Path) -> None:
    from bertkit.cli import main
    from bertkit.jobs import evaluate, predict
    from bertkit.jobs.finetune import FinetuneConfig, finetune, finetune_training
    from bertkit.serve import ServeSettings, create_app
    from bertkit.tasks import get_task

    assert register_task(CasingTask) is CasingTask and get_task("casing").name == "casing"  # again: a no-op
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in TRAIN))
    config = FinetuneConfig(task="casing", model=str(tiny_dir), train=str(train), dev=str(train),
                            options={"max_length": 16})
    config.training = finetune_training(get_task("casing"), {"output_dir": str(tmp_path / "run"), "epochs": 2,
                                                             "batch_size": 8, "lr": 1e-3, "progress_bar": False})
    result = finetune(config)
    best = Path(result["best_dir"])
    saved = json.loads((best / "config.json").read_text())
    assert saved["architectures"] == ["BertForCasedClassification"] and saved["task"] == "casing"
    assert saved["task_settings"] == {"max_length": 16, "main_metric": "accuracy", "label_names": ["none", "person"]}

    metrics = evaluate.run(evaluate.EvaluateConfig(model=str(best), input=str(train)))
    assert metrics["examples"] == len(TRAIN) and 0.0 <= metrics["accuracy"] <= 1.0
    texts = ["Anna sang in London.", "the hills were cold and the wind blew all night long over the fields."]
    source = tmp_path / "new.tsv"
    source.write_text("text\n" + "".join(f"{t}\n" for t in texts))
    assert predict.run(predict.PredictConfig(model=str(best), input=str(source), output=str(tmp_path / "p.tsv"))) == 2
    predicted = [line.split("\t")[1] for line in (tmp_path / "p.tsv").read_text().splitlines()]

    from fastapi.testclient import TestClient  # the server: its route comes from the task's serving class

    with TestClient(create_app(best, ServeSettings(precision="fp32"))) as client:
        assert client.get("/health").json()["endpoints"] == ["casing", "embed"]
        r = client.post("/casing", json={"texts": texts})
        assert r.status_code == 200, r.text
        assert [x["label"] for x in r.json()["results"]] == predicted
        assert client.post("/casing", json={"texts": texts, "casing": True}).status_code == 422  # unknown field
        assert client.post("/casing", json={"texts": [" "]}).status_code == 400  # the server's limits apply

    ort = pytest.importorskip("onnxruntime")  # ONNX: the new input is a graph input with its own axes
    path = tmp_path / "casing.onnx"
    assert main(["export-onnx", str(best), "-o", str(path)]) == 0
    task = get_task("casing")
    settings = task.settings_of(BertForCasedClassification.from_pretrained(str(best)).config)
    model = BertForCasedClassification.from_pretrained(str(best)).eval()
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(best)
    features = task.features(task.read(train, settings)[:7], tokenizer, settings, False)
    batch = collator(task.head(settings), tokenizer)(features)
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    assert names == ["input_ids", "attention_mask", "token_type_ids", "casing_ids"]
    assert int(batch["casing_ids"].sum()) > 0
    (got,) = session.run(None, {n: batch[n].numpy() for n in names})
    with torch.no_grad():
        want = model(**{n: batch[n] for n in names}).logits.numpy()
    diff = float(np.abs(got - want).max())
    print(f"plug-in task: eval accuracy {metrics['accuracy']:.3f}; served = predict on {len(texts)} texts; "
          f"ONNX max |diff| {diff:.2e}")
    assert diff <= 1e-4
