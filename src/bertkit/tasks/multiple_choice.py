"""Multiple choice (SWAG-style): score each (context, choice) pair from its [CLS] vector, softmax over the choices.

Input: JSON lines, one question per line, with the fields
  - `context` (or `sent1`): the first segment, e.g. the situation or passage;
  - `question` (optional; or `sent2`): text put before every choice in the second segment ("question choice");
  - `choices` (or `endings`): a list of at least two strings, the same number on every line;
  - `label`: the 0-based index of the right choice (omitted in files to predict);
  - `id` (optional): carried to the prediction file.
Each choice becomes `[CLS] context [SEP] question choice [SEP]`, truncated longest-first to max_length.
Metric: accuracy. Predictions: JSON lines `{"id": ..., "label": k, "choice": text}`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from bertkit.dataclass_io import spec
from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, json_bytes
from bertkit.data.tables import check_text, iter_jsonl
from bertkit.errors import data_error
from bertkit.io import atomic_open
import bertkit.tasks.metrics as metrics
import bertkit.tasks.significance as significance
from bertkit.tasks.base import Feature, Head, Serving, Task, TaskSettings, softmax


@dataclass
class ChoiceExample:
    """One question: its context, optional question stem, the choices and the index of the right one."""

    line: int
    id: str
    context: str
    question: str
    choices: list[str]
    label: int | None


@dataclass
class MultipleChoiceSettings(TaskSettings):
    """What a fine-tuned multiple-choice model keeps: how many choices each question has."""

    main_metric: str | None = spec("accuracy")
    """The metric that picks the best checkpoint: accuracy."""
    num_choices: int | None = spec(None, ge=2, le=1000)
    """Choices per question in the training file (every file read later must have as many)."""


@dataclass
class ChooseRequest:
    """/choose's request: one question, as a line of the task's files holds it."""

    context: str
    """The first segment, e.g. the situation or passage."""
    choices: list[str]
    """The candidate continuations or answers (as many as the model was fine-tuned on)."""
    question: str = ""
    """Text put before every choice in the second segment ("question choice")."""


@dataclass
class ChooseResponse:
    label: int
    """The index of the chosen choice (as `bertkit predict` writes it)."""
    choice: str
    """Its text."""
    probabilities: list[float]
    """Every choice's probability (a softmax over the choices' scores)."""


def _first_text(path: str | os.PathLike, line: int, obj: dict[str, Any], *names: str) -> str | None:
    """The first of `names` that obj holds (null counts as absent), checked to be a text; None if it holds none."""
    name = next((n for n in names if obj.get(n) is not None), None)
    return None if name is None else check_text(path, line, name, obj[name])


class ChooseServing(Serving):
    """/choose: one question, answered with the chosen choice and every choice's probability."""

    # One question per request, as /qa: a question is one item of the server's batches.
    endpoint, request, response, item_field = "choose", ChooseRequest, ChooseResponse, None
    examples = ({"context": "She opened the umbrella", "question": "because",
                 "choices": ["it rained.", "it was sunny."]},
                {"context": "The committee met again on Tuesday to discuss the budget of the new library and",
                 "choices": ["agreed on its opening hours after a long debate.", "flew away."]})
    settings: MultipleChoiceSettings

    def request_examples(self, request: ChooseRequest) -> list[ChoiceExample]:
        """The question as an example; ValueError for fewer than two choices, or another number than the model
        was fine-tuned on (as `predict` refuses such a file)."""
        want = self.settings.num_choices
        if len(request.choices) < 2 or (want and len(request.choices) != want):
            raise ValueError(f"choices has {len(request.choices)} entries; this model chooses among "
                             f"{want or 'two or more'}")
        return [ChoiceExample(0, "request", request.context, request.question, list(request.choices), None)]

    def example_requests(self) -> list[dict[str, Any]]:
        """The declared examples with as many choices as the model takes."""
        n = self.settings.num_choices or 2
        return [{**body, "choices": (body["choices"] * n)[:n]} for body in super().example_requests()]

    def request_texts(self, request: ChooseRequest, examples: Sequence[ChoiceExample]) -> list[str]:
        return [request.context, *request.choices]

    def answer(self, example: ChoiceExample, features: Sequence[Feature],
               outputs: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        """The choice `decode` picks (the highest score), and the softmax over the choices."""
        logits = outputs[0]["logits"]
        k = int(logits.argmax())
        return {"label": k, "choice": example.choices[k], "probabilities": softmax(logits.astype(np.float64)).tolist()}

    def respond(self, request: ChooseRequest, results: list) -> dict[str, Any]:
        return results[0]

    def answer_bytes(self, example: ChoiceExample) -> int:
        """The chosen choice (the longest at most), its index, and every choice's probability."""
        return OBJECT_BYTES + max(map(json_bytes, example.choices)) + (len(example.choices) + 1) * NUMBER_BYTES


class MultipleChoiceTask(Task):
    """Pick one of several candidate continuations or answers."""

    name = "multiple-choice"
    aliases = ('multiple_choice', 'swag')
    settings_class = MultipleChoiceSettings
    serving = ChooseServing

    def read(self, path: str | os.PathLike, settings: MultipleChoiceSettings,
             labelled: bool = True) -> list[ChoiceExample]:
        """The questions of a JSON lines file; with fitted settings, another number of choices than training had
        is a DataError naming the line."""
        examples = []
        for line, obj in iter_jsonl(path):
            context = _first_text(path, line, obj, "context", "sent1")
            choices = next((obj[n] for n in ("choices", "endings") if n in obj), None)
            if context is None:
                raise data_error(path, line, "missing field 'context' (a string)")
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
                raise data_error(path, line, "field 'choices' must be a list of at least two strings")
            if examples and len(choices) != len(examples[0].choices):
                raise data_error(path, line, f"{len(choices)} choices, the first line has {len(examples[0].choices)}")
            label = obj.get("label")
            if label is not None and (isinstance(label, bool) or not isinstance(label, int)
                                      or not 0 <= label < len(choices)):
                raise data_error(path, line, f"label {label!r} is not a choice index 0..{len(choices) - 1}")
            if labelled and label is None:
                raise data_error(path, line, "missing field 'label' (the index of the right choice)")
            question = _first_text(path, line, obj, "question", "sent2") or ""
            examples.append(ChoiceExample(line, str(obj.get("id", line)), context, question, choices, label))
        want = settings.num_choices
        if labelled and examples and want and len(examples[0].choices) != want:
            raise data_error(path, examples[0].line, f"{len(examples[0].choices)} choices, training had {want}")
        return examples

    def fit_labels(self, examples: Sequence[ChoiceExample], settings: MultipleChoiceSettings) -> MultipleChoiceSettings:
        return dataclasses.replace(settings, num_choices=len(examples[0].choices) if examples else None)

    def head(self, settings: MultipleChoiceSettings) -> Head:
        """A score per choice from its [CLS] vector (BertForMultipleChoice), a softmax over the choices."""
        return Head("BertForMultipleChoice")

    def features(self, examples: Sequence[ChoiceExample], tokenizer: Any, settings: MultipleChoiceSettings,
                 training: bool) -> list[Feature]:
        out = []
        for ex in examples:
            encs = [tokenizer.encode(ex.context, f"{ex.question} {c}".strip(), max_length=settings.max_length,
                                     truncation="longest_first") for c in ex.choices]
            feature: Feature = {"input_ids": [list(e.input_ids) for e in encs],
                                "token_type_ids": [list(e.token_type_ids) for e in encs]}
            if ex.label is not None:
                feature["labels"] = ex.label
            out.append(feature)
        return out

    def decode(self, examples: Sequence[ChoiceExample], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: MultipleChoiceSettings) -> list[int]:
        return [int(out["logits"].argmax()) for out in outputs]

    def score(self, examples: Sequence[ChoiceExample], predictions: Sequence[int],
              settings: MultipleChoiceSettings) -> dict[str, float]:
        self.settings_of(settings, "score settings")  # typed, or a mapping of its fields (checked)
        return {"accuracy": metrics.accuracy(predictions, [ex.label for ex in examples])}

    def write_predictions(self, path: str | os.PathLike, examples: Sequence[ChoiceExample],
                          predictions: Sequence[int], settings: MultipleChoiceSettings) -> None:
        with atomic_open(path) as f:
            for ex, k in zip(examples, predictions):
                f.write(json.dumps({"id": ex.id, "label": k, "choice": ex.choices[k]}, ensure_ascii=False) + "\n")


def paired_test(examples: Sequence[ChoiceExample], predictions_a: Sequence[int], predictions_b: Sequence[int],
                settings: MultipleChoiceSettings, seed: int = 0) -> significance.PairedTest:
    """Accuracy of B against A: McNemar's exact test."""
    return significance.accuracy_test([ex.label for ex in examples], predictions_a, predictions_b)
