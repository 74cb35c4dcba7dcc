"""Prediction: the job behind `bertkit predict` (`run(PredictConfig)`): a fine-tuned folder's predictions for every
example of a file, read and tokenized exactly as fine-tuning did (the task's settings saved in the folder's
config.json) and written in the task's format: classification -> the input TSV plus a prediction column; ner ->
token<TAB>tag lines; qa -> {id: answer} JSON; multiple-choice -> JSON lines."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.dataclass_io import Config, spec
from bertkit.jobs.finetune import _load_finetuned
from bertkit.tasks.base import predict, require_examples


@dataclass
class PredictConfig(Config):
    """One prediction run: the fine-tuned folder, the input file and the predictions file.

    `bertkit predict`'s options are generated from these fields."""

    model: str = spec("")
    """Fine-tuned model folder (e.g. OUTPUT/best)."""
    input: str = spec("")
    """File in the task's format (labels not needed)."""
    output: str = spec("")
    """Predictions file (written atomically)."""
    batch_size: int = spec(64, ge=1, le=2**20)
    """Examples per forward pass."""


def run(config: PredictConfig) -> int:
    """Write config.model's prediction for every example of config.input to config.output; returns how many."""
    c = config
    t, settings, net, tokenizer = _load_finetuned(c.model)
    examples = t.read(c.input, settings, labelled=False)
    require_examples(examples, c.input)
    features = t.features(examples, tokenizer, settings, training=False)
    predictions = predict(t, net, examples, features, settings, c.batch_size, tokenizer)
    t.write_predictions(c.output, examples, predictions, settings)
    return len(predictions)


__all__ = ["PredictConfig", "run"]
