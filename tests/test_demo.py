"""The README's main command end to end: `bertkit demo --quick` on the bundled data."""

import json
import math

import pytest

from bertkit.cli import main
from bertkit.demo import DEMO_PRETRAINED, RANDOM_INIT, REFERENCE, SHIPPED, DemoReport, reading


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

    assert (out / "tokenizer" / "vocab.txt").is_file()
    assert (out / "pretrain" / "final" / "model.safetensors").is_file()
    assert (out / "pretrain" / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "sentiment.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "pretrain" / "metrics.jsonl").is_file()
    assert "data:image/png;base64," in (out / "summary.html").read_text()
    summary = (out / "summary.md").read_text()
    assert f"| SST-2 dev accuracy, {SHIPPED} |" in summary
    assert reading(DemoReport(**report)) in summary  # the verdict, computed from the figures


def test_reading_is_computed_from_the_figures():
    report = DemoReport(config={}, pretraining={"heldout": {"mlm_accuracy": 0.12}},
                        finetuning={RANDOM_INIT: {"dev_accuracy": 0.76}, DEMO_PRETRAINED: {"dev_accuracy": 0.69},
                                    SHIPPED: {"dev_accuracy": 0.80}, REFERENCE: {"dev_accuracy": 0.88}})
    text = reading(report)
    assert f"{DEMO_PRETRAINED} does worse than random initialisation: 69.0 vs 76.0 (-7.0 points)" in text
    assert f"{SHIPPED} beats random initialisation: 80.0 vs 76.0 (+4.0 points)" in text
    assert f"{REFERENCE} beats random initialisation: 88.0 vs 76.0 (+12.0 points)" in text
    assert "0.120" in text and "plateau" in text  # why the short run loses
    report.finetuning[DEMO_PRETRAINED]["dev_accuracy"] = 0.78
    assert "plateau" not in reading(report)
    assert reading(DemoReport(config={})) == ""


def test_reading_calls_differences_within_sampling_noise_level() -> None:
    """One seed on 872 sentences: +3.5 at 76% is inside the 95% interval of the difference (about 3.9 points),
    +6.0 is outside; the margin is the binomial one."""
    from bertkit.demo import noise_margin

    assert noise_margin(0.76, 0.76, 872) == pytest.approx(100 * 1.96 * math.sqrt(2 * 0.76 * 0.24 / 872))
    assert 4.0 < noise_margin(0.76, 0.76, 872) < 4.1
    report = DemoReport(config={}, finetuning={RANDOM_INIT: {"dev_accuracy": 0.76, "dev_examples": 872},
                                               SHIPPED: {"dev_accuracy": 0.795}, REFERENCE: {"dev_accuracy": 0.82},
                                               DEMO_PRETRAINED: {"dev_accuracy": 0.70}})
    text = reading(report)
    assert noise_margin(0.795, 0.76, 872) > 3.5
    assert f"{SHIPPED} is level with random initialisation: 79.5 vs 76.0 (+3.5 points)" in text
    assert f"{REFERENCE} beats random initialisation: 82.0 vs 76.0 (+6.0 points)" in text
    assert f"{DEMO_PRETRAINED} does worse than random initialisation: 70.0 vs 76.0 (-6.0 points)" in text
    assert "872 dev sentences" in text


def test_fill_mask_probes_are_held_out_sst2_dev_sentences() -> None:
    """Each probe, its mask filled with some word, is a sentence of the bundled SST-2 dev set, which neither the
    demo's pre-training text nor the shipped model's contains."""
    import re

    from bertkit.demo import FILL_MASK_PROBES, PRETRAIN_FILES, SENTIMENT_DEV, bundled_file

    dev = [line.split("\t")[0].strip() for line in bundled_file(SENTIMENT_DEV).read_text(encoding="utf-8").splitlines()]
    assert SENTIMENT_DEV not in PRETRAIN_FILES
    for probe in FILL_MASK_PROBES:
        assert probe.count("[MASK]") == 1
        pattern = re.compile(re.escape(probe).replace(re.escape("[MASK]"), r"\S+"))
        assert any(pattern.fullmatch(line) for line in dev), probe
