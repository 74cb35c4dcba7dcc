"""Nothing slower: the same workload under two source trees of bertkit (before and after a change), one subprocess
per run, the trees taking turns, so both meet the same machine load. The best run of each tree counts; the median
and the range of the runs are printed beside it (the machine may be shared).

Workloads (each reports real tokens per second):
- `embed`: `bertkit.load(MODEL).encode` of WikiText-2 validation paragraphs in --precision (default fp32;
  tokenization included), the path of `bertkit embed` and the Python API;
- `step`: one pre-training step (forward, backward, AdamW) of bertkit-mini's shape on batches of 16 sequences, the
  path of `bertkit pretrain` (common.make_step): random ones of lengths 64..128 (bench_pretrain_step.make_batches),
  or with --step-data the instances of a prepared folder through the job's collator (the mini recipe's batches:
  bench_loader.py's shards are such a folder); in --step-precision fp32, or bf16 under autocast, each with the
  execution plan `bertkit pretrain` picks there on a CPU (`step_model`);
- `trainer`: the same steps through `Trainer.train` (fp32, a plain bertkit-mini, 16 random sequences a step, a
  record every step): the loop and `train_step` around the model's step; its rate is the steps' from the third on
  (the records' own tokens/s), so a tree's loop, precision and logging show, not its model;
- `loader`, `loader-ww`: an epoch of dynamically masked pre-training batches (256 instances; token or whole-word
  masking) read and collated in one process from bench_loader.py's 84 shards (made once into --work), the
  path of `bertkit pretrain`'s DataLoader; the best of three passes.

    python3 benchmarks/bench_before_after.py --before ../wt-before --after . [--workloads embed,step]
        [--model bertkit-mini] [--precision fp32] [--paragraphs 600] [--steps 6] [--step-precision fp32]
        [--step-data DIR] [--rounds 3] [--threads 1] [--work /tmp/bertkit-bench-loader-84] [--json OUT]

The environment passes through (BERTKIT_INT8_KERNEL=onednn picks the int8 kernel, for example).

A tree is a checkout's root; its `src/` goes first on the subprocess's PYTHONPATH. The workload code is this
script's, so both trees run the same measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import cpu_line

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[0].parent / "shared" / "data"

EMBED = """
import json, sys, time, torch
import bertkit
from common import wikitext_paragraphs
torch.set_num_threads({threads})
texts = wikitext_paragraphs(__import__("pathlib").Path({data!r}) / "wikitext2" / "valid.txt", {paragraphs})
model = bertkit.load({model!r})
model.encode(texts[:32], precision={precision!r})  # warm-up: kernels, caches, int8 calibration
tokens = sum(len(x) for x in model.tokenizer(texts)["input_ids"])
start = time.perf_counter()
model.encode(texts, precision={precision!r})
print(json.dumps({{"tokens_per_s": tokens / (time.perf_counter() - start), "bertkit": bertkit.__file__}}))
"""

STEP = """
import json, time, torch
from pathlib import Path
import bertkit
from bench_before_after import step_model
from bench_pretrain_step import SIZES, load_batches, make_batches
from common import make_step
from bertkit.runtime import keep_freed_memory
torch.set_num_threads({threads})
keep_freed_memory()
data = {data!r}
if data:
    from bertkit.data import PretrainingDataset
    batches = load_batches(Path(data), {steps} + 1, 16)
    most = PretrainingDataset(data).config.max_predictions_per_seq
else:
    batches = make_batches({steps} + 1, 16, 128, SIZES["bertkit-mini"]["vocab_size"])
    most = max(int((b["labels"] != -100).sum(1).max()) for b in batches)
torch.manual_seed(0)
model = step_model({precision!r}, most)
step = make_step(model, autocast_device="cpu" if {precision!r} == "bf16" else None)
step(batches[0])  # warm-up
tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:])
start = time.perf_counter()
for b in batches[1:]:
    step(b)
