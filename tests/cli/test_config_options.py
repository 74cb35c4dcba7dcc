"""Every verb with a config gets its options from the one generator, bertkit.cli.config_options: each field of the
verb's config dataclass is an option that sets that field (and no option sets anything else), the task options are
a group of their own in `--help`, and the option names the README and the tests use still give the same values."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from bertkit.cli import build_parser
from bertkit.cli.config_options import PREFIX, given_options
from bertkit.data.config import PretrainingDataConfig
from bertkit.jobs.demo import DemoConfig
from bertkit.jobs.distill import DistillConfig
from bertkit.jobs.evaluate import EvaluateConfig
from bertkit.jobs.finetune import TASK_LR, FinetuneConfig
from bertkit.jobs.predict import PredictConfig
from bertkit.jobs.pretrain import ExecutionConfig, PhaseConfig, PretrainConfig
from bertkit.data.prepare import PrepareOptions
from bertkit.inference.options import AttentionOptions, ExportOptions, FeatureOptions, FillMaskOptions
from bertkit.serve.settings import ServeAddress, ServeSettings
from bertkit.tokenizer.trainer import VocabOptions
from bertkit.tasks import TASKS
from bertkit.training.config import TrainingConfig

# verb -> its config dataclass, the nested configs whose fields are options too, the field that is not one option
# but a group of them (the task's options), and the other configs whose every field is an option of the verb.
VERBS: dict[str, tuple[type, dict[str, type], tuple[str, ...], tuple[type, ...]]] = {
    "prepare-pretraining": (PretrainingDataConfig, {}, (), (PrepareOptions,)),
    "pretrain": (PretrainConfig, {"training": TrainingConfig, "execution": ExecutionConfig}, (), ()),
    "finetune": (FinetuneConfig, {"training": TrainingConfig}, ("options",), ()),
    "evaluate": (EvaluateConfig, {}, (), ()),
    "predict": (PredictConfig, {}, (), ()),
    "distill": (DistillConfig, {"training": TrainingConfig}, (), ()),
    "serve": (ServeSettings, {}, (), (ServeAddress,)),
    "demo": (DemoConfig, {}, (), ()),
    "train-tokenizer": (VocabOptions, {}, (), ()),
    "fill-mask": (FillMaskOptions, {}, (), ()),
    "extract-features": (FeatureOptions, {}, (), ()),
    "attention": (AttentionOptions, {}, (), ()),
    "export-onnx": (ExportOptions, {}, (), ()),
}
REQUIRED = {  # what argparse itself requires of a verb, besides the option under test
    "prepare-pretraining": ["in.txt", "-o", "out", "--tokenizer", "tok"],
    "evaluate": ["--model", "m", "--input", "i"],
    "predict": ["--model", "m", "--input", "i", "--output", "o"],
    "serve": ["--model", "m"],
    "train-tokenizer": ["f.txt", "-o", "out", "--vocab-size", "100"],
    "fill-mask": ["text", "--model", "m"],
    "extract-features": ["in.txt", "-o", "out", "--model", "m"],
    "attention": ["text", "--model", "m", "-o", "o.png"],
    "export-onnx": ["m", "-o", "m.onnx"],
}
TASK_VERBS = ("finetune", "distill")  # the verbs with a task options group


@functools.cache
def _verbs() -> dict[str, argparse.ArgumentParser]:
    """Verb -> its parser (built once: parsing does not change a parser)."""
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _paths(cls: type, nested: dict[str, type], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Dotted path -> type of every field of `cls`, the nested configs' fields expanded."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name in nested:
            out.update({f"{f.name}.{p}": tp for p, tp in _paths(nested[f.name], {}).items()})
        else:
            out[f.name] = hints[f.name]
    return out


def _task_options() -> dict[str, Any]:
    """Every task's options: name -> type (the first task's where two share a name)."""
    out: dict[str, Any] = {}
    for task_cls in TASKS.values():
        for name, tp in _paths(task_cls.options_class, {}).items():
            out.setdefault(name, tp)
    return out


def _sample(tp: Any) -> tuple[str, Any]:
    """A command-line text for a field of type `tp` and the value it must give (not the field's default)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        tp = args[0]
    samples: dict[Any, tuple[str, Any]] = {
        bool: ("true", True), int: ("7", 7), float: ("3e-4", 3e-4), str: ("data.json#38:", "data.json#38:"),
        list[str]: ("Age, Rating", ["Age", "Rating"]), list[int]: ("[0, 2]", [0, 2]),
        dict[str, Any]: ("{hidden_dropout_prob: 0}", {"hidden_dropout_prob": 0}),
        list[PhaseConfig]: ("[{data: d128, max_steps: 900}]", [{"data": "d128", "max_steps": 900}]),
    }
    if tp not in samples:
        raise AssertionError(f"no sample value for a field of type {tp}: add one here")
    return samples[tp]


def _generated(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest[len(PREFIX):]: a for a in p._actions if a.dest.startswith(PREFIX)}


@pytest.mark.parametrize("verb", VERBS)
def test_every_config_field_is_an_option_that_sets_it(verb: str) -> None:
    cls, nested, skip, others = VERBS[verb]
    p = _verbs()[verb]
    fields = _paths(cls, nested, skip)
    for other in others:
        fields.update(_paths(other, {}))
    tasks = {f"options.{n}": tp for n, tp in _task_options().items()} if verb in TASK_VERBS else {}
    actions = _generated(p)
    assert set(actions) == set(fields) | set(tasks)  # one option per field, and no option for anything else
    for path, tp in {**fields, **tasks}.items():
        action = actions[path]
        own = "--" + path.removeprefix("options.").replace("_", "-")
        assert own in action.option_strings, (path, action.option_strings)
        if action.nargs == 0:  # a switch: --frozen / --no-frozen
            argv, want = [own], True
        elif action.choices:
            argv, want = [own, list(action.choices)[-1]], list(action.choices)[-1]
        else:
            text, want = _sample(tp)
            argv = [own, text]
        args = p.parse_args([*REQUIRED.get(verb, []), *argv])
        assert given_options(args)[path] == want, (verb, argv)


@pytest.mark.parametrize("verb", TASK_VERBS)
def test_help_lists_the_task_options_as_their_own_group(verb: str) -> None:
    p = _verbs()[verb]
    (group,) = [g for g in p._action_groups if g.title and g.title.startswith("task options")]
    assert {a.dest for a in group._group_actions} == {f"{PREFIX}options.{n}" for n in _task_options()}
    text = p.format_help()
    after = text[text.index(group.title):]
    for name, tp in _task_options().items():
        shown = f"--[no-]{name.replace('_', '-')}" if tp is bool else f"--{name.replace('_', '-')}"
        assert shown in after, name
    assert "[ner]" in after and "[qa]" in after  # an option only some tasks have names them


# Option names and values as the README and the tests write them, with the config value each gives; these are
# main's names from before the generator, so each must keep its meaning.
KEPT = [
    (["prepare-pretraining", "--max-seq-length", "64"], "max_length", 64),
    (["prepare-pretraining", "--max-length", "64"], "max_length", 64),
    (["prepare-pretraining", "--dupe-factor", "3"], "dupe_factor", 3),
    (["prepare-pretraining", "--whole-word-mask"], "whole_word_mask", True),
    (["prepare-pretraining", "--no-whole-word-mask"], "whole_word_mask", False),
    (["prepare-pretraining", "--reference-nsp"], "balanced_nsp", False),
    (["prepare-pretraining", "--no-balanced-nsp"], "balanced_nsp", False),
    (["pretrain", "--training.lr", "1e-4"], "training.lr", 1e-4),
    (["pretrain", "--lr", "1e-4"], "training.lr", 1e-4),
    (["pretrain", "--eval_data", "held"], "eval_data", "held"),
    (["pretrain", "--eval-data", "held"], "eval_data", "held"),
    (["pretrain", "--model_overrides", "{hidden_dropout_prob: 0}"], "model_overrides", {"hidden_dropout_prob": 0}),
    (["pretrain", "--max_steps", "5", "--output_dir", "out"], "training.max_steps", 5),
    (["pretrain", "--progress_bar", "false"], "training.progress_bar", False),
    (["finetune", "--output", "out"], "training.output_dir", "out"),
    (["pretrain", "--output", "out"], "training.output_dir", "out"),
    (["finetune", "--max-length", "64"], "options.max_length", 64),
    (["finetune", "--frozen"], "options.frozen", True),
    (["finetune", "--frozen-features", "weighted_sum"], "options.frozen_features", "weighted_sum"),
    (["finetune", "--tagger-hidden", "128"], "options.tagger_hidden", 128),
    (["finetune", "--template", "{Title}: {Review Text}"], "options.template", "{Title}: {Review Text}"),
    (["finetune", "--numeric-columns", "Age,Rating"], "options.numeric_columns", ["Age", "Rating"]),
    (["finetune", "--categorical-columns", "[Division Name]"], "options.categorical_columns", ["Division Name"]),
    (["finetune", "--eval-every", "5"], "training.eval_every", 5),
    (["finetune", "--head-lr-scale", "10"], "training.head_lr_scale", 10),
    (["finetune", "--max-train-examples", "100"], "max_train_examples", 100),
    (["distill", "--student-layers", "3"], "student_layers", 3),
    (["distill", "--alpha-ce", "0.5"], "alpha_ce", 0.5),
    (["distill", "--teacher-layers", "[0, 2, 4]"], "teacher_layers", [0, 2, 4]),
    (["distill", "--options", "{max_length: 64}"], "options", {"max_length": 64}),
    (["serve", "--max-batch-size", "8"], "max_batch_size", 8),
    (["serve", "--precision", "int8"], "precision", "int8"),
    (["demo", "--output-dir", "here"], "output_dir", "here"),
    (["evaluate", "--max-examples", "5"], "max_examples", 5),
    (["predict", "--batch-size", "8"], "batch_size", 8),
]


@pytest.mark.parametrize(("argv", "path", "want"), KEPT, ids=[" ".join(a) for a, _, _ in KEPT])
def test_option_names_from_before_the_generator_keep_their_meaning(argv: list[str], path: str, want: Any) -> None:
    verb, *rest = argv
    args = _verbs()[verb].parse_args([*REQUIRED.get(verb, []), *rest])
    assert given_options(args)[path] == want


def test_the_verbs_build_their_configs_from_the_options(tiny_dir: Path) -> None:
    """The options given reach the config each verb runs; the others keep the config's defaults (--quick's for
    the demo, the task's learning rate for finetune, the pre-training ones for pretrain)."""
    from bertkit.cli.config_options import config_from_options
    from bertkit.cli.data import _config_from_args
    from bertkit.cli.distill import resolve_distill_config
    from bertkit.cli.finetune import resolve_finetune_config
    from bertkit.cli.pretrain import resolve_config

    verbs = _verbs()

    def parse(verb: str, *argv: str) -> argparse.Namespace:
        return verbs[verb].parse_args([*REQUIRED.get(verb, []), *argv])

    data = _config_from_args(parse("prepare-pretraining", "--max-seq-length", "64", "--reference-nsp"))
    assert (data.max_length, data.balanced_nsp, data.dupe_factor) == (64, False, PretrainingDataConfig().dupe_factor)
    pre = resolve_config(parse("pretrain", "--train_data", "d", "--lr", "2e-4", "--no-progress"))
    assert (pre.training.lr, pre.training.progress_bar, pre.training.max_steps) == (2e-4, False, 1_000_000)
    ft = resolve_finetune_config(parse("finetune", "--task", "ner", "--model", str(tiny_dir), "--train", "t",
                                       "--dev", "d", "--output", "o", "--frozen", "--tagger-hidden", "16"))
    assert ft.options == {"frozen": True, "tagger_hidden": 16}
    assert (ft.training.output_dir, ft.training.lr) == ("o", TASK_LR["ner"])
    di = resolve_distill_config(parse("distill", "--teacher", str(tiny_dir), "--train", "d", "--student-layers", "1",
                                      "--max-steps", "3", "--output", "o"))
    assert (di.mode, di.student_layers, di.training.max_steps, di.training.output_dir) == ("pretraining", 1, 3, "o")
    serve = config_from_options(ServeSettings, parse("serve", "--max-batch-size", "8", "--port", "9"))
    assert serve == ServeSettings(max_batch_size=8)
    demo = config_from_options(DemoConfig, parse("demo", "--seed", "3"), dataclasses.asdict(DemoConfig.quick()))
    assert demo == DemoConfig.quick(seed=3)
    ev = config_from_options(EvaluateConfig, parse("evaluate", "--max-examples", "5"))
    assert ev == EvaluateConfig("m", "i", max_examples=5)


def test_a_task_option_of_another_task_names_the_tasks_that_have_it(tiny_dir: Path) -> None:
    from bertkit.cli.finetune import resolve_finetune_config
    from bertkit.errors import ConfigError

    args = _verbs()["finetune"].parse_args(["--task", "classification", "--model", str(tiny_dir), "--train", "t",
                                            "--dev", "d", "--output", "o", "--frozen"])
    with pytest.raises(ConfigError, match=r"--frozen is an option of ner, not of --task classification"):
        resolve_finetune_config(args)


def test_a_verb_without_config_file_still_requires_its_inputs(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        _verbs()["predict"].parse_args(["--model", "m"])
    assert e.value.code == 2 and "--input, --output" in capsys.readouterr().err
