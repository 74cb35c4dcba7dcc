"""The jobs: what a verb runs end to end, each a config dataclass and a function of it (`run(config)`) in its own
module: pretrain, finetune, evaluate, predict, distill, payoff (fine-tuning from several starts), embed, search, demo.

A job wires the floors below it (data, model, the one trainer, the tasks, inference) into one run; nothing below
imports a job, and the CLI above calls them. The modules are imported on use, not here.
"""
