"""The jobs: what a verb runs end to end, each a config dataclass and `run(config)` in its own module.

- `pretrain`: `PretrainConfig` (one or more `PhaseConfig`) -> a pre-training run (`bertkit pretrain`);
- `finetune`: `FinetuneConfig` -> a fine-tuning run (`bertkit finetune`; `run` is also named `finetune`);
- `evaluate`: `EvaluateConfig` -> a fine-tuned folder's metrics on a labelled file (`bertkit evaluate`);
- `predict`: `PredictConfig` -> a fine-tuned folder's predictions for a file (`bertkit predict`);
- `distill`: `DistillConfig` -> a student distilled from a teacher (`bertkit distill`), trained by the fine-tuning
  or the pre-training job around the pieces in `bertkit.training.distill`;
- `payoff`: `PayoffConfig` -> the same fine-tuning budget (`FinetuneBudget`) from several starts, compared;
- `demo`: `DemoConfig` -> the whole path on the bundled data (`bertkit demo`).

A job wires the floors below it (data, model, the one trainer, the tasks, inference) into one run; nothing below
imports a job, and the CLI above calls them. The modules are imported on use, not here.
"""
