"""Distillation (DistilBERT, Sanh et al. 2019): the job behind `bertkit distill` (`run(DistillConfig)`), in two
modes chosen by the teacher.

- Task-specific: the teacher is a fine-tuned folder (config.json names its task). The run is `finetune` of the
  teacher on the transfer set `train` with the teacher's task settings, its model wrapped in a Distiller: hard loss
  = the task's loss. OUTPUT/best is a normal fine-tuned folder that evaluate, predict and serve use.
- Pre-training-time: any other folder is a masked-LM teacher; the run is the pre-training job on data prepared by
  `bertkit prepare-pretraining`, wrapped the same way: hard loss = masked LM, without next-sentence prediction (as
  DistilBERT). OUTPUT/final is a pre-trained folder to fine-tune.

The student keeps `student_layers` of the teacher's layers (every other one by default) with its embeddings and
head (`bertkit.training.distill`); the one Trainer runs it, so checkpoints, resume, evaluation and best/ are its.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bertkit.dataclass_io import Config, check_value, config_from_dict, spec
from bertkit.errors import ConfigError, Interrupted
from bertkit.io import atomic_write_json
from bertkit.jobs import finetune
from bertkit.jobs.finetune import MAX_EXAMPLES, RESULTS_NAME, FinetuneConfig, finetune_training, pop_training
from bertkit.model.config import MAX_LAYERS
from bertkit.model.folder import Folder, read_folder
from bertkit.tasks import get_task
from bertkit.tasks.base import task_options
from bertkit.training.config import TrainingConfig, save_config

TASK, PRETRAINING = "task", "pretraining"
CONFIG_COPY = "distill_config.yaml"
# DistilBERT's pre-training weights (huggingface/transformers examples/research_projects/distillation, train.py:
# --alpha_ce 5.0 --alpha_mlm 2.0 --alpha_cos 1.0, temperature 2.0).
PRETRAINING_WEIGHTS = {"alpha_ce": 5.0, "alpha_hard": 2.0, "alpha_cos": 1.0}
# Task-specific: equal weights (the soft loss already carries its T^2 factor); a choice, not a tuned value.
TASK_WEIGHTS = {"alpha_ce": 1.0, "alpha_hard": 1.0, "alpha_cos": 1.0}


def _check_before_reading(training: dict[str, Any], options: Any, where: str) -> None:
    """Each given trainer setting and task option against its field's spec, before the teacher folder is read (which
    decides the mode's defaults and the task): a bad value is named first, whatever the teacher."""
    from bertkit.tasks import TASKS

    known = {f.name for f in dataclasses.fields(TrainingConfig)}
    for key, value in training.items():
        if key in known:
            check_value(TrainingConfig, key, value, f"{where}.training.{key}")
    for key, value in (options.items() if isinstance(options, dict) else ()):
        owner = next((t.options_class for t in TASKS.values()
                      if key in {f.name for f in dataclasses.fields(t.options_class)}), None)
        if owner is not None:
            check_value(owner, key, value, f"{where}.options.{key}")


def distill_mode(teacher: Folder) -> str:
    """'task' for a fine-tuned folder (its config.json names a task), 'pretraining' for any other model folder."""
    return TASK if read_folder(teacher).config.task else PRETRAINING


