"""benchmarks/glue_table.py: the dry run end to end on the real GLUE folders of ../shared/data (a tiny start and its
random twin on every task), its table and glue.json checked against the runs' stored predictions and an independent
metric implementation (scikit-learn), the QNLI split, and a second invocation that reads every run back."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import common  # noqa: E402
import glue_table  # noqa: E402

# Where each dev file keeps its label (0-based; CoLA's files have no header), read here without bertkit's reader.
LABEL_COLUMN = {"cola": 1, "sst2": 1, "mrpc": 0, "qnli": 3, "rte": 3}
POSITIVE = {"cola": "1", "sst2": "1", "mrpc": "1", "qnli": "not_entailment", "rte": "not_entailment"}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("glue")
    return out, glue_table.main(["--dry-run", "--out", str(out), "--data", str(data_dir)])


def dev_labels(task: str, dev: str) -> list[str]:
    """The dev file's labels, in order: its rows split on tabs, the header skipped where there is one."""
    lines = [line for line in Path(dev).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [line.split("\t")[LABEL_COLUMN[task]] for line in (lines if task == "cola" else lines[1:])]


def test_qnli_split_is_seeded_disjoint_and_complete(tmp_path: Path, data_dir: Path) -> None:
    source = data_dir / "qnli" / "dev.tsv"
    train, dev = glue_table.task_files(glue_table.TASKS[3], data_dir, tmp_path)
    lines = source.read_text(encoding="utf-8").splitlines()
    a, b = Path(train).read_text().splitlines(), Path(dev).read_text().splitlines()
    assert a[0] == b[0] == lines[0]  # the header, so the QNLI layout is recognised
    assert (len(a) - 1, len(b) - 1) == glue_table.QNLI_SPLIT and sum(glue_table.QNLI_SPLIT) == len(lines) - 1
    assert sorted(a[1:] + b[1:]) == sorted(lines[1:])  # every row once
    again = glue_table.task_files(glue_table.TASKS[3], data_dir, tmp_path / "again")
    assert Path(again[1]).read_text() == Path(dev).read_text()
    assert b[1:] == [row for row in lines[1:] if row in set(b[1:])]  # the source's order kept


def test_split_of_a_headerless_file_and_a_split_too_large(tmp_path: Path, data_dir: Path) -> None:
    cola = data_dir / "cola" / "dev.tsv"
    glue_table.split_rows(cola, header=False, parts={tmp_path / "a.tsv": 10})
    rows = (tmp_path / "a.tsv").read_text().splitlines()
    assert len(rows) == 10 and set(rows) <= set(cola.read_text().splitlines())
    with pytest.raises(SystemExit, match=r"cola/dev.tsv: 1043 rows, 2000 needed"):
        glue_table.split_rows(cola, header=False, parts={tmp_path / "b.tsv": 1000, tmp_path / "c.tsv": 1000})


def test_starts_are_parsed_with_clear_errors(tmp_path: Path) -> None:
    assert common.parse_starts(["a=x", "b c=y=z"], None, tmp_path) == {"a": "x", "b c": "y=z"}
    for specs, twin, message in [(["a"], None, "expected NAME=FOLDER"), (["a=x", "a=y"], None, "is taken"),
                                 (["a=x"], "b", "'b' is not a start"), (["random init=x"], None, "is taken")]:
        with pytest.raises(SystemExit, match=message):
            common.parse_starts(specs, twin, tmp_path)
    with pytest.raises(SystemExit, match="--baseline 'nobody' is not a start"):
        glue_table.main(["--start", "a=x", "--baseline", "nobody", "--out", str(tmp_path)])


def test_dry_run_table_and_json(dry_run: tuple[Path, dict]) -> None:
    out, report = dry_run
    tasks = [t.name for t in glue_table.TASKS]
    assert list(report["scores"]) == ["random init", "tiny"] and report["baseline"] == "random init"
    assert report["cpu"]["capability"] and set(report["cpu"]["flags"]) == set(common.CPU_FLAGS)
    assert json.loads((out / "glue.json").read_text()) == json.loads(json.dumps(report))  # tuples as lists

    # The table: a header, a separator, one row per start and the majority class's; start, the five tasks, the
    # average over the learned tasks, the average over every task.
    md = (out / "table.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    table = lines[:5]
    learned = [t.title for t in glue_table.TASKS if t.name in report["learned_tasks"]]
    assert table[0] == ("| start | CoLA (MCC) | SST-2 (acc.) | MRPC (F1/acc.) | QNLI (acc.) | RTE (acc.) | average of "
                        f"the learned ({', '.join(learned) or 'none'}) | average, every task |")
    assert table[1] == "|" + " --- |" * 8 and not lines[5].startswith("| tiny")
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in table[2:]]
    assert [c[0] for c in cells] == ["random init", "tiny", "majority class"] and all(len(c) == 8 for c in cells)
    assert "1,463 held-out pairs" in md and "4,000 training pairs" in md

    for start, row in zip(report["scores"], cells):
        by_task = report["scores"][start]
        for task in glue_table.TASKS:
            scores, runs = by_task[task.name], report["runs"][task.name][start]
            lo = -1.0 if task.metrics == ("matthews",) else 0.0
            assert all(lo <= scores[m] <= 1.0 for m in task.metrics)
            # each metric is the mean over the seeds of the runs at the start's best LR, as glue.json holds them
            at_best = runs[f"{scores['best_lr']:g}"]
            for m in task.metrics:
                assert scores[m] == pytest.approx(statistics.fmean(r["best_metrics"][m] for r in at_best.values()))
            assert scores["score"] == pytest.approx(statistics.fmean(scores[m] for m in task.metrics))
        average = statistics.fmean(by_task[t]["score"] for t in tasks)
        assert report["glue_average"][start] == pytest.approx(average)
        assert row[-1] == f"{100 * average:.1f}"
        mark = "" if report["learned"][start]["mrpc"]["learned"] else glue_table.NOT_LEARNED
        assert row[3] == "/".join(f"{100 * by_task['mrpc'][m]:.1f}" for m in ("f1", "accuracy")) + mark


def test_glue_json_renders_as_the_table_through_docs_generate(dry_run: tuple[Path, dict]) -> None:
    """A report whose JSON is glue.json shows the same tables as table.md (docs/generate.py's renderer)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
    import generate

    out, _ = dry_run
    md = (out / "table.md").read_text()
    for name in ("scores", "learned", "paired"):
        rendered = generate.Renderer().render(out / "glue.json", name, out / "report.md").splitlines()
        assert len(rendered) == 2 + {"scores": 3, "learned": 2, "paired": 1}[name]
        for line in [rendered[0], *rendered[2:]]:  # the separator differs only in alignment marks
            assert line in md.splitlines(), line


def test_dry_run_metrics_agree_with_stored_predictions(dry_run: tuple[Path, dict]) -> None:
    """Every run's metrics, recomputed by scikit-learn from its stored dev predictions and the dev file's labels."""
    metrics = pytest.importorskip("sklearn.metrics")
    out, report = dry_run
    varied = 0
    for task in glue_table.TASKS:
        dev = report["tasks"][task.name]["budget"]["dev"]
        labels = dev_labels(task.name, dev)
        assert len(labels) == glue_table.DRY["dev_examples"]
        for start in report["starts"]:
            folder = out / task.name / start / "lr0.003-seed42"
            predictions = json.loads((folder / "dev_predictions.json").read_text())["predictions"]
            best = report["runs"][task.name][start]["0.003"]["42"]["best_metrics"]
            assert best["matthews"] == pytest.approx(metrics.matthews_corrcoef(labels, predictions), abs=1e-9)
            assert best["accuracy"] == pytest.approx(metrics.accuracy_score(labels, predictions), abs=1e-9)
            assert best["f1"] == pytest.approx(
                metrics.f1_score(labels, predictions, pos_label=POSITIVE[task.name]), abs=1e-9)
            if task.name == "cola":  # the table's CoLA cell is this Matthews correlation (one seed)
                assert report["scores"][start]["cola"]["matthews"] == pytest.approx(
                    metrics.matthews_corrcoef(labels, predictions), abs=1e-9)
            varied += len(set(predictions)) > 1
    assert varied  # some run predicts both classes, so the correlations above are not all the trivial 0


def test_dry_run_paired_tests(dry_run: tuple[Path, dict]) -> None:
    _, report = dry_run
    paired = report["paired"]["tiny"]
    for task in glue_table.TASKS:
        (test,) = paired[task.name]  # one seed
        assert test["n"] == glue_table.DRY["dev_examples"]
        assert test["metric"] == task.metrics[0]
        assert test["score_a"] == pytest.approx(report["runs"][task.name]["random init"]["0.003"]["42"]
                                                ["best_metrics"][task.metrics[0]])
        assert test["score_b"] == pytest.approx(report["runs"][task.name]["tiny"]["0.003"]["42"]
                                                ["best_metrics"][task.metrics[0]])
        if task.metrics[0] == "accuracy":  # McNemar: the discordant examples are the whole difference
            assert test["test"] == "McNemar's exact test"
            assert (test["only_b"] - test["only_a"]) / test["n"] == pytest.approx(test["difference"])
        else:
            assert test["test"] == "paired bootstrap"


def test_second_invocation_reads_the_runs_back(dry_run: tuple[Path, dict], data_dir: Path, monkeypatch) -> None:
    from bertkit.jobs import finetune

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    out, report = dry_run
    monkeypatch.setattr(finetune, "run", no_training)
    monkeypatch.setattr(finetune, "predictions_on", no_training)  # dev predictions are read back too
    again = glue_table.main(["--dry-run", "--out", str(out), "--data", str(data_dir)])
    for key in ("scores", "glue_average", "paired", "runs"):
        assert again[key] == report[key]
    assert re.search(r"\| tiny \| .* \| \*\*[0-9.]+\*\* \|", (out / "table.md").read_text())


def test_time_steps_times_every_start_on_every_task(dry_run: tuple[Path, dict], data_dir: Path, tmp_path: Path,
                                                    capsys) -> None:
    import torch

    out, _ = dry_run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's steps: two threads only wait for each other on a busy CPU
    try:
        timings = glue_table.main(["--time-steps", "1", "--start", f"tiny={out / 'tiny'}", "--random-twin", "tiny",
                                   "--tasks", "cola", "rte", "--out", str(tmp_path), "--data", str(data_dir)])
    finally:
        torch.set_num_threads(threads)
    assert list(timings) == ["cola", "rte"]
    assert all(list(t) == ["tiny", "random init"] and all(s > 0 for s in t.values()) for t in timings.values())
    printed = capsys.readouterr().out
    assert "CoLA: tiny " in printed and "s/step (1.00x), random init " in printed
    assert not (tmp_path / "table.md").exists()  # timing only


def test_tasks_measured_apart_merge_into_the_same_table(dry_run: tuple[Path, dict], data_dir: Path,
                                                        tmp_path: Path) -> None:
    """Two invocations on disjoint tasks, the second merging the first's glue.json, give the table of one invocation
    on every task; a glue.json of another budget is refused, naming the field."""
    _, whole = dry_run
    first = glue_table.main(["--dry-run", "--out", str(tmp_path / "a"), "--data", str(data_dir), "--tasks", "cola",
                             "rte"])
    assert list(first["tasks"]) == ["cola", "rte"] and "average of 2" in (tmp_path / "a" / "table.md").read_text()
    merged = glue_table.main(["--dry-run", "--out", str(tmp_path / "b"), "--data", str(data_dir), "--tasks", "sst2",
                              "mrpc", "qnli", "--merge", str(tmp_path / "a" / "glue.json")])
    assert merged["merged"] == [{"file": str(tmp_path / "a" / "glue.json"), "tasks": ["cola", "rte"]}]
    assert [t.name for t in glue_table.TASKS if t.name in merged["tasks"]] == list(whole["tasks"])
    for start in whole["scores"]:
        assert merged["glue_average"][start] == pytest.approx(whole["glue_average"][start])
        for task in whole["tasks"]:
            assert merged["scores"][start][task] == pytest.approx(whole["scores"][start][task])
    assert merged["paired"]["tiny"]["rte"] == first["paired"]["tiny"]["rte"]
    assert merged["tables"]["scores"]["columns"][-1]["title"] == "average, every task"  # all five: GLUE's average

    other = json.loads((tmp_path / "a" / "glue.json").read_text())
    other["tasks"]["cola"]["budget"]["seeds"] = [42, 43]
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="task cola had another budget \\(seeds"):
        glue_table.main(["--dry-run", "--out", str(tmp_path / "b"), "--data", str(data_dir), "--tasks", "sst2",
                         "--merge", str(tmp_path / "other.json")])


def test_majority_class_row_is_the_constant_predictor(dry_run: tuple[Path, dict], data_dir: Path) -> None:
    """Each task's floor: the most frequent label of its training file predicted for every dev example, scored by
    scikit-learn from the files' labels (read here without bertkit's reader)."""
    metrics = pytest.importorskip("sklearn.metrics")
    out, report = dry_run
    for task in glue_table.TASKS:
        budget = report["tasks"][task.name]["budget"]
        train = dev_labels(task.name, budget["train"])
        majority = max(sorted(set(train)), key=train.count)
        labels = dev_labels(task.name, budget["dev"])
        floor = report["majority"][task.name]
        assert floor["label"] == majority
        constant = [majority] * len(labels)
        expected = {"matthews": metrics.matthews_corrcoef(labels, constant),
                    "accuracy": metrics.accuracy_score(labels, constant),
                    "f1": metrics.f1_score(labels, constant, pos_label=POSITIVE[task.name], zero_division=0)}
        for m in task.metrics:
            assert floor[m] == pytest.approx(expected[m], abs=1e-12)
    row = report["tables"]["scores"]["rows"][-1]
    assert row["start"] == glue_table.MAJORITY
    floor_average = statistics.fmean(report["majority"][t]["score"] for t in report["tasks"])
    assert row["average"] == pytest.approx(100 * floor_average)


def test_confusion_rebuilt_from_metrics_is_the_runs_own(dry_run: tuple[Path, dict]) -> None:
    """The learned marks read each run's confusion matrix from its recorded accuracy and F1 (the record of an older
    table keeps no predictions): on every dry run it is the matrix counted from the run's stored predictions."""
    out, report = dry_run
    for task in glue_table.TASKS:
        labels = dev_labels(task.name, report["tasks"][task.name]["budget"]["dev"])
        names = sorted(set(labels) | {POSITIVE[task.name]}, key=lambda x: x == POSITIVE[task.name])
        for start in report["starts"]:
            predictions = json.loads((out / task.name / start / "lr0.003-seed42" / "dev_predictions.json")
                                     .read_text())["predictions"]
            counted = [[sum(1 for r, p in zip(labels, predictions) if (r, p) == (a, b)) for b in names] for a in names]
            run = report["runs"][task.name][start]["0.003"]["42"]
            dev_counts = report["majority"][task.name]["dev_counts"]
            rebuilt = glue_table.confusion_from_metrics(run["best_metrics"], dev_counts, "here")
            assert rebuilt.tolist() == counted


