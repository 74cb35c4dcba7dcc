"""What every fine-tuning task shares: the Task core and its serving appendix, padding collation, and the functions
that run a task's model (`outputs`, `predict`, `evaluate`).

A task module subclasses `Task` (google-research/bert's DataProcessor plus `create_model`): it reads a file into
examples, fits what the training examples define, makes features, declares its head (`Head`: the class, its sizes,
the feature keys it reads), decodes the model's outputs into one prediction per example, scores and writes them; the
fine-tuning job and the one Trainer do the rest. A `Serving` subclass beside it is the task's HTTP endpoint.

A task's choices and what fitting learned live in one `TaskSettings` dataclass, written to the fine-tuned folder's
config.json (`task_settings`): `Task.settings(options, start)` makes them for a new run (from its options and the
folder it starts from), `Task.settings_of(saved)` reads them back, so `evaluate`, `predict` and `serve` read inputs
exactly as `finetune` did. Settings are never changed in place: `fit_labels` returns new ones.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from bertkit.data.masking import IGNORE_INDEX
# bertkit.data.tables reads every data file; a plug-in task's reader may take these names from here
from bertkit.data.tables import read_jsonl, read_table, read_text, require_field  # noqa: F401
from bertkit.dataclass_io import Config, config_from_dict, spec
from bertkit.errors import BertkitError, ConfigError, data_error
from bertkit.model.config import BertConfig

if TYPE_CHECKING:  # torch is imported where a model runs: the task registry, and so the CLI's help, read without it
    import torch
    from torch import Tensor

    from bertkit.model.folder import FolderConfig
    from bertkit.training.batches import BatchSampler

logger = logging.getLogger(__name__)

Feature = dict[str, Any]
MIN_LENGTH = 3  # [CLS] x [SEP]: the shortest sequence that holds a token
MAX_LENGTH = 2**20  # the model's own position limit is checked where the model is known; this bounds the option
DEFAULT_METRIC = "accuracy"  # the main metric of settings that name none


@dataclass
class TaskOptions(Config):
    """The options every task has. A task module subclasses this with its own typed fields and names it as its
    `options_class`; `bertkit finetune` gets a command-line flag for each field."""

    max_length: int | None = spec(None, ge=MIN_LENGTH, le=MAX_LENGTH)
    """Word pieces per sequence (None: the settings' default, 128; QA 384)."""


@dataclass
class TaskSettings(Config):
    """What a fine-tuned folder keeps of its task: the options' resolved values and what fitting on the training data
    learned. A task module subclasses it (`settings_class`); config.json's `task_settings` holds it as it is."""

    max_length: int = spec(128, ge=MIN_LENGTH, le=MAX_LENGTH)
    """Word pieces per sequence, as fine-tuning cut them."""
    main_metric: str | None = spec(None)
    """The metric that picks the best checkpoint (None: accuracy, unless fitting picks one)."""


@dataclass(frozen=True)
class Head:
    """The head a task's settings need: its class name (as config.json's `architectures`), the BertConfig fields
    that size it, the feature keys it reads and what inference keeps of its output. Fine-tuning builds it; evaluate,
    predict and serve check a folder against it; the collator passes exactly its inputs and labels."""

    class_name: str
    config: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("logits",)
    """The output fields batched inference keeps, what `decode` reads."""
    per_token: bool = False
    """Whether those outputs are (seq, ...) per feature (tagging, QA) rather than one per sequence."""
    inputs: tuple[str, ...] = ("input_ids", "token_type_ids")
    """Feature keys the head's forward reads (the collator adds attention_mask); a new input is named here."""
    labels: tuple[str, ...] = ("labels",)
    """Feature keys the head's loss reads, in training only."""


class Task:
    """One fine-tuning task: read, fit labels, make features, declare the head, decode, score, write predictions."""

    name: str = ""
    aliases: tuple[str, ...] = ()  # other spellings (config.task of older folders, GLUE/SQuAD/SWAG names)
    options_class: type[TaskOptions] = TaskOptions  # the task's typed options
    settings_class: type[TaskSettings] = TaskSettings  # the task's typed saved settings
    serving: type[Serving] | None = None  # the task's HTTP endpoint, a Serving subclass (None: not served)

    def settings(self, options: TaskOptions | Mapping[str, Any] | None = None,
                 start: FolderConfig | None = None) -> TaskSettings:
        """The settings of a new run from the task's options (typed, a dict as a config file's `options:`, or None
        for the defaults) and, when given, the config of the folder it starts from: the base ignores `start`; a task
        whose folders declare settings of their own (embedding) takes them for the options left unset."""
        options = task_options(self, options)
        settings = self.settings_class()
        return settings if options.max_length is None else dataclasses.replace(settings, max_length=options.max_length)

    def settings_of(self, saved: Any, where: str = "task_settings") -> TaskSettings:
        """The settings a model is used with: typed settings as they are; a mapping of their fields (config.json's
        `task_settings`; an unknown key is left out with a warning); or a folder's BertConfig: its saved settings
        when it names this task, else the defaults up to the model's position limit (a head bertkit did not
        fine-tune). A folder's label names are its config's."""
        if isinstance(saved, self.settings_class):
            return saved
        if isinstance(saved, Mapping):
            known = {f.name for f in dataclasses.fields(self.settings_class)}
            unknown = sorted(set(saved) - known)
            if unknown:
                logger.warning("%s: ignoring task setting(s) the %s task does not know: %s", where, self.name,
                               ", ".join(unknown))
            return config_from_dict(self.settings_class, {k: v for k, v in saved.items() if k in known},
                                    f"{where} (task {self.name})")
        if not isinstance(saved, BertConfig):
            raise ConfigError(f"{where} (task {self.name}): expected {self.settings_class.__name__} or a mapping of "
                              f"its fields, found {type(saved).__name__}")
        if saved.task in (self.name, *self.aliases):
            settings = self.settings_of(saved.task_settings or {}, "config.json task_settings")
            names = saved.label_names
        else:
            settings = self.settings(self.options_class(max_length=saved.max_sequence_length))
            names = saved.label_names or [f"LABEL_{i}" for i in range(saved.num_labels)]
        if names is not None and hasattr(settings, "label_names"):
            settings = dataclasses.replace(settings, label_names=list(names))
        return settings

    def read(self, path: str | os.PathLike, settings: TaskSettings, labelled: bool = True) -> list:
        """Read a data file into examples (the settings are read, never changed); raise DataError naming the file
        and line of anything malformed, and, with fitted settings, of a label training never had."""
        raise NotImplementedError

    def fit_labels(self, examples: Sequence, settings: TaskSettings) -> TaskSettings:
        """New settings with what the training examples define (the label set, fitted statistics)."""
        return settings

    def features(self, examples: Sequence, tokenizer: Any, settings: TaskSettings, training: bool) -> list[Feature]:
        """Model inputs (lists of ints, labels) for the examples; keys not in the head's `inputs` or `labels` are
        metadata (offsets, word starts) that `decode` reads."""
        raise NotImplementedError

    def head(self, settings: TaskSettings) -> Head:
        """The head these settings need (`Head`)."""
        raise NotImplementedError

    def batch_sampler(self, features: Sequence[Feature], settings: TaskSettings) -> BatchSampler | None:
        """How training groups an epoch's shuffled features into batches (None: batch_size at a time)."""
        return None

    def decode(self, examples: Sequence, features: Sequence[Feature], outputs: list[dict[str, np.ndarray]],
               settings: TaskSettings) -> list:
        """One prediction per example from the per-feature model outputs (`Head.outputs`)."""
        raise NotImplementedError

    def score(self, examples: Sequence, predictions: Sequence, settings: TaskSettings) -> dict[str, float]:
        """The task's metrics for predictions against the examples' references (settings typed or a mapping)."""
        raise NotImplementedError

    def write_predictions(self, path: str | os.PathLike, examples: Sequence, predictions: Sequence,
                          settings: TaskSettings) -> None:
        """Write predictions in the task's file format, atomically."""
        raise NotImplementedError


@dataclass
class TextsRequest:
    """A request of texts, each one example (the request `Serving` takes unless a task declares its own)."""

    texts: list[str]
    """The texts."""


class Serving:
    """A task's HTTP endpoint, beside its Task (named as the task's `serving`): the endpoint, its request and
    response bodies (dataclasses the server makes its schemas of), example requests, how a request becomes examples
    and how an example's outputs become its answer. `bertkit.serve` makes one per served folder and adds only
    transport (batching, limits, errors); the ONNX export traces the model on `example_requests`."""

    endpoint: str
    """Served at /<endpoint>."""
    request: type = TextsRequest
    """The request body (a dataclass)."""
    response: type
    """The response body (a dataclass)."""
    examples: tuple[dict[str, Any], ...] = ()
    """A few valid request bodies, whose answers have different lengths (what the ONNX export traces the model on,
    so padding is traced)."""
    item_field: str | None = "texts"
    """What item i of a request is called in a 400 that refuses it alone: `texts[i]` (None: the request)."""

    def __init__(self, task: Task, settings: TaskSettings, tokenizer: Any) -> None:
        self.task, self.settings, self.tokenizer = task, settings, tokenizer

    def request_examples(self, request: Any) -> list:
        """The task's examples of one request, made as `read` makes them of a file's rows; ValueError or a
        BertkitError naming the field for a bad request."""
        raise NotImplementedError

    def request_texts(self, request: Any, examples: Sequence) -> list[str]:
        """The strings of a request the server's limits apply to (how many, how long, not blank)."""
        return list(request.texts)

    def serve_features(self, example: Any) -> list[Feature]:
        """One served example's features, as `predict` makes them; an exception refuses this example alone."""
        return self.task.features([example], self.tokenizer, self.settings, training=False)

    def answer(self, example: Any, features: Sequence[Feature], outputs: Sequence[dict[str, np.ndarray]]) -> Any:
        """One example's result in the response (what `decode` reads of the same outputs, and the scores)."""
        raise NotImplementedError

    def respond(self, request: Any, results: list) -> dict[str, Any]:
        """The response body (a `response`) of a request's results: {"results": [...]} by default."""
        return {"results": results}

    def answer_bytes(self, example: Any) -> int | None:
        """The most bytes of JSON one example's answer can take (`bertkit.answers`), known before the model runs so
        the server can refuse a request over its max_response_bytes early. None: measured once computed."""
        return None

    def example_requests(self) -> list[dict[str, Any]]:
        """Valid request bodies for this model (`examples`, unless the settings decide the fields, as a
        classifier's columns do)."""
        return [dict(body) for body in self.examples]

    def batch(self, model: torch.nn.Module, examples: Sequence,
              seen: Callable[[list[Feature]], None] | None = None) -> list:
        """The endpoint on a batch of examples: every example's features (a refused one gets its exception as its
        result), one run of `model` over all of them, then each example's `answer`; the server, `bertkit.load(...)`
        and `bertkit predict --probabilities` all answer through it. `seen` gets the features before the model runs."""
        import torch

        results: list = [None] * len(examples)
        prepared = []
        for i, example in enumerate(examples):
            try:
                prepared.append((i, example, self.serve_features(example)))
            except Exception as e:  # noqa: BLE001 (the example's own answer: the caller says which one and why)
                results[i] = e
        flat = [f for _, _, features in prepared for f in features]
        if seen is not None:
            seen(flat)
        with torch.inference_mode():
            out = outputs(self.task, model, flat, self.settings, max(len(flat), 1), self.tokenizer) if flat else []
        start = 0
        for i, example, features in prepared:
            results[i] = self.answer(example, features, out[start:start + len(features)])
            start += len(features)
        return results


# --- running a task: its options, batches, the model's outputs, predictions and metrics ---------------------------


def task_options(task: Task, values: TaskOptions | Mapping[str, Any] | None = None,
                 where: str = "options") -> TaskOptions:
    """A task's typed options: typed ones as they are, else from a dict (a config file's `options:`)."""
    if isinstance(values, TaskOptions):
        return values
    return config_from_dict(task.options_class, dict(values or {}), f"{where} (task {task.name})")


def collator(head: Head, tokenizer: Any) -> Collator:
    """The function that pads a list of a task's features into a batch of tensors: the keys `head` reads."""
    return Collator(pad_token_id=getattr(tokenizer, "pad_token_id", 0) or 0, model_keys=head.inputs + head.labels)


def outputs(task: Task, model: torch.nn.Module, features: Sequence[Feature], settings: TaskSettings,
            batch_size: int, tokenizer: Any = None) -> list[dict[str, np.ndarray]]:
    """The model's outputs (the head's `Head.outputs`) per feature, in the features' order: what `decode` reads."""
    head = task.head(settings)
    results: list[dict[str, np.ndarray]] = [{} for _ in features]
    for i, out in iter_model_outputs(model, features, collator(head, tokenizer), batch_size, head.outputs,
                                     head.per_token, head.inputs):
        results[i] = out
    return results


def predict(task: Task, model: torch.nn.Module, examples: Sequence, features: Sequence[Feature],
            settings: TaskSettings, batch_size: int, tokenizer: Any = None) -> list:
    """Run the model over the features and decode one prediction per example."""
    return task.decode(examples, features, outputs(task, model, features, settings, batch_size, tokenizer), settings)


def answer_examples(serving: Serving, model: torch.nn.Module, examples: Sequence, batch_size: int,
                    where: Callable[[int], str]) -> list:
    """Every example's answer as the server gives it (`Serving.batch`, batch_size examples per model run). The
    first example refused raises its error, its message prefixed with `where(i)`."""
    answers: list = []
    for start in range(0, len(examples), batch_size):
        answers += serving.batch(model, examples[start:start + batch_size])
    for i, answer in enumerate(answers):
        if isinstance(answer, (BertkitError, ValueError)):  # the input's fault: the server's 400, named
            raise type(answer)(f"{where(i)}: {answer}") from answer
        if isinstance(answer, Exception):
            raise answer
    return answers


def evaluate(task: Task, model: torch.nn.Module, examples: Sequence, features: Sequence[Feature],
             settings: TaskSettings, batch_size: int, tokenizer: Any = None) -> dict[str, float]:
    """Predict and score: the Trainer's evaluation callback."""
    return task.score(examples, predict(task, model, examples, features, settings, batch_size, tokenizer), settings)


def require_examples(examples: Sequence, path: str | os.PathLike, what: str = "examples") -> None:
    """DataError if a file yielded no examples (an empty dev set cannot pick a best checkpoint)."""
    if not examples:
        raise data_error(path, None, f"no {what} found (the file is empty or holds only blank lines)")


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
        import torch

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
        masks = [[[1] * len(s) for s in ids] if isinstance(ids[0], list) else [1] * len(ids)
                 for ids in (f["input_ids"] for f in features)]
        batch["attention_mask"] = torch.tensor(_pad(masks, 0), dtype=torch.long)
        return batch


def _pad_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """(seq_i, ...) arrays stacked into one zero-padded float32 array (batch, max seq, ...)."""
    out = np.zeros((len(arrays), max(len(a) for a in arrays), *arrays[0].shape[1:]), dtype=np.float32)
    for row, a in enumerate(arrays):
        out[row, :len(a)] = a
    return out


def feature_length(feature: Feature) -> int:
    """Tokens in a feature (the longest choice for multiple choice): what batching by length sorts on."""
    ids = feature["input_ids"]
    return max(len(s) for s in ids) if isinstance(ids[0], list) else len(ids)


def iter_model_outputs(model: torch.nn.Module, features: Sequence[Feature], collate: Collator, batch_size: int,
                       output_keys: Sequence[str] = ("logits",), per_token: bool = False,
                       model_inputs: Sequence[str] = ("input_ids", "token_type_ids"),
                       ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(feature index, its outputs as float32 arrays; per-token ones cut to the feature's own length) for every
    feature, batched by length (less padding, same results), computed without gradients; the model is put back in
    its former mode."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(features)), key=lambda i: feature_length(features[i]))
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = collate([features[i] for i in idx])
            inputs = {k: v.to(device) for k, v in batch.items() if k in model_inputs or k == "attention_mask"}
            with torch.no_grad():
                out = model(**inputs)
                arrays = {k: getattr(out, k).float().cpu().numpy() for k in output_keys}
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                yield i, {k: v[row, :n] if per_token else v[row] for k, v in arrays.items()}
    finally:
        model.train(was_training)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax."""
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)