print(json.dumps({{"tokens_per_s": tokens / (time.perf_counter() - start), "bertkit": bertkit.__file__}}))
"""

LOADER = """
import json, time, torch
from pathlib import Path
import bertkit
from bench_loader import epoch_loader, prepare
from bertkit.runtime import keep_freed_memory
torch.set_num_threads({threads})
keep_freed_memory()  # as bertkit pretrain's process and its loader workers
ds, collate, batches = epoch_loader(prepare(Path({data!r}), Path({work!r})), {whole_word}, 256)
collate(ds.__getitems__(batches[0]))  # warm-up: the shards mapped, their tables read
best = 0.0
for _ in range(3):  # the best of three passes over the epoch (one pass is a quarter of a second)
    tokens = 0
    start = time.perf_counter()
    for b in batches:
        tokens += int(collate(ds.__getitems__(b))["attention_mask"].sum())
    best = max(best, tokens / (time.perf_counter() - start))
print(json.dumps({{"tokens_per_s": best, "bertkit": bertkit.__file__}}))
"""


TRAINER = """
import json, tempfile, torch
import bertkit
from bench_pretrain_step import SIZES, make_batches
from bertkit.model import BertConfig, BertForPreTraining
from bertkit.training import Trainer, TrainingConfig
torch.set_num_threads({threads})
batches = make_batches({steps} + 2, 16, 128, SIZES["bertkit-mini"]["vocab_size"])
torch.manual_seed(0)
model = BertForPreTraining(BertConfig(**SIZES["bertkit-mini"]))
quiet = {{"tensorboard": False}} if "tensorboard" in TrainingConfig.__dataclass_fields__ else {{}}  # before report_to
config = TrainingConfig(output_dir=tempfile.mkdtemp(), max_steps=len(batches), batch_size=1, shuffle=False, warmup=1,
                        log_every=1, precision="fp32", device="cpu", metric_for_best=None, progress_bar=False, **quiet)