@dataclass
class DistillConfig(Config):
    """One distillation run: teacher, student depth, transfer data, loss weights and the trainer's settings;
    `bertkit distill`'s options are generated from it."""

    teacher: str = spec("")
    """Fine-tuned folder (task-specific distillation) or pre-trained folder (pre-training-time, masked LM)."""
    train: str = spec("")
    """Transfer set: a labelled file of the teacher's task, or a folder written by `bertkit prepare-pretraining`."""
    dev: str = spec("", empty=True)
    """Dev file (task; required) or prepared held-out folder (pre-training; optional), evaluated during training."""
    student_layers: int | None = spec(None, ge=1, le=MAX_LAYERS)
    """Layers of the student; None = half the teacher's (DistilBERT: 12 -> 6)."""
    teacher_layers: list[int] | None = spec(None, ge=0, lt=MAX_LAYERS, why="a teacher layer index per student "
                                            "layer, e.g. [0, 2, 4]; leave it out for the default spread")
    """The teacher layers the student starts from, one per student layer; None = evenly spread from layer 0, i.e.
    every other layer (6 -> 3: 0, 2, 4). DistilBERT itself took 0, 2, 4, 7, 9, 11 of BERT-base's 12."""
    temperature: float = spec(2.0, gt=0, le=1e3)
    """Softmax temperature of the soft targets (DistilBERT: 2.0); the soft loss is scaled by T^2."""
    alpha_ce: float | None = spec(None, ge=0, le=1e4)
    """Weight of the soft-target loss, KL(teacher || student) at temperature T; None = 5.0 pre-training
    (DistilBERT), 1.0 task-specific."""
    alpha_hard: float | None = spec(None, ge=0, le=1e4)
    """Weight of the hard loss (the task's loss, or masked LM: DistilBERT's alpha_mlm); None = 2.0 pre-training,
    1.0 task-specific."""
    alpha_cos: float | None = spec(None, ge=0, le=1e4)
    """Weight of the cosine alignment of each student layer's hidden states with its teacher layer's; None = 1.0."""
    options: dict[str, Any] = field(default_factory=dict)
    """Task options changed from the teacher's (e.g. {max_length: 64}); task-specific only."""
    eval_batch_size: int = spec(64, ge=1, le=2**20)
    """Batch size of evaluation."""
    max_train_examples: int | None = spec(None, ge=1, le=MAX_EXAMPLES)
    """A seeded random subset of the transfer set (task-specific only; None: all of it)."""
    max_eval_examples: int | None = spec(None, ge=1, le=MAX_EXAMPLES)
    """A seeded random subset of the dev file (task-specific only)."""
    training: TrainingConfig | None = None
    """The one trainer's settings; None = the fine-tuning defaults and the task's LR (task-specific) or the
    pre-training defaults (see PretrainConfig; set max_steps). training.output_dir is the run's folder."""

    def validate(self) -> None:
        if self.teacher_layers is not None and self.student_layers not in (None, len(self.teacher_layers)):
            raise ConfigError(f"DistillConfig.teacher_layers names {len(self.teacher_layers)} layers but "
                              f"student_layers is {self.student_layers}")
        # The teacher's config.json, read once here and handed down to the run (`teacher_folder`, not a field).
        self.teacher_folder = read_folder(self.teacher)
        self.mode = distill_mode(self.teacher_folder)
        if self.mode == TASK and not self.dev:
            raise ConfigError("DistillConfig.dev is required (--dev) when the teacher is a fine-tuned folder")
        if self.mode == PRETRAINING:
            given = [n for n in ("options", "max_train_examples", "max_eval_examples") if getattr(self, n)]
            if given:
                raise ConfigError(f"DistillConfig.{given[0]} applies to task-specific distillation; "
                                  f"{self.teacher} is not a fine-tuned folder")
        from bertkit.training.distill import check_teacher

        teacher = self.teacher_folder.config
        check_teacher(teacher, self.layers(teacher.num_hidden_layers), f"DistillConfig.teacher {self.teacher}")
        if self.mode == TASK:  # an option the teacher's task does not have fails here, before any run starts
            task_options(get_task(teacher.task), self.options, "DistillConfig.options")
        if self.training is None:
            self.training = self.default_training({})

    def default_training(self, overrides: dict[str, Any], where: str = "DistillConfig") -> TrainingConfig:
        """The mode's trainer defaults (fine-tuning's or pre-training's) with `overrides` applied."""
        from bertkit.jobs.pretrain import PretrainConfig

        if self.mode == TASK:
            return finetune_training(get_task(self.teacher_folder.config.task), overrides, where)
        base = dataclasses.asdict(PretrainConfig().training)
        return config_from_dict(TrainingConfig, {**base, **overrides}, f"{where}.training")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "DistillConfig") -> "DistillConfig":
        """From a config file's dict: `training:` fields not given take the mode's defaults."""
        d = dict(d)
        training = pop_training(d, where)
        _check_before_reading(training, d.get("options"), where)
        config = config_from_dict(cls, d, where)
        config.training = config.default_training(training, where)
        return config

    def layers(self, teacher_depth: int) -> list[int]:
        """The teacher layers the student starts from: teacher_layers, else student_layers (or half the teacher's
        depth) spread evenly from layer 0."""
        if self.teacher_layers:
            return list(self.teacher_layers)
        from bertkit.training.distill import spread_layers

        return spread_layers(teacher_depth, self.student_layers or max(1, teacher_depth // 2),
                             "DistillConfig.student_layers")

    def weights(self) -> dict[str, float]:
        """alpha_ce, alpha_hard, alpha_cos: the given ones, the mode's defaults for the others."""
        defaults = TASK_WEIGHTS if self.mode == TASK else PRETRAINING_WEIGHTS
        return {k: float(v if (v := getattr(self, k)) is not None else d) for k, d in defaults.items()}


def make_distiller(teacher: Any, config: DistillConfig) -> Any:
    """The Distiller of `config` around a student taken from `teacher`'s layers."""
    from bertkit.training.distill import Distiller, student_from_teacher

    layers = config.layers(teacher.config.num_hidden_layers)
    return Distiller(student_from_teacher(teacher, layers), teacher, layers, config.temperature, **config.weights())


def _task_options(config: DistillConfig) -> dict[str, Any]:
    """The teacher's task options (from its stored settings), then the config's: the student reads as it did."""
    folder = config.teacher_folder.config
    names = {f.name for f in dataclasses.fields(get_task(folder.task).options_class)}
    return {**{k: v for k, v in (folder.task_settings or {}).items() if k in names}, **config.options}


def distill_fingerprint(config: DistillConfig, layers: list[int]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What turns the fine-tuning (or pre-training) job's fingerprint into the distillation's: its model named the
    teacher, plus the student's layers, the temperature and the loss weights."""
    from bertkit.training.provenance import flatten

    def adjust(job: dict[str, Any]) -> dict[str, Any]:
        out = {("teacher" if k == "model" else k): v for k, v in job.items()}
        out.update({"distill.teacher_layers": layers, "distill.temperature": config.temperature,
                    **flatten("distill", config.weights())})
        return out

    return adjust


def run(config: DistillConfig, resume: bool = False) -> dict[str, Any]:
    """Distil config.teacher into a student; returns the run's summary (also OUTPUT/results.json).
    distill_config.yaml is written only once the run starts (a refused job leaves the folder as it was)."""
    from bertkit.training.distributed import setup_distributed
    from bertkit.training.provenance import check_output_apart
    from bertkit.training.checkpoint import output_lock

    assert config.training is not None  # set by __post_init__ / from_dict
    output = Path(config.training.output_dir)
    if not config.training.output_dir:
        raise ConfigError("DistillConfig.training.output_dir is required (--output)")
    teacher = config.teacher_folder
    check_output_apart(output, teacher.path, "the teacher folder")
    depth = teacher.config.num_hidden_layers
    layers = config.layers(depth)
    dist_info = setup_distributed(config.training.device)
    with output_lock(output, dist_info):
        wrap = lambda model: make_distiller(model, config)
        fingerprint = distill_fingerprint(config, layers)
        record = lambda: save_config(config, output / CONFIG_COPY)  # the job writes its finetune/pretrain view too
        if config.mode == TASK:
            job = FinetuneConfig(task=teacher.config.task, model=config.teacher, train=config.train,
                                 dev=config.dev, options=_task_options(config), eval_batch_size=config.eval_batch_size,
                                 max_train_examples=config.max_train_examples,
                                 max_eval_examples=config.max_eval_examples, training=config.training)
            summary = finetune.run(job, resume, wrap_model=wrap, fingerprint=fingerprint, on_start=record,
                                   model_folder=teacher)
        else:
            from bertkit.jobs import pretrain
            from bertkit.jobs.pretrain import PretrainConfig

            job = PretrainConfig(model=config.teacher, train_data=config.train, eval_data=config.dev or None,
                                 eval_batch_size=config.eval_batch_size, next_sentence_prediction=False,
                                 training=config.training)
            result = pretrain.run(job, resume, wrap_model=wrap, fingerprint=fingerprint, on_start=record,
                                  model_folder=teacher)
            if result.interrupted:
                raise Interrupted(f"{output}: stopped at step {result.global_step} after writing a checkpoint; run "
                                  "again with resume (--resume) to continue", int(result.signal or 15))
            summary = {"best_metrics": result.best_metrics, "final_metrics": result.final_metrics,
                       "best_dir": str(result.best_dir) if result.best_dir else None,
                       "final_dir": str(result.final_dir) if result.final_dir else None,
                       "resumes": result.resumes}
        summary["distillation"] = {
            "mode": config.mode, "teacher": str(config.teacher), "teacher_depth": depth, "teacher_layers": layers,
            "temperature": config.temperature, **config.weights()}
        if dist_info.is_main:
            atomic_write_json(output / RESULTS_NAME, summary)
        return summary
