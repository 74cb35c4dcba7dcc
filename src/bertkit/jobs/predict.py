"""Prediction: the job behind `bertkit predict` (`run(PredictConfig)`): a fine-tuned folder's predictions for every
example of a file, read and tokenized exactly as fine-tuning did (the task's settings saved in the folder's
config.json) and written in the task's format: classification -> the input TSV plus a prediction column; ner ->
token<TAB>tag lines; qa -> {id: answer} JSON; multiple-choice -> JSON lines; embedding -> JSON lines, each query's
ranking of the documents (of a retrieval set, or the file's own texts) or each scored pair's cosine.

With `probabilities`, each example's answer is written as the server gives it, with its scores (one JSON line per
example: `{"id": ..., "answer": ...}`), computed on the server's path (`Serving.batch`); the default files are the
tasks' own formats, which have no place for scores."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from bertkit.dataclass_io import Config, spec
from bertkit.errors import ConfigError
from bertkit.io import atomic_open
from bertkit.tasks.base import answer_examples, predict, require_examples


@dataclass
class PredictConfig(Config):
    """One prediction run: `bertkit predict`'s options are generated from these fields."""

    model: str = spec("")
    """Fine-tuned model folder (e.g. OUTPUT/best)."""
    input: str = spec("")
    """File in the task's format (labels not needed)."""
    output: str = spec("")
    """Predictions file (written atomically)."""
    batch_size: int = spec(64, ge=1, le=2**20)
    """Examples per forward pass."""
    probabilities: bool = False
    """Write each example's answer with its scores, as the server answers it (JSON lines: {"id", "answer"}: a
    label's probabilities, each word's tag probability, an answer's score, each choice's probability) instead of
    the task's prediction format."""


def run(config: PredictConfig) -> int:
    """Write config.model's prediction for every example of config.input to config.output; returns how many."""
    from bertkit.jobs.finetune import _load_finetuned

    c = config
    t, settings, net, tokenizer = _load_finetuned(c.model)
    examples = t.read(c.input, settings, labelled=False)
    require_examples(examples, c.input)
    if c.probabilities:
        if t.serving is None:
            raise ConfigError(f"task {t.name!r} declares no Serving, which --probabilities reads answers with")
        answers = answer_examples(t.serving(t, settings, tokenizer), net, examples, c.batch_size,
                                  lambda i: f"{c.input}: example {i + 1}")
        write_answers(c.output, examples, answers)
        return len(answers)
    features = t.features(examples, tokenizer, settings, training=False)
    predictions = predict(t, net, examples, features, settings, c.batch_size, tokenizer)
    t.write_predictions(c.output, examples, predictions, settings)
    return len(predictions)


def write_answers(path: str, examples: Sequence, answers: Sequence) -> None:
    """JSON lines, one per example: its id (the file's id for QA and multiple choice, else its line) and answer."""
    with atomic_open(path) as f:
        for example, answer in zip(examples, answers):
            ident = getattr(example, "id", None) or getattr(example, "line", None)
            f.write(json.dumps({"id": ident, "answer": answer}, ensure_ascii=False) + "\n")


__all__ = ["PredictConfig", "run", "write_answers"]
