"""The README's main command end to end: `bertkit demo --quick` on the bundled data."""

import json
import math

import pytest

from bertkit.cli import main
from bertkit.jobs.demo import (DEMO_PRETRAINED, QA_DEV, RANDOM_INIT, REFERENCE, SHIPPED, DemoReport, bundled_file,
                               reading)


def test_quick_demo_writes_every_artefact(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[CLS]" in printed and "[SEP]" in printed  # the pair display
    for name in (RANDOM_INIT, DEMO_PRETRAINED, SHIPPED):
        assert f"SST-2 dev accuracy, {name}" in printed

    report = json.loads((out / "summary.json").read_text())
    assert report["vocabulary"]["size"] == 3000
    assert report["vocabulary"]["unk_share_heldout"] < 0.01
    assert report["pretraining"]["steps"] == report["config"]["pretrain_steps"]
    heldout = report["pretraining"]["heldout"]  # the run's last evaluation on the held-out text, as logged
    evals = [r for r in map(json.loads, (out / "pretrain" / "metrics.jsonl").read_text().splitlines())
             if r["split"] == "eval"]
    assert {"mlm_loss", "mlm_accuracy", "perplexity"} <= set(heldout)
    assert heldout == {k: evals[-1][k] for k in heldout}
    assert heldout["perplexity"] == pytest.approx(math.exp(heldout["mlm_loss"]), rel=1e-9) and heldout["mlm_loss"] > 0
    assert report["nsp"]["pairs"] == 200
    assert len(report["fill_mask"]) == 5
    for probe in report["fill_mask"]:  # fill-mask from (b) and from the shipped model (c)
        assert set(probe["answers"]) == {DEMO_PRETRAINED, SHIPPED} and all(len(t) == 5 for t in probe["answers"].values())
    assert set(report["finetuning"]) == {RANDOM_INIT, DEMO_PRETRAINED, SHIPPED}  # --quick leaves (d) out
    starts = json.loads((out / "sentiment" / "comparison.json").read_text())["starts"]
    assert [s["name"] for s in starts] == [RANDOM_INIT, DEMO_PRETRAINED, SHIPPED]
    for start in starts:  # one seed, one LR: the reported accuracy is that run's, over the dev sentences it names
        r = report["finetuning"][start["name"]]
        assert r["dev_accuracy"] == round(start["mean"], 4) and r["dev_examples"] == start["dev_examples"] > 0
        correct = start["mean"] * start["dev_examples"]
        assert abs(correct - round(correct)) < 1e-6, start
    for name, r in report["finetuning"].items():
        assert 0.0 <= r["dev_accuracy"] <= 1.0
        if name != RANDOM_INIT:  # the verdict's paired test: same 872 sentences, scores equal to the runs'
            paired = r["paired"]
            assert paired["test"] == "McNemar's exact test" and paired["n"] == r["dev_examples"] == 872
            assert paired["score_b"] == pytest.approx(r["dev_accuracy"], abs=5e-5)
            assert paired["score_a"] == pytest.approx(report["finetuning"][RANDOM_INIT]["dev_accuracy"], abs=5e-5)
            assert paired["outcome"] in ("win", "loss", "tie") and 0 < paired["p_value"] <= 1

    # question answering: (a) and (c) on the first evaluation article's questions, F1 and exact match of the runs,
    # the verdict by the paired bootstrap over the same questions
    from bertkit.tasks.qa import read_squad

    questions = len(read_squad(f"{bundled_file(QA_DEV)}#:1"))
    assert set(report["qa"]) == {RANDOM_INIT, SHIPPED} and questions == 104
    qa_starts = json.loads((out / "qa" / "comparison.json").read_text())["starts"]
    for start in qa_starts:
        r = report["qa"][start["name"]]
        assert r["dev_f1"] == round(start["mean"], 4) and 0 <= r["dev_exact_match"] <= r["dev_f1"] <= 100
        assert f"SQuAD dev F1 / exact match, {start['name']}" in printed
    paired = report["qa"][SHIPPED]["paired"]
    assert paired["test"] == "paired bootstrap" and paired["metric"] == "f1" and paired["n"] == questions
    assert 100 * paired["score_b"] == pytest.approx(report["qa"][SHIPPED]["dev_f1"], abs=1e-3)
    assert 100 * paired["score_a"] == pytest.approx(report["qa"][RANDOM_INIT]["dev_f1"], abs=1e-3)
    low, high = paired["interval"]
    assert low <= paired["difference"] <= high and paired["outcome"] in ("win", "loss", "tie")
    assert (out / "qa.png").read_bytes().startswith(b"\x89PNG")
    assert "the SQuAD sample (question answering)" in reading(DemoReport(**report))

    assert (out / "tokenizer" / "vocab.txt").is_file()
    assert (out / "pretrain" / "final" / "model.safetensors").is_file()
    assert (out / "pretrain" / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "sentiment.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "pretrain" / "metrics.jsonl").is_file()
    assert "data:image/png;base64," in (out / "summary.html").read_text()
    summary = (out / "summary.md").read_text()
    assert f"| SST-2 dev accuracy, {SHIPPED} |" in summary
    assert reading(DemoReport(**report)) in summary  # the verdict, computed from the figures


def _paired(only_a: int, only_b: int, both: int = 600, neither: int = 200) -> dict:
    from bertkit.tasks.significance import mcnemar

    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    return mcnemar(a, b).to_dict()


def test_reading_is_the_paired_verdict_computed_from_the_figures():
    """Each start against random init by McNemar's exact test on the same sentences: a win, a loss and a tie
    called from the discordant counts, and the plateau explanation only when the demo's own model does not win."""
    report = DemoReport(config={}, pretraining={"heldout": {"mlm_accuracy": 0.12}},
                        finetuning={RANDOM_INIT: {"dev_accuracy": 0.76},
                                    DEMO_PRETRAINED: {"paired": _paired(40, 5)},
                                    SHIPPED: {"paired": _paired(12, 18)},
                                    REFERENCE: {"paired": _paired(5, 60)}})
    text = reading(report)
    assert (f"{DEMO_PRETRAINED} does worse than random initialisation on SST-2 dev: 71.6 vs 75.7 accuracy "
            f"(-4.1 points); McNemar's exact test on 845 examples: 5 right only with {DEMO_PRETRAINED}, 40 right "
            "only with random initialisation, p = 7.9e-08." in text)
    assert f"{SHIPPED} is level with random initialisation on SST-2 dev" in text
    assert "18 right only with (c) shipped pre-trained, 12 right only with random initialisation" in text
    assert f"{REFERENCE} beats random initialisation on SST-2 dev: 76.3 vs 69.9 accuracy (+6.4 points)" in text
    assert "0.120" in text and "plateau" in text  # why the short run loses
    report.finetuning[DEMO_PRETRAINED]["paired"] = _paired(5, 40)
    assert "plateau" not in reading(report)
    assert f"{DEMO_PRETRAINED} beats random initialisation" in reading(report)
    assert reading(DemoReport(config={})) == ""


def _bootstrap(f1_a: list[float], f1_b: list[float]) -> dict:
    import numpy as np

    from bertkit.tasks.significance import paired_bootstrap

    n = len(f1_a)
    return paired_bootstrap(np.array(f1_a).reshape(-1, 1), np.array(f1_b).reshape(-1, 1),
                            lambda sums: sums[..., 0] / n, "f1", resamples=2000).to_dict()


def test_reading_gives_the_question_answering_verdict_from_the_bootstrap() -> None:
    """On the SQuAD sample the shipped model is judged by the paired bootstrap over questions: a clear gain is a
    win, a clear drop a loss, a wash a tie, and identical answers are level with p = 1."""
    sentiment = {RANDOM_INIT: {"dev_accuracy": 0.7}, SHIPPED: {"paired": _paired(10, 10)}}
    weak = [0.0] * 150 + [1.0] * 50  # random init: 25% of the questions answered
    strong = [0.0] * 90 + [1.0] * 110  # every question weak answers, and 60 more
    cases = {"beats random initialisation on the SQuAD sample (question answering): 55.0 vs 25.0 F1 (+30.0 points)":
             _bootstrap(weak, strong),
             "does worse than random initialisation on the SQuAD sample": _bootstrap(strong, weak),
             "is level with random initialisation on the SQuAD sample": _bootstrap(weak, weak[::-1]),
             "is level with random initialisation on the SQuAD sample (question answering): 25.0 vs 25.0 F1 (+0.0":
             _bootstrap(weak, weak)}
    for expected, paired in cases.items():
        text = reading(DemoReport(config={}, finetuning=sentiment, qa={RANDOM_INIT: {"dev_f1": 25.0},
                                                                      SHIPPED: {"paired": paired}}))
        assert f"{SHIPPED} {expected}" in text, text
        assert "paired bootstrap over 200 examples (2000 resamples): 95% interval of the difference" in text
    assert cases["is level with random initialisation on the SQuAD sample (question answering): 25.0 vs 25.0 F1 "
                 "(+0.0"]["p_value"] == 1.0
    assert cases["does worse than random initialisation on the SQuAD sample"]["interval"][1] < 0


def test_bundled_squad_sample_is_made_by_the_script_from_the_official_file(data_dir) -> None:
    """The shipped SQuAD files are byte for byte what scripts/make_demo_squad.py makes from dev-v1.1.json, and the
    training side shares no article with the evaluation side."""
    import importlib.util
    from pathlib import Path

    from bertkit.jobs.demo import QA_TRAIN
    from bertkit.tasks.qa import read_squad

    path = Path(__file__).resolve().parents[2] / "scripts" / "make_demo_squad.py"
    spec = importlib.util.spec_from_file_location("make_demo_squad", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    made = script.make(data_dir / "squad_v1.1" / "dev-v1.1.json")
    for name, data in made.items():
        assert bundled_file(name).read_bytes() == data, name
    train, dev = read_squad(bundled_file(QA_TRAIN)), read_squad(bundled_file(QA_DEV))
    assert (len(train), len(dev)) == (2004, 1988)
    assert not {ex.context for ex in train} & {ex.context for ex in dev}
    assert not {ex.id for ex in train} & {ex.id for ex in dev}


def test_fill_mask_probes_are_held_out_sst2_dev_sentences() -> None:
    """Each probe, its mask filled with some word, is a sentence of the bundled SST-2 dev set, which neither the
    demo's pre-training text nor the shipped model's contains."""
    import re

    from bertkit.jobs.demo import FILL_MASK_PROBES, PRETRAIN_FILES, SENTIMENT_DEV, bundled_file

    dev = [line.split("\t")[0].strip() for line in bundled_file(SENTIMENT_DEV).read_text(encoding="utf-8").splitlines()]
    assert SENTIMENT_DEV not in PRETRAIN_FILES
    for probe in FILL_MASK_PROBES:
        assert probe.count("[MASK]") == 1
        pattern = re.compile(re.escape(probe).replace(re.escape("[MASK]"), r"\S+"))
        assert any(pattern.fullmatch(line) for line in dev), probe
