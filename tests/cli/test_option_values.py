"""Every generated option of every verb takes its values through the one options layer: NaN, an infinity, a negative
number, a huge number, a word where a number belongs and an unknown choice, given on the command line, end the verb
with exit code 1 or 2 and a message naming the option's field, before any work and without a traceback; a value the
field accepts gets as far as the missing input files the test gives it (so nothing real runs)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import typing
from contextlib import redirect_stderr
from typing import Any

import pytest

from bertkit.cli import build_parser
from bertkit.cli.config_options import PREFIX, value_reader
from bertkit.dataclass_io import check_value
from bertkit.errors import BertkitError, ConfigError

MISSING = "/nonexistent/bertkit-test"
# What each verb needs besides the option under test: inputs that do not exist, so an accepted value stops there.
ARGV = {
    "prepare-pretraining": [MISSING, "-o", f"{MISSING}/o", "--tokenizer", MISSING],
    "pretrain": ["--train-data", MISSING, "--output", f"{MISSING}/o"],
    "finetune": ["--task", "classification", "--model", MISSING, "--train", MISSING, "--dev", MISSING, "--output",
                 f"{MISSING}/o"],
    "evaluate": ["--model", MISSING, "--input", MISSING],
    "predict": ["--model", MISSING, "--input", MISSING, "--output", f"{MISSING}/o"],
    "distill": ["--teacher", MISSING, "--train", MISSING, "--output", f"{MISSING}/o"],
    "embed": [MISSING, "-o", f"{MISSING}/o", "--model", MISSING],
    "index": [MISSING, "-o", f"{MISSING}/o"],
    "search": ["--index", MISSING, "q"],
    "serve": ["--model", MISSING],
    "train-tokenizer": [MISSING, "-o", f"{MISSING}/o", "--vocab-size", "100"],
    "fill-mask": ["a [MASK] .", "--model", MISSING],
    "extract-features": [MISSING, "-o", f"{MISSING}/o", "--model", MISSING],
    "attention": ["text", "--model", MISSING, "-o", f"{MISSING}/o.png"],
    "export-onnx": [MISSING, "-o", f"{MISSING}/m.onnx"],
}
BAD_TEXTS = ["nan", "inf", "-inf", "-1", "1e30", "100000000000000000000000000", "abc", "[1]"]


@functools.cache
def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _options() -> list[tuple[str, argparse.Action]]:
    """(verb, action) of every generated option whose field is a number or a choice of strings."""
    out = []
    for verb in ARGV:
        for action in _verbs()[verb]._actions:
            if action.dest.startswith(PREFIX) and action.nargs != 0 and not action.dest.endswith(".options"):
                out.append((verb, action))
    return out


def _field(verb: str, path: str) -> tuple[type, str] | None:
    """The config class and field name an option's path sets (None when no config class declares it)."""
    from bertkit.tasks import TASKS

    classes = _verb_classes(verb)
    *parents, name = path.split(".")
    for cls in classes:
        for part in parents:
            hints = typing.get_type_hints(cls)
            cls = _dataclass_of(hints.get(part)) if part != "options" else None  # type: ignore[assignment]
            if cls is None:
                break
        if cls is not None and name in {f.name for f in dataclasses.fields(cls)}:
            return cls, name
    if parents == ["options"]:
        for task in TASKS.values():
            if name in {f.name for f in dataclasses.fields(task.options_class)}:
                return task.options_class, name
    return None


def _dataclass_of(tp: Any) -> type | None:
    for arg in (tp, *typing.get_args(tp)):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _verb_classes(verb: str) -> list[type]:
    from bertkit.data.config import PretrainingDataConfig
    from bertkit.data.prepare import PrepareOptions
    from bertkit.inference.options import AttentionOptions, ExportOptions, FeatureOptions, FillMaskOptions
    from bertkit.jobs.distill import DistillConfig
    from bertkit.jobs.embed import EmbedConfig
    from bertkit.jobs.evaluate import EvaluateConfig
    from bertkit.jobs.finetune import FinetuneConfig
    from bertkit.jobs.predict import PredictConfig
    from bertkit.jobs.pretrain import PretrainConfig
    from bertkit.jobs.search import IndexConfig, SearchConfig
    from bertkit.serve.settings import ServeAddress, ServeSettings
    from bertkit.tokenizer.trainer import VocabOptions
    from bertkit.training.config import TrainingConfig

    return {
        "prepare-pretraining": [PretrainingDataConfig, PrepareOptions], "pretrain": [PretrainConfig, TrainingConfig],
        "finetune": [FinetuneConfig, TrainingConfig], "evaluate": [EvaluateConfig], "predict": [PredictConfig],
        "distill": [DistillConfig, TrainingConfig], "embed": [EmbedConfig], "index": [IndexConfig],
        "search": [SearchConfig], "serve": [ServeSettings, ServeAddress], "train-tokenizer": [VocabOptions],
        "fill-mask": [FillMaskOptions], "extract-features": [FeatureOptions], "attention": [AttentionOptions],
        "export-onnx": [ExportOptions],
    }[verb]


def _run(verb: str, argv: list[str]) -> tuple[int, str]:
    """The verb's exit code and stderr, as `bertkit.cli.main` would give them (parser built once)."""
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            args = _verbs()[verb].parse_args(argv)
            code = args.func(args) or 0
        except SystemExit as e:
            code = int(e.code or 0)
        except BertkitError as e:
            err.write(f"error: {e}\n")
            code = 1
    return code, err.getvalue()


def _valid(field: tuple[type, str] | None, action: argparse.Action, text: str) -> bool:
    """Whether the field itself takes this text (then the verb goes on, to the missing inputs)."""
    if field is None:
        return False
    cls, name = field
    try:
        value = (action.type or str)(text)
        check_value(cls, name, value)
    except (ConfigError, ValueError, TypeError, argparse.ArgumentTypeError):
        return False
    if action.choices is not None and value not in action.choices:
        return False
    return True


@pytest.mark.parametrize("verb,action", _options(), ids=lambda v: v if isinstance(v, str) else v.dest[len(PREFIX):])
def test_a_bad_value_of_any_option_is_refused_by_name_before_the_work(verb: str, action: argparse.Action,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = action.dest[len(PREFIX):]
    field = _field(verb, path)
    assert field is not None or path in ("training",), f"{verb} {action.option_strings[0]}: no config field sets it"
    flag = action.option_strings[0]
    for text in BAD_TEXTS + (["no-such-choice"] if action.choices else []):
        if _valid(field, action, text):
            continue
        code, err = _run(verb, [*ARGV[verb], flag, text])
        assert code in (1, 2), (verb, flag, text, code, err)
        assert "Traceback" not in err, (verb, flag, text, err)
        name = path.split(".")[-1]
        assert name in err or flag in err or name.replace("_", "-") in err, (verb, flag, text, err)


def test_the_walk_covers_the_options_handed_to_libraries() -> None:
    """FAISS's, torch's and ONNX's values are among the options walked, each with its declared range."""
    walked = {(verb, a.dest[len(PREFIX):]) for verb, a in _options()}
    for want in [("search", "ef_search"), ("search", "nprobe"), ("search", "top_k"), ("index", "index.pq_bits"),
                 ("index", "index.pq_m"), ("index", "index.nlist"), ("embed", "device"), ("export-onnx", "opset"),
                 ("finetune", "training.device"), ("serve", "port"), ("fill-mask", "top_k")]:
        assert want in walked, want