def test_recorded_metrics_no_matrix_gives_are_refused() -> None:
    with pytest.raises(SystemExit, match=r"cola, x: no confusion matrix over the dev labels \[10, 10\]"):
        glue_table.confusion_from_metrics({"accuracy": 0.5, "f1": 0.5, "matthews": 0.3}, [10, 10], "cola, x")


def test_against_majority_counts_what_only_one_gets_right() -> None:
    """Against a constant predictor, McNemar's discordant examples are the run's right answers outside the majority
    class (only the run right) and its wrong answers inside it (only the constant right)."""
    import numpy as np

    # references x predictions: 30 negatives (18 right), 70 positives (60 right); the majority class is 1
    test = glue_table.against_majority(np.array([[18, 12], [10, 60]]), 1, "accuracy", seed=0)
    assert (test.only_b, test.only_a, test.n) == (18, 10, 100)
    assert test.score_a == pytest.approx(0.70) and test.score_b == pytest.approx(0.78) and test.outcome == "tie"
    collapsed = glue_table.against_majority(np.array([[0, 30], [0, 70]]), 1, "accuracy", seed=0)
    assert collapsed.p_value == 1 and collapsed.outcome == "tie"  # the constant itself: nothing learned
    strong = glue_table.against_majority(np.array([[28, 2], [3, 67]]), 1, "matthews", seed=0)
    assert strong.test == "paired bootstrap" and strong.score_a == 0 and strong.outcome == "win"


