"""The README's main command end to end: `bertkit demo --quick` on the bundled data."""

import json
import math

import pytest

from bertkit.cli import main
from bertkit.jobs.demo import DEMO_PRETRAINED, RANDOM_INIT, REFERENCE, SHIPPED, DemoReport, reading


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
