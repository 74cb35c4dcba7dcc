"""What every fine-tuning task shares: the Task protocol, file readers with line numbers, padding collation and
batched inference.

A task module (classification, ner, qa, multiple_choice) subclasses `Task` and supplies its reader, its feature
conversion, its decoding of model outputs into one prediction per example, its metric and its prediction file.
The fine-tuning job (`bertkit.jobs.finetune`) and the one Trainer do everything else.

Settings: every task keeps its choices (label names, max length, columns, doc stride, ...) and what fitting learned
from the training data in one dataclass (its `settings_class`, a `TaskSettings`), written to the fine-tuned model's
config.json as it is (`task_settings`, `dataclasses.asdict`) and read back by `Task.load_settings`, so `evaluate`,
`predict` and `serve` read inputs exactly as `finetune` did. Settings are never changed in place: reading a file
leaves them as they are, and `fit_labels` returns new ones.

The head: `Task.head(settings)` is the one declaration of the head the settings need, its class and the BertConfig
fields that size it (`Head`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from bertkit.data.dataset import IGNORE_INDEX
# bertkit.data.tables reads every data file; a plug-in task's reader may take these names from here
from bertkit.data.tables import read_jsonl, read_table, read_text, require_field  # noqa: F401
from bertkit.dataclass_io import Config, spec
from bertkit.errors import ConfigError, data_error
from bertkit.tasks.significance import PairedTest

logger = logging.getLogger(__name__)

Feature = dict[str, Any]
MIN_LENGTH = 3  # [CLS] x [SEP]: the shortest sequence that holds a token
MAX_LENGTH = 2**20  # the model's own position limit is checked where the model is known; this bounds the option


@dataclass
class TaskOptions(Config):
    """The options every task has. A task module subclasses this with its own typed fields and names it as its
    `options_class`; `bertkit finetune` gets a command-line flag for each field."""

    max_length: int | None = spec(None, ge=MIN_LENGTH, le=MAX_LENGTH)
    """Word pieces per sequence (None: the task's default, 128; QA 384)."""


@dataclass
class TaskSettings(Config):
    """What a fine-tuned folder keeps of its task: the options' resolved values and what fitting on the training data
    learned. A task module subclasses it (`settings_class`); config.json's `task_settings` holds it as it is."""

    max_length: int = spec(128, ge=MIN_LENGTH, le=MAX_LENGTH)
    """Word pieces per sequence, as fine-tuning cut them."""
    main_metric: str | None = spec(None)
    """The metric that picks the best checkpoint (None: the task's `main_metric`)."""



Settings = TaskSettings  # the name the task modules' signatures use


@dataclass(frozen=True)
class Head:
    """The head a task's settings need: its class (by name, as `bertkit.model.MODEL_CLASSES` and config.json's
    `architectures` name it) and the BertConfig fields that size it (num_labels, label_names, problem_type,
    tabular_inputs, frozen_tagger, ...). Fine-tuning builds the head from it; evaluate, predict and serve check a
    folder against it."""

    class_name: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Serving:
    """A task's HTTP endpoint, declared by the task (`Task.serving`) and built into a route by `bertkit.serve`, which
    adds only transport: batching, limits, errors. The request and response bodies are dataclasses (the server makes
    its schemas of them, a request field the endpoint does not know refused); what the endpoint computes is the
    task's: `request_examples`, `serve_features`, `outputs`, `answer`, `respond` (`Task.serve_batch` runs them)."""

    endpoint: str
    """Served at /<endpoint>."""
    request: type
    """The request body (a dataclass)."""
    response: type
    """The response body (a dataclass)."""
    examples: tuple[dict[str, Any], ...] = ()
    """A few valid request bodies, whose answers have different lengths (`Task.example_requests`: what the ONNX
    export traces the model on, so padding is traced)."""
    item_field: str | None = "texts"
    """What item i of a request is called in a 400 that refuses it alone: `texts[i]` (None: the request)."""


class Task:
    """One fine-tuning task: how to read it, turn it into model inputs, decode outputs, score and write predictions."""

    name: str = ""
    aliases: tuple[str, ...] = ()  # other spellings (config.task of older folders, GLUE/SQuAD/SWAG names)
    order: int = 100  # where the task is listed (CLI help, error messages)
    model_class_name: str = ""  # the head in bertkit.model that serves the task
    main_metric: str = "accuracy"  # the metric that picks the best checkpoint
    greater_is_better: bool = True
    default_lr: float = 3e-5
    default_max_length: int = 128
    model_inputs: tuple[str, ...] = ("input_ids", "token_type_ids")
    """Feature keys the head's forward reads, passed through by the collator and run_model (which add
    attention_mask): a task with a new input (numeric columns, ...) names it here and its head takes it."""
    label_keys: tuple[str, ...] = ("labels",)  # feature keys the head's loss reads, in training only
    output_keys: tuple[str, ...] = ("logits",)  # what batched inference keeps of the model's output
    per_token_outputs: bool = False  # outputs are (seq, ...) per feature (tagging, QA) rather than per sequence
    options_class: type[TaskOptions] = TaskOptions  # the task's typed options
    settings_class: type[TaskSettings] = TaskSettings  # the task's typed saved settings
    serving: Serving | None = None  # the task's HTTP endpoint (None: not served)
    own_heads: tuple[type, ...] = ()  # head classes a plug-in task brings (register_task registers them by name)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A task module's own `score` gets its settings typed whatever it was given (`typed_settings`): one place
        for every task, plug-ins included."""
        super().__init_subclass__(**kwargs)
        if "score" in cls.__dict__:
            cls.score = _scored_with_typed_settings(cls.__dict__["score"])

    @property
    def head_classes(self) -> tuple[str, ...]:
        """Every head class the task fine-tunes (`head` picks one per settings): a folder with one of them and no
        bertkit task is served by this task."""
        return (self.model_class_name,)

    # --- what the fine-tuning job calls, in order --------------------------------------------------------------
    def options(self, values: dict[str, Any] | None = None, where: str = "options") -> TaskOptions:
        """The task's typed options from a dict (a config file's `options:`); a key the task does not have is a
        ConfigError naming it and the task."""
        from bertkit.dataclass_io import config_from_dict

        return config_from_dict(self.options_class, dict(values or {}), f"{where} (task {self.name})")

    def settings(self, options: TaskOptions | dict[str, Any] | None = None) -> Settings:
        """Task settings (the task's `settings_class`) from its options (typed, or a dict of them), stored in the
        fine-tuned model's config.json so that evaluate, predict and serve read inputs exactly as fine-tuning did."""
        if not isinstance(options, TaskOptions):
            options = self.options(options)
        return self.settings_from(options)

    def settings_from(self, options: TaskOptions) -> Settings:
        """What a task module overrides: its settings from its typed options (`common_settings` gives the shared
        fields)."""
        return self.settings_class(**self.common_settings(options))

    def common_settings(self, options: TaskOptions) -> dict[str, Any]:
        """The settings every task takes from its options: max_length (checked; the task's default if not given)."""
        return {"max_length": options.max_length or self.default_max_length}

    def load_settings(self, saved: Mapping[str, Any] | None, where: str = "task_settings") -> Settings:
        """The task's settings from their config.json form (a dict; folders of every bertkit version): a value of
        the wrong type is a ConfigError naming the field; a key this version does not know (written by hand or by
        a newer bertkit) is left out with a warning naming it."""
        from bertkit.dataclass_io import config_from_dict

        saved = dict(saved or {})
        known = {f.name for f in dataclasses.fields(self.settings_class)}
        unknown = sorted(set(saved) - known)
        if unknown:
            logger.warning("%s: ignoring task setting(s) the %s task does not know: %s", where, self.name,
                           ", ".join(unknown))
        return config_from_dict(self.settings_class, {k: v for k, v in saved.items() if k in known},
                                f"{where} (task {self.name})")

    def typed_settings(self, settings: Any, where: str = "settings") -> Settings:
        """The task's settings as its `settings_class`: typed ones as they are; a mapping (config.json's form, and
        the form `score` was documented with until 2026-11-25) through `load_settings`; anything else a ConfigError
        saying what is expected."""
        if isinstance(settings, self.settings_class):
            return settings
        if isinstance(settings, Mapping):
            return self.load_settings(settings, where)
        raise ConfigError(f"{where} (task {self.name}): expected {self.settings_class.__name__} or a mapping of its "
                          f"fields, found {type(settings).__name__}")

    def folder_settings(self, config: Any) -> Settings:
        """The settings a loaded folder's model is used with (evaluate, predict, serve): the saved ones when its
        config.json names this task; else, for a head with no bertkit task (a transformers checkpoint, a folder
        made by hand), `default_settings(config)`. Label names are the config's, which name the head's outputs."""
        if config.task in (self.name, *self.aliases):
            settings = self.load_settings(config.task_settings, "config.json task_settings")
        else:
            settings = self.default_settings(config)
        if hasattr(settings, "label_names") and config.label_names is not None:
            settings = dataclasses.replace(settings, label_names=list(config.label_names))
        return settings

    def default_settings(self, config: Any) -> Settings:
        """Settings for a head this task serves that was not fine-tuned by bertkit: the defaults, reading up to the
        model's position limit (no fine-tuning length is known)."""
        return self.settings_class(max_length=config.max_position_embeddings)

    def read(self, path: str | os.PathLike, settings: Settings, labelled: bool = True) -> list:
        """Read a data file into examples (the settings are read, never changed); raise DataError naming the file
        and line of anything malformed."""
        raise NotImplementedError

    def fit_labels(self, examples: Sequence, settings: Settings) -> Settings:
        """New settings with what the training examples define (the label set, fitted statistics)."""
        return settings

    def check_examples(self, examples: Sequence, settings: Settings, path: str | os.PathLike) -> None:
        """Raise DataError if evaluation examples hold something training never had (an unseen label)."""

    def head(self, settings: Settings) -> Head:
        """The head these settings need: the task's `model_class_name`, sized by the model's own config (a task
        with labels or extra inputs overrides this)."""
        return Head(self.model_class_name)

    def features(self, examples: Sequence, tokenizer: Any, settings: Settings, training: bool) -> list[Feature]:
        """Model inputs (lists of ints, labels) for the examples; feature keys not in `collate`'s list are metadata."""
        raise NotImplementedError

    def prepare_inputs(self, model: torch.nn.Module, features: list[Feature], options: TaskOptions,
                       output_dir: str | os.PathLike) -> list[Feature]:
        """Inputs computed once with the model before training and evaluation (the frozen encoder's cached features
        of the feature-based approach); by default the features as they are."""
        return features

    def collator(self, tokenizer: Any) -> "Collator":
        """The function that pads a list of features into a batch of tensors."""
        return Collator(pad_token_id=getattr(tokenizer, "pad_token_id", 0) or 0,
                        model_keys=self.model_inputs + self.label_keys)

    def decode(self, examples: Sequence, features: Sequence[Feature], outputs: list[dict[str, np.ndarray]],
               settings: Settings) -> list:
        """One prediction per example from the per-feature model outputs."""
        raise NotImplementedError

    def score(self, examples: Sequence, predictions: Sequence, settings: Settings) -> dict[str, float]:
        """The task's metrics for predictions against the examples' references. Callers may give the settings as a
        mapping of their fields: a task module's `score` receives them typed (`__init_subclass__`)."""
        raise NotImplementedError

    def write_predictions(self, path: str | os.PathLike, examples: Sequence, predictions: Sequence,
                          settings: Settings) -> None:
        """Write predictions in the task's file format, atomically."""
        raise NotImplementedError

    def paired_test(self, examples: Sequence, predictions_a: Sequence, predictions_b: Sequence, settings: Settings,
                    seed: int = 0) -> "PairedTest":
        """Is B better than A on these examples by the task's main metric? A paired test (tasks.significance)."""
        raise ConfigError(f"task {self.name!r} has no paired significance test")

    # --- serving (`serving` declares the endpoint; bertkit.serve adds the transport) -----------------------------
    def request_examples(self, request: Any, settings: Settings, tokenizer: Any) -> list:
        """The task's examples of one request (a `serving.request`), made as `read` makes them of a file's rows: one
        item each for the server's batcher; ValueError or a BertkitError naming the field for a bad request."""
        raise NotImplementedError

    def request_texts(self, request: Any, examples: Sequence) -> list[str]:
        """The strings of a request the server's limits apply to (how many, how long, not blank); `texts[i]` in
        their messages."""
        return list(request.texts)

    def serve_features(self, example: Any, tokenizer: Any, settings: Settings) -> list[Feature]:
        """One served example's features, made as `predict` makes them (`features`); an exception refuses this
        example alone (ValueError or a BertkitError: a 400 saying why)."""
        return self.features([example], tokenizer, settings, training=False)

    def answer(self, example: Any, features: Sequence[Feature], outputs: Sequence[dict[str, np.ndarray]],
               settings: Settings) -> Any:
        """One example's result in the response (what `decode` reads of the same outputs, and the scores)."""
        raise NotImplementedError

    def respond(self, request: Any, results: list) -> dict[str, Any]:
        """The response body (a `serving.response`) of a request's results: {"results": [...]} by default."""
        return {"results": results}

    def answer_bytes(self, example: Any, settings: Settings) -> int | None:
        """The most bytes of JSON one example's answer can take (`bertkit.answers`: NUMBER_BYTES per number,
        OBJECT_BYTES per object, the strings' `json_bytes`), known before the model runs: the server refuses a
        request whose answers could exceed its max_response_bytes before computing them. None: not declared (a
        plug-in's answer is then measured once computed)."""
        return None

    def example_requests(self, settings: Settings) -> list[dict[str, Any]]:
        """Valid request bodies for a model with these settings (`serving.examples` unless the settings decide the
        fields, as a classifier's columns do)."""
        return [dict(body) for body in self.serving.examples] if self.serving else []

    def serve_batch(self, model: torch.nn.Module, tokenizer: Any, settings: Settings,
                    examples: Sequence) -> list:
        """The endpoint's batch function: every example's features (one that is refused gets its exception as its
        result), one run of the model over all of them (`outputs`), then each example's `answer`."""
        results: list = [None] * len(examples)
        prepared = []
        for i, example in enumerate(examples):
            try:
                prepared.append((i, example, self.serve_features(example, tokenizer, settings)))
            except Exception as e:  # noqa: BLE001 (the example's own answer: the server says which one and why)
                results[i] = e
        flat = [f for _, _, features in prepared for f in features]
        outputs = self.outputs(model, flat, max(len(flat), 1), tokenizer) if flat else []
        start = 0
        for i, example, features in prepared:
            results[i] = self.answer(example, features, outputs[start:start + len(features)], settings)
            start += len(features)
        return results

    # --- shared ------------------------------------------------------------------------------------------------
    def predict(self, model: torch.nn.Module, examples: Sequence, features: Sequence[Feature], settings: Settings,
                batch_size: int, tokenizer: Any = None) -> list:
        """Run the model over the features and decode one prediction per example."""
        return self.decode(examples, features, self.outputs(model, features, batch_size, tokenizer), settings)

    def outputs(self, model: torch.nn.Module, features: Sequence[Feature], batch_size: int,
                tokenizer: Any = None) -> list[dict[str, np.ndarray]]:
        """The model's outputs (`output_keys`) per feature, in order: what `decode` reads."""
        return run_model(model, features, self.collator(tokenizer), batch_size, self.output_keys,
                         self.per_token_outputs, self.model_inputs)

    def evaluate(self, model: torch.nn.Module, examples: Sequence, features: Sequence[Feature], settings: Settings,
                 batch_size: int, tokenizer: Any = None) -> dict[str, float]:
        """Predict and score: the Trainer's evaluation callback."""
        return self.score(examples, self.predict(model, examples, features, settings, batch_size, tokenizer),
                          settings)


def _scored_with_typed_settings(score: Any) -> Any:
    """A task module's `score`, its settings argument made typed first (`Task.typed_settings`)."""

    @functools.wraps(score)
    def typed(self: Task, examples: Sequence, predictions: Sequence, settings: Any) -> dict[str, float]:
        return score(self, examples, predictions, self.typed_settings(settings, "score settings"))

    return typed


# ----------------------------------------------------------------------------------------------------------------
# Reading files.
# ----------------------------------------------------------------------------------------------------------------


def require_examples(examples: Sequence, path: str | os.PathLike, what: str = "examples") -> None:
    """DataError if a file yielded no examples (an empty dev set cannot pick a best checkpoint)."""
    if not examples:
        raise data_error(path, None, f"no {what} found (the file is empty or holds only blank lines)")


# ----------------------------------------------------------------------------------------------------------------
# Batches.
# ----------------------------------------------------------------------------------------------------------------


def _pad(rows: list, pad: int | float) -> list:
    """Pad a list of int lists (or of lists of int lists, for multiple choice) to a rectangle."""
    if rows and isinstance(rows[0][0], list):
        width = max(len(seq) for row in rows for seq in row)
        return [[seq + [pad] * (width - len(seq)) for seq in row] for row in rows]
    width = max(len(row) for row in rows)
    return [row + [pad] * (width - len(row)) for row in rows]


@dataclass
class Collator:
    """Pads features into tensors: input_ids with [PAD], token types with 0, token labels with -100, per-token
    arrays (seq, ...) with zeros into float32; builds the attention mask. Keys a model does not read (example ids,
    offsets) are left out of the batch."""

    pad_token_id: int = 0
    model_keys: tuple[str, ...] = ("input_ids", "token_type_ids", "labels", "start_positions", "end_positions")

    def __call__(self, features: Sequence[Feature]) -> dict[str, Tensor]:
        batch: dict[str, Tensor] = {}
        first = features[0]
        for key in self.model_keys:
            if key not in first:
                continue
            values = [f[key] for f in features]
            if isinstance(values[0], np.ndarray):  # per-token arrays (cached encoder features)
                batch[key] = torch.from_numpy(_pad_arrays(values))
            elif isinstance(values[0], list) and values[0] and isinstance(values[0][0], float):
                batch[key] = torch.tensor(values, dtype=torch.float32)  # multi-label targets
            elif isinstance(values[0], list):
                pad = {"input_ids": self.pad_token_id, "labels": IGNORE_INDEX}.get(key, 0)
                batch[key] = torch.tensor(_pad(values, pad), dtype=torch.long)
            elif isinstance(values[0], float):
                batch[key] = torch.tensor(values, dtype=torch.float32)  # regression targets
            else:
                batch[key] = torch.tensor(values, dtype=torch.long)
        lengths = [[len(s) for s in f["input_ids"]] if isinstance(f["input_ids"][0], list) else len(f["input_ids"])
                   for f in features]
        batch["attention_mask"] = torch.tensor(_pad([_ones(n) for n in lengths], 0), dtype=torch.long)
        return batch


def _pad_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """(seq_i, ...) arrays stacked into one zero-padded float32 array (batch, max seq, ...)."""
    out = np.zeros((len(arrays), max(len(a) for a in arrays), *arrays[0].shape[1:]), dtype=np.float32)
    for row, a in enumerate(arrays):
        out[row, :len(a)] = a
    return out


def _ones(n: int | list[int]) -> list:
    return [[1] * k for k in n] if isinstance(n, list) else [1] * n


def feature_length(feature: Feature) -> int:
    """Tokens in a feature (the longest choice for multiple choice): what batching by length sorts on."""
    ids = feature["input_ids"]
    return max(len(s) for s in ids) if isinstance(ids[0], list) else len(ids)


@torch.no_grad()
def iter_model_outputs(model: torch.nn.Module, features: Sequence[Feature], collate: Collator, batch_size: int,
                       output_keys: Sequence[str] = ("logits",), per_token: bool = False,
                       model_inputs: Sequence[str] = ("input_ids", "token_type_ids"),
                       ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(feature index, its outputs as float32 arrays; per-token ones cut to the feature's own length) for every
    feature, batched by length (less padding, same results); the model is put back in its former mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(features)), key=lambda i: feature_length(features[i]))
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = collate([features[i] for i in idx])
            inputs = {k: v.to(device) for k, v in batch.items() if k in model_inputs or k == "attention_mask"}
            out = model(**inputs)
            arrays = {k: getattr(out, k).float().cpu().numpy() for k in output_keys}
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                yield i, {k: v[row, :n] if per_token else v[row] for k, v in arrays.items()}
    finally:
        model.train(was_training)


def run_model(model: torch.nn.Module, features: Sequence[Feature], collate: Collator, batch_size: int,
              output_keys: Sequence[str] = ("logits",), per_token: bool = False,
              model_inputs: Sequence[str] = ("input_ids", "token_type_ids")) -> list[dict[str, np.ndarray]]:
    """Model outputs for every feature, in the features' order (see iter_model_outputs)."""
    results: list[dict[str, np.ndarray] | None] = [None] * len(features)
    for i, out in iter_model_outputs(model, features, collate, batch_size, output_keys, per_token, model_inputs):
        results[i] = out
    return results  # type: ignore[return-value]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax."""
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def iter_batches(items: Sequence, size: int) -> Iterator[Sequence]:
    """Consecutive slices of at most `size` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]



