"""Both trees' bertkit in one process, their pre-training steps taking turns batch by batch (a shared machine's load
then meets both alike). Usage: python two_trees_step.py BEFORE AFTER PRECISION SHARDS STEPS ROUNDS THREADS OUT.json"""
import importlib, json, statistics, sys, time
from pathlib import Path
import torch

before, after, precision, shards, steps, rounds, threads, out = sys.argv[1:9]
steps, rounds, threads = int(steps), int(rounds), int(threads)
torch.set_num_threads(threads)
from two_trees import install, load_tree, ours


trees = {"before": load_tree(before), "after": load_tree(after)}
install(trees["before"]["modules"])  # the batches from the before tree's collator (the data code is the same)
batches = trees["before"]["bps"].load_batches(Path(shards), steps * rounds + 2, 16)
most = sys.modules["bertkit.data"].PretrainingDataset(shards).config.max_predictions_per_seq
stepfn, plans = {}, {}
for name, tr in trees.items():
    install(tr["modules"])
    torch.manual_seed(0)
    model = tr["bba"].step_model(precision, most)
    assert Path(sys.modules[type(model).__module__].__file__).resolve().is_relative_to(Path(trees[name]["file"]).parents[1])
    plans[name] = str(getattr(model, "execution", None) or (model.bert.unpadded, model.mlm_slots))
    stepfn[name] = tr["common"].make_step(model, autocast_device="cpu" if precision == "bf16" else None)
    tr["modules"] = {m: mod for m, mod in sys.modules.items() if ours(m)}  # what building it imported too
install(None)
print(plans)
for b in batches[:2]:  # warm-up
    for name, f in stepfn.items():
        install(trees[name]["modules"])
        f(b)
rates = {k: [] for k in stepfn}
step_ratios = []  # after's time / before's on the same batch, one after the other
for r in range(rounds):
    timed = batches[2 + r * steps: 2 + (r + 1) * steps]
    secs = dict.fromkeys(stepfn, 0.0)
    for i, b in enumerate(timed):
        took = {}
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            install(trees[name]["modules"])  # a lazy import inside finds this tree
            start = time.perf_counter()
            stepfn[name](b)
            took[name] = time.perf_counter() - start
            secs[name] += took[name]
        step_ratios.append(took["after"] / took["before"])
    tokens = sum(int(b["attention_mask"].sum()) for b in timed)
    for k in rates:
        rates[k].append(tokens / secs[k])
    print(f"round {r + 1}: before {rates['before'][-1]:,.0f} after {rates['after'][-1]:,.0f} tok/s "
          f"ratio {rates['after'][-1] / rates['before'][-1]:.3f}", flush=True)
ratios = [a / b for a, b in zip(rates["after"], rates["before"])]
report = {"precision": precision, "data": shards, "steps_per_round": steps, "rounds": rounds, "threads": threads,
          "batch": 16, "rates": rates, "round_ratios": ratios,
          "median": {k: statistics.median(v) for k, v in rates.items()},
          "median_round_ratio": statistics.median(ratios),
          "step_time_ratios": step_ratios, "median_step_time_ratio": statistics.median(step_ratios), "trees": {k: v["file"] for k, v in trees.items()},
          "plans": plans,
          "torch": torch.__version__}
print(json.dumps({k: report[k] for k in ("median", "median_round_ratio", "median_step_time_ratio")}))
Path(out).write_text(json.dumps(report, indent=2) + "\n")
