"""Evaluation: the job behind `bertkit evaluate` (`run(EvaluateConfig)`): a fine-tuned folder scored on a labelled
file with its task's metrics, the file read and tokenized exactly as fine-tuning read its dev file (the task's
settings saved in the folder's config.json)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.dataclass_io import SEED_LIMIT, Config, spec
from bertkit.io import atomic_write_json
from bertkit.jobs.finetune import MAX_EXAMPLES, _load_finetuned, read_examples
from bertkit.tasks.base import evaluate


@dataclass
class EvaluateConfig(Config):
    """One evaluation: `bertkit evaluate`'s options are generated from these fields."""

    model: str = spec("")
    """Fine-tuned model folder (e.g. OUTPUT/best)."""
    input: str = spec("")
    """Labelled file in the task's format."""
    output: str | None = spec(None)
    """Write the metrics here as JSON (they are returned, and `bertkit evaluate` prints them, either way)."""
    batch_size: int = spec(64, ge=1, le=2**20)
    """Examples per forward pass."""
    max_examples: int | None = spec(None, ge=1, le=MAX_EXAMPLES)
    """A seeded random subset of the file (None: all of it)."""
    seed: int = spec(42, ge=0, le=SEED_LIMIT)
    """Seed of that subset (fine-tuning's default seed, so max_eval_examples there picks the same examples)."""


def run(config: EvaluateConfig) -> dict[str, float]:
    """The metrics of config.model on config.input (and the number of examples scored); written as JSON to
    config.output when given."""
    c = config
    t, settings, net, tokenizer = _load_finetuned(c.model)
    # a label training never had is an error naming its line
    examples = read_examples(t, c.input, settings, c.max_examples, c.seed)
    features = t.features(examples, tokenizer, settings, training=False)
    result = {**evaluate(t, net, examples, features, settings, c.batch_size, tokenizer), "examples": len(examples)}
    if c.output:
        atomic_write_json(c.output, result)
    return result


__all__ = ["EvaluateConfig", "run"]
