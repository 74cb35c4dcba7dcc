"""The small Python API: open a model folder once, then call what its head answers.

    import bertkit
    bert = bertkit.load("path/to/model")          # a folder, a shipped model's name or a Hugging Face Hub id
    vectors = bert.encode(["a sentence", "another"])  # numpy (2, hidden), under any head
    bert.classify(["a fine film"])                # a fine-tuned classifier: label, probability, probabilities
    bert.calls                                    # what this folder's head answers

Every task call (classify, rank, tag, answer, choose, request) runs the task's `Serving` on the path the server's
route runs (`Serving.batch`: the request's examples, their features, one model run, the answers), so Python,
`bertkit predict --probabilities` and `bertkit serve` give the same numbers; fill_mask and encode run the functions
the server's /fill-mask and /embed run. A call the folder's head cannot answer is a ConfigError naming the calls it
has.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config.json naming only its task opens into one)
from bertkit.dataclass_io import check_value
from bertkit.errors import ConfigError
from bertkit.inference.encoder import Encoder, Encoders
from bertkit.inference.fill_mask import fill_mask_batch
from bertkit.inference.options import EncodeOptions, SemanticSearchOptions
from bertkit.inference.pooling import folder_defaults
from bertkit.inference.precision import DEFAULT_PRECISION
from bertkit.inference.similarity import cos_sim
from bertkit.jobs.predict import PredictConfig
from bertkit.model import BertPreTrainedModel
from bertkit.model.checkpoint import save_pretrained
from bertkit.model.folder import open_folder
from bertkit.tasks import Serving, folder_serving
from bertkit.tasks.base import answer_examples
from bertkit.tasks.classification import relevance_scores, reranks
from bertkit.tasks.ner import entities

TASK_BATCH = 64  # examples per model run of the task calls: PredictConfig.batch_size's default, its range checked

# The calls each task's endpoint gives (the server's route -> the Python calls), and what each call needs.
TASK_CALLS: dict[str, tuple[str, ...]] = {"classify": ("classify", "rank"), "ner": ("tag",), "qa": ("answer",),
                                          "choose": ("choose",)}
NEEDS = {
    "classify": "a sequence classifier (`bertkit finetune --task classification`)",
    "rank": "a classifier of text pairs with one output or two labels (a cross-encoder)",
    "tag": "a token classifier (`bertkit finetune --task ner`)",
    "answer": "a question-answering head (`bertkit finetune --task qa`)",
    "choose": "a multiple-choice head (`bertkit finetune --task multiple-choice`)",
    "fill_mask": "a masked-LM head (BertForMaskedLM or BertForPreTraining)",
    "request": "a head that a task serves",
}


@dataclass
class Bert:
    """A model and its tokenizer, loaded together from one folder, with the Encoders it has built (one per precision
    and length asked for: a second `encode(..., precision="int8")` does not calibrate again)."""

    model: BertPreTrainedModel
    tokenizer: Any
    defaults: dict[str, Any] = field(default_factory=dict)
    """Embedding defaults read from the folder (sentence-transformers' pooling, normalisation, max length)."""
    path: Path | None = None
    """The folder it was loaded from (named in errors)."""
    encoders: Encoders = field(init=False, repr=False, compare=False)
    serving: Serving | None = field(init=False, repr=False, compare=False)
    """The task's serving object for this head (None: no task serves it), built as the server builds it: with the
    settings saved in the folder, which `bertkit predict` uses too."""

    def __post_init__(self) -> None:
        self.encoders = Encoders(self.model, self.tokenizer, self.defaults)
        self.serving = folder_serving(self.model, self.tokenizer)

    @property
    def calls(self) -> tuple[str, ...]:
        """The calls this folder's head answers: encode and similarity under any head, fill_mask with a masked-LM
        head, and the calls of the task that serves it (classify and, for a pair classifier, rank; tag; answer;
        choose; and `request`, the task's endpoint as a dict)."""
        calls = ["encode", "similarity"]
        if getattr(getattr(self.model, "cls", None), "predictions", None) is not None:  # as the server's /fill-mask
            calls.append("fill_mask")
        if self.serving is not None:
            calls += [c for c in TASK_CALLS.get(self.serving.endpoint, ())
                      if c != "rank" or reranks(self.serving.settings)]
            calls.append("request")
        return tuple(calls)

    def _check_call(self, call: str) -> None:
        """A ConfigError unless this folder's head answers `call`, naming what it needs and the calls it has."""
        if call not in self.calls:
            where = f"{self.path}: " if self.path is not None else ""
            raise ConfigError(f"{where}{call}() needs {NEEDS[call]}; this folder holds a {type(self.model).__name__}, "
                              f"whose calls are {', '.join(self.calls)}")

    def _served(self, call: str) -> Serving:
        self._check_call(call)
        assert self.serving is not None
        return self.serving

    def _answers(self, call: str, bodies: Sequence[Mapping[str, Any]], batch_size: int, field: str) -> list:
        """The answers to request bodies of the task's endpoint, one request item each (one example per body),
        batch_size examples per model run: the path of the server's route (request_examples, then Serving.batch)."""
        serving = self._served(call)
        batch_size = check_value(PredictConfig, "batch_size", batch_size, "batch_size")
        examples = [example for body in bodies for example in serving.request_examples(serving.request(**body))]
        return answer_examples(serving, self.model, examples, batch_size, lambda i: f"{field}[{i}]")

    def request(self, body: Mapping[str, Any], batch_size: int = TASK_BATCH) -> Any:
        """What `bertkit serve` answers at POST /<endpoint> of this folder's task for the request `body` (a dict
        of the task's request fields: {"texts": [...]} for /classify and /ner, {"question", "context"} for /qa,
        ...), without the server's size limits. A field the request does not have is a TypeError naming it."""
        serving = self._served("request")
        results = self._answers("request", [body], batch_size, serving.item_field or serving.endpoint)
        return serving.respond(serving.request(**body), results)

    def classify(self, texts: str | Sequence[str] | Sequence[tuple[str, str]] | None = None,
                 pairs: Sequence[str] | None = None, columns: Sequence[Mapping[str, Any]] | None = None,
                 batch_size: int = TASK_BATCH) -> Any:
        """A sequence classifier's answer per text, or per (text, pair) when `texts` holds pairs or `pairs` is
        given (a cross-encoder's input), or per object of `columns` for a model trained on table columns: as
        /classify answers, {"label", "probability", "probabilities": {label: p}} (multi-label heads add "labels",
        those above 0.5; a regression head answers "value", its label and probability None). One text (a string,
        or one pair as a tuple) gives one answer, a list a list."""
        single = isinstance(texts, str) or (isinstance(texts, tuple) and len(texts) == 2 and
                                             all(isinstance(t, str) for t in texts))
        items = [texts] if single else (list(texts) if texts is not None else None)
        if items and not isinstance(items[0], str):  # pairs as (text, pair) tuples
            if pairs is not None:
                raise ValueError("texts holds (text, pair) tuples and pairs is given too: give one of the two")
            items, pairs = [t for t, _ in items], [p for _, p in items]
        body = {"texts": items, "pairs": None if pairs is None else list(pairs),
                "columns": None if columns is None else [dict(row) for row in columns]}
        results = self._answers("classify", [body], batch_size, "columns" if items is None else "texts")
        return results[0] if single else results

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None, return_documents: bool = False,
             batch_size: int = TASK_BATCH) -> list[dict[str, Any]]:
        """A pair classifier used as a reranker: each document's relevance to the query, best first, as
        sentence-transformers' CrossEncoder.rank gives it: [{"corpus_id": its index, "score": relevance (a
        one-output head's sigmoid, a two-label head's second label's probability), "text" with
        return_documents}], the top_k best (all when None). The server's /rerank scores the same way."""
        serving = self._served("rank")
        if top_k is not None:
            top_k = check_value(SemanticSearchOptions, "top_k", top_k, "top_k")
        batch_size = check_value(PredictConfig, "batch_size", batch_size, "batch_size")
        documents = list(documents)
        scores = relevance_scores(serving, self.model, [query] * len(documents), documents, batch_size)
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_k]
        return [{"corpus_id": i, "score": scores[i], **({"text": documents[i]} if return_documents else {})}
                for i in order]

    def tag(self, texts: str | Sequence[str], words: bool = False,
            batch_size: int = TASK_BATCH) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """A token classifier's entities in each text: [{"label": type, "text": as it was sent, "start", "end":
        its characters, "score": its words' mean tag probability}] (`bertkit.tasks.ner.entities`). words=True gives
        each word's tag instead, as /ner answers: [{"token", "label", "probability", "start", "end"}]. One text
        gives its list, a list of texts a list of lists."""
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        tagged = self._answers("tag", [{"texts": items}], batch_size, "texts")
        results = tagged if words else [entities(t, text) for t, text in zip(tagged, items)]
        return results[0] if single else results

    def answer(self, questions: str | Sequence[str], contexts: str | Sequence[str],
               batch_size: int = TASK_BATCH) -> dict[str, Any] | list[dict[str, Any]]:
        """An extractive QA head's answer to each question from its context, as /qa answers: {"answer": the span,
        "score": its start + end logit, "start_char", "end_char"}; a SQuAD v2.0 model answers "" (at 0, with the
        null score) when no span beats having no answer. One question gives one answer, lists a list."""
        single = isinstance(questions, str)
        if single != isinstance(contexts, str):
            raise ValueError("questions and contexts: give one string each, or two lists of the same length")
        qs, cs = ([questions], [contexts]) if single else (list(questions), list(contexts))
        if len(qs) != len(cs):
            raise ValueError(f"{len(qs)} questions but {len(cs)} contexts; give one context per question")
        results = self._answers("answer", [{"question": q, "context": c} for q, c in zip(qs, cs)], batch_size,
                                "questions")
        return results[0] if single else results

    def choose(self, prompt: str | Sequence[str], choices: Sequence[str] | Sequence[Sequence[str]],
               question: str = "", batch_size: int = TASK_BATCH) -> dict[str, Any] | list[dict[str, Any]]:
        """A multiple-choice head's pick among the choices that continue the prompt, as /choose answers: {"label":
        the chosen index, "choice": its text, "probabilities": every choice's}; `question` goes before every
        choice. One prompt with its choices gives one answer; a list of prompts, with a list of choices each, a
        list."""
        single = isinstance(prompt, str)
        prompts, lists = ([prompt], [list(choices)]) if single else (list(prompt), [list(c) for c in choices])
        if len(prompts) != len(lists):
            raise ValueError(f"{len(prompts)} prompts but {len(lists)} lists of choices; give one list per prompt")
        bodies = [{"context": p, "choices": c, "question": question} for p, c in zip(prompts, lists)]
        results = self._answers("choose", bodies, batch_size, "prompts")
        return results[0] if single else results

    def fill_mask(self, texts: str | Sequence[str], top_k: int = 5,
                  batch_size: int = 32) -> list[list[dict[str, Any]]] | list[list[list[dict[str, Any]]]]:
        """A masked-LM head's top_k tokens at every mask token of each text (the folder's own: [MASK], <mask>), most
        probable first, as /fill-mask answers them: [{"token", "token_id", "probability"}] per mask. One text gives
        its list per mask, a list of texts a list of those. batch_size texts go in one forward pass."""
        self._check_call("fill_mask")
        batch_size = check_value(EncodeOptions, "batch_size", batch_size, "batch_size")
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        results = [[[vars(p) for p in mask] for mask in per_text]
                   for start in range(0, len(items), batch_size)
                   for per_text in fill_mask_batch(self.model, self.tokenizer, items[start:start + batch_size], top_k)]
        return results[0] if single else results

    def similarity(self, a: str | Sequence[str], b: str | Sequence[str], **encode_options: Any) -> np.ndarray:
        """The cosine similarity of the embeddings of the texts of `a` and of `b` (`encode` with
        `encode_options`; `bertkit.cos_sim`): (len(a), len(b)), or, where a side is one string, that axis
        dropped (two strings give a number, as a 0-d array)."""
        scores = cos_sim(self.encode(a, **encode_options), self.encode(b, **encode_options))
        return scores[0 if isinstance(a, str) else slice(None), 0 if isinstance(b, str) else slice(None)]

    def encoder(self, precision: str = DEFAULT_PRECISION, max_length: int | None = None) -> Encoder:
        """The Encoder `encode` runs for these options (on the model's device), built on first use and kept."""
        return self.encoders.get(precision, max_length)

    def encode(self, texts: str | Sequence[str], pooling: str | None = None, normalize: bool | None = None,
               batch_size: int = 32, max_length: int | None = None, precision: str = DEFAULT_PRECISION) -> np.ndarray:
        """Sentence embeddings, (len(texts), hidden) float32 (a single string gives (hidden,)).

        Unset options take the folder's defaults, else mean pooling, no normalisation, the position limit.
        precision "auto" computes in bf16 where the hardware has bf16 matrix units and in fp32 otherwise (the
        choice is logged; `bertkit.inference.precision.choose_precision`); "fp32", "bf16" or "int8" force one.
        """
        single = isinstance(texts, str)
        vectors = self.encoder(precision, max_length).encode([texts] if single else list(texts), pooling=pooling,
                                                           normalize=normalize, batch_size=batch_size).numpy()
        return vectors[0] if single else vectors

    def save(self, folder: str | os.PathLike) -> None:
        """Write the model and the tokenizer into one folder, atomically as a whole."""
        save_pretrained(self.model, folder, extra=lambda target: self.tokenizer.save_pretrained(str(target)))


def load(folder: str | os.PathLike, model_class: str | None = None, **kwargs: Any) -> Bert:
    """Open a model folder (or a shipped model's name, or a Hugging Face Hub id: `bertkit.pretrained`): the class
    its config.json names (or `model_class`), its tokenizer and defaults.

    kwargs go to from_pretrained (strict=, dtype=, config field overrides such as num_labels=).
    """
    opened = open_folder(folder, model_class, **kwargs)  # a shipped model's name or a Hub id (bertkit.pretrained)
    return Bert(opened.model, opened.tokenizer, folder_defaults(opened.path), opened.path)
