"""The jobs: what a verb runs end to end, each in its own module.

- `pretrain`: pre-training (`bertkit pretrain`);
- `finetune`: fine-tuning (`bertkit finetune`), and evaluate / predict with the fine-tuned folder;
- `distill`: a student distilled from a teacher (`bertkit distill`), trained by the fine-tuning or the pre-training
  job around the pieces in `bertkit.training.distill`;
- `payoff`: the same fine-tuning budget from several starts, compared;
- `demo`: the whole path on the bundled data (`bertkit demo`).

A job wires the floors below it (data, model, the one trainer, the tasks, inference) into one run; nothing below
imports a job, and the CLI above calls them. The modules are imported on use, not here.
"""
