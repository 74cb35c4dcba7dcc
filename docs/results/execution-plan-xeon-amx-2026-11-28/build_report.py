"""docs/results/execution-plan-xeon-amx-2026-11-28.json from the raw runs: each run's JSON as written, and a summary
computed from it (medians, paired ratios, a bootstrap interval), which the report's table reads."""
import json, random, statistics, sys
from pathlib import Path

RUNS, OUT = Path(sys.argv[1]), Path(sys.argv[2])
NAME = "execution-plan-xeon-amx-2026-11-28"


def interval(ratios: list[float], draws: int = 10000) -> list[float]:
    """95% bootstrap interval of the median of `ratios` (seeded)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return [meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]]


raw, summary = {}, {}
for path in sorted(RUNS.glob("*.json")):
    d = json.loads(path.read_text())
    raw[path.stem] = d
    if path.stem.startswith("inprocess"):
        paired = d.get("step_time_ratios") or d.get("chunk_time_ratios")
        # a time ratio > 1 is after slower; as a speed ratio (after / before) it is its inverse
        speed = [1 / x for x in paired] if paired else None
        summary[path.stem] = {
            "before": d["median"]["before"], "after": d["median"]["after"],
            "ratio": speed and statistics.median(speed), "ci": speed and interval(speed),
            "pairs": len(speed) if speed else None,
            "round_ratio_min": min(d["round_ratios"]), "round_ratio_max": max(d["round_ratios"]),
            "rounds": d["rounds"]}
    else:
        for workload, w in d["workloads"].items():
            pairs = [a / b for a, b in zip(w["rates"]["after"], w["rates"]["before"])]
            summary[f"{path.stem}-{workload}"] = {
                "before": w["median"]["before"], "after": w["median"]["after"],
                "ratio": statistics.median(pairs), "ci": interval(pairs), "pairs": len(pairs),
                "round_ratio_min": min(pairs), "round_ratio_max": max(pairs), "rounds": len(pairs)}
rows = []
labels = [
    ("inprocess-step-fp32", "pre-training step, float32 (the default plan)", "one process, step by step"),
    ("inprocess-step-bf16", "pre-training step, bf16 autocast (fixed shapes: padded, 20 MLM slots)",
     "one process, step by step"),
    ("inprocess-step-bf16-long", "the same, 15 rounds", "one process, step by step"),
    ("inprocess-embed-mini-fp32", "embed, bertkit-mini, fp32", "one process, chunk by chunk"),
    ("inprocess-embed-mini-bf16", "embed, bertkit-mini, bf16 (a plan per batch)", "one process, chunk by chunk"),
    ("inprocess-embed-minilm-bf16", "embed, all-MiniLM-L6-v2, bf16 (a plan per batch)", "one process, chunk by chunk"),
    ("inprocess-embed-minilm-bf16-long", "the same, 8 chunks x 7 rounds", "one process, chunk by chunk"),
    ("before-after-fp32-quiet-step", "pre-training step, float32", "a process per run, load ~1"),
    ("before-after-fp32-quiet2-step", "the same, 10 rounds", "a process per run, load ~1"),
    ("before-after-bf16-quiet-step", "pre-training step, bf16 autocast (fixed shapes)", "a process per run, load ~1"),
    ("before-after-fp32-quiet-embed", "embed, bertkit-mini, fp32", "a process per run, load ~1"),
    ("before-after-bf16-embed-quiet-embed", "embed, bertkit-mini, bf16", "a process per run, load ~1"),
    ("before-after-fp32-step", "pre-training step, float32", "a process per run, load 2-5"),
    ("before-after-fp32-earlier-step", "pre-training step, float32", "a process per run, load 2-5"),
    ("before-after-bf16-step", "pre-training step, bf16 autocast (fixed shapes)", "a process per run, load 2-5"),
    ("before-after-fp32-embed", "embed, bertkit-mini, fp32", "a process per run, load 2-5"),
    ("before-after-fp32-earlier-embed", "embed, bertkit-mini, fp32", "a process per run, load 2-5"),
    ("before-after-bf16-embed", "embed, bertkit-mini, bf16", "a process per run, load 2-5"),
]
for key, what, how in labels:
    if key not in summary:
        raise SystemExit(f"no run {key}")
    s = {"ref": f"{NAME}.json", "pointer": f"/summary/{key}"}
    rows.append({"what": what, "how": how, **{f: {**s, "pointer": f"/summary/{key}/{f}"} for f in (
        "before", "after", "ratio", "pairs", "round_ratio_min", "round_ratio_max")},
        "lo": {**s, "pointer": f"/summary/{key}/ci/0"}, "hi": {**s, "pointer": f"/summary/{key}/ci/1"}})
report = {
    "title": "The execution plan (issue 46, item 1) before and after on a 2-core Xeon with AMX: no slowdown the "
             "shared machine can resolve",
    "date": "2026-11-28",
    "machine": "2-core Xeon (AMX: amx_bf16 amx_int8 amx_tile, AVX-512 with bf16, fp16, VNNI), shared with other "
               "engineers' test runs (load average 1.5 to 5.5 during the runs)",
    "software": raw.get("inprocess-step-fp32", {}).get("torch"),
    "data": "the mini recipe's batches: 16 instances of a prepared folder of WikiText-2 valid, Tiny Shakespeare and "
            "Jane Austen (bench_loader.py's 84 shards, max_length 128, max_predictions_per_seq 20, bertkit-mini's "
            "tokenizer) through the job's collator; embed: WikiText-2 valid paragraphs",
    "summary": summary,
    "raw": raw,
    "tables": {"before_after": {
        "columns": [
            {"title": "workload", "template": "{what}", "align": "left"},
            {"title": "how", "template": "{how}", "align": "left"},
            {"title": "before tok/s (median)", "template": "{before:,.0f}", "align": "right"},
            {"title": "after tok/s (median)", "template": "{after:,.0f}", "align": "right"},
            {"title": "after / before: median of pairs", "template": "{ratio:.3f}", "align": "right"},
            {"title": "95% interval", "template": "{lo:.2f} to {hi:.2f}", "align": "right"},
            {"title": "pairs", "template": "{pairs}", "align": "right"},
            {"title": "rounds' ratios", "template": "{round_ratio_min:.2f} to {round_ratio_max:.2f}",
             "align": "right"}],
        "rows": rows}},
}
OUT.write_text(json.dumps(report, indent=1) + "\n")
print({k: (round(v["ratio"], 3), [round(x, 3) for x in v["ci"]]) for k, v in summary.items()})