result = Trainer(model, config, batches, collate_fn=lambda items: items[0]).train()
records = [r for r in result.history if r["split"] == "train"][2:]  # steps 3.. (step k ran batch k - 1)
tokens = [int(b["attention_mask"].sum()) for b in batches[2:]]
seconds = sum(t / r["tokens_per_s"] for t, r in zip(tokens, records))
print(json.dumps({{"tokens_per_s": sum(tokens) / seconds, "bertkit": bertkit.__file__}}))
"""


def step_model(precision: str, max_predictions: int) -> Any:
    """bertkit-mini's BertForPreTraining as `bertkit pretrain` builds it for a step on a CPU in `precision`, with the
    execution plan its hardware policy picks there (under bf16: padded, the MLM head in `max_predictions` slots).
    Runs in either tree: one from before bertkit.model.execution (2026-11-28) set the same levers on the built model."""
    import torch
    from bench_pretrain_step import SIZES

    from bertkit.model import BertConfig, BertForPreTraining

    config, cpu = BertConfig(**SIZES["bertkit-mini"]), torch.device("cpu")
    try:
        from bertkit.model.execution import Execution
    except ImportError:  # the tree before the plan
        from bertkit.jobs.pretrain import PretrainConfig, step_shapes
        from bertkit.model.heads import set_execution

        unpadded, slots, _ = step_shapes(PretrainConfig(), cpu, precision, max_predictions)
        model = BertForPreTraining(config)
        set_execution(model, unpadded=unpadded, mlm_slots=slots)
        return model
    return BertForPreTraining(config, Execution.for_step(cpu, precision, max_predictions)[0])


def run_once(tree: Path, code: str) -> dict:
    """Run `code` in a fresh interpreter that imports bertkit from `tree`; its last stdout line is JSON."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src"), str(HERE)]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=HERE)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the workload failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["bertkit"]).resolve().is_relative_to((tree / "src").resolve()):
        raise SystemExit(f"{tree}: imported bertkit from {result['bertkit']}, not from the tree")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the source tree before the change")
    p.add_argument("--after", type=Path, required=True, help="the source tree after the change")
    p.add_argument("--workloads", default="embed,step")
    p.add_argument("--model", default="bertkit-mini", help="embed: a model name or folder")
    p.add_argument("--precision", default="fp32", help="embed: the Encoder's precision (fp32, bf16, int8)")
    p.add_argument("--paragraphs", type=int, default=600, help="embed: WikiText-2 validation paragraphs")
    p.add_argument("--steps", type=int, default=6, help="step: timed training steps per run")
    p.add_argument("--step-precision", default="fp32", choices=("fp32", "bf16"),
                   help="step: float32, or bf16 autocast (with the plan `bertkit pretrain` picks for it on a CPU)")
    p.add_argument("--step-data", type=Path, default=None,
                   help="step: a prepared pre-training folder whose instances make the batches (default: random)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each tree, in turn")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--work", type=Path, default=Path("/tmp/bertkit-bench-loader-84"), help="loader: the shards' home")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    for tree in (a.before, a.after):
        if not (tree / "src" / "bertkit").is_dir():
            raise SystemExit(f"{tree}: no src/bertkit there (give a checkout's root)")
    codes = {"embed": EMBED.format(threads=a.threads, data=str(a.data), paragraphs=a.paragraphs, model=a.model,
                                  precision=a.precision),
             "step": STEP.format(threads=a.threads, steps=a.steps, precision=a.step_precision,
                                 data=str(a.step_data) if a.step_data else ""),
             "trainer": TRAINER.format(threads=a.threads, steps=a.steps),
             "loader": LOADER.format(threads=a.threads, data=str(a.data), work=str(a.work), whole_word=False),
             "loader-ww": LOADER.format(threads=a.threads, data=str(a.data), work=str(a.work), whole_word=True)}
    workloads = a.workloads.split(",")
    unknown = [w for w in workloads if w not in codes]
    if unknown:
        raise SystemExit(f"--workloads: unknown {unknown}; choose from {sorted(codes)}")
    print(cpu_line())
    print(f"before: {a.before.resolve()}\nafter:  {a.after.resolve()}\nthreads {a.threads}, rounds {a.rounds}")
    report: dict = {"cpu": cpu_line(), "before": str(a.before.resolve()), "after": str(a.after.resolve()),
                    "threads": a.threads, "rounds": a.rounds, "workloads": {}}
    for name in workloads:
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(a.rounds):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")  # who goes first alternates
            for which in order:
                rates[which].append(run_once(getattr(a, which), codes[name])["tokens_per_s"])
                print(f"  {name:6} {which:6} round {i + 1}: {rates[which][-1]:,.0f} tok/s", flush=True)
        best = {k: max(v) for k, v in rates.items()}
        median = {k: statistics.median(v) for k, v in rates.items()}
        ratio = best["after"] / best["before"]
        for which in ("before", "after"):
            print(f"{name}: {which:6} best {best[which]:,.0f} tok/s, median {median[which]:,.0f} "
                  f"(runs {min(rates[which]):,.0f} to {max(rates[which]):,.0f})")
        print(f"{name}: after/before {ratio:.3f} (best), {median['after'] / median['before']:.3f} (median)")
        setting = {"embed": {"model": a.model, "paragraphs": a.paragraphs, "precision": a.precision},
                   "step": {"steps": a.steps, "shape": "bertkit-mini", "batch": 16, "precision": a.step_precision,
                            "data": str(a.step_data) if a.step_data else "random, lengths 64..128"},
                   "trainer": {"steps": a.steps, "shape": "bertkit-mini", "batch": 16, "precision": "fp32"}}.get(
                       name, {"batch": 256, "whole_word_mask": name == "loader-ww", "shards": str(a.work)})
        report["workloads"][name] = {"rates": rates, "best": best, "median": median, "after_over_before": ratio,
                                     "median_after_over_before": median["after"] / median["before"], **setting}
    if a.json:
        tmp = a.json.with_suffix(a.json.suffix + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(a.json)


if __name__ == "__main__":
    main()