def test_the_glue_reports_floor_and_marks_from_its_recorded_runs(tmp_path: Path, data_dir: Path) -> None:
    """--report-from on the GLUE report of 2026-11-26: the floor from the data's labels (worked out here by hand from
    the label counts), the learned marks from its runs, the headline average over SST-2 and QNLI, 96 steps."""
    source = Path(__file__).resolve().parents[2] / "docs" / "results" / "glue-epyc-avx2-2026-11-26.json"
    report = glue_table.main(["--report-from", str(source), "--out", str(tmp_path), "--data", str(data_dir)])
    floor = report["majority"]
    assert floor["sst2"]["accuracy"] == pytest.approx(444 / 872) and floor["cola"]["matthews"] == 0
    assert floor["mrpc"]["f1"] == pytest.approx(2 * 279 / (279 + 408)) and floor["rte"]["label"] == "entailment"
    assert floor["rte"]["accuracy"] == pytest.approx(146 / 277)
    assert report["learned_tasks"] == ["sst2", "qnli"]
    marks = {start: by_task["qnli"]["learned"] for start, by_task in report["learned"].items()}
    assert marks == {"random init": False, "bertkit-mini": True, "bertkit-mini continued on SST-2": True,
                     "all-MiniLM-L6-v2": True}
    for start, by_task in report["scores"].items():
        assert report["learned_average"][start] == pytest.approx(
            (by_task["sst2"]["score"] + by_task["qnli"]["score"]) / 2)
    assert f"{100 * report['majority_average']:.1f}" == "45.7"
    assert "96 steps, as the runs logged" in (tmp_path / "table.md").read_text()
