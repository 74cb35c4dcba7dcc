"""The README's main command end to end: `bertkit demo --quick` on the bundled data."""

import json

from bertkit.cli import main


def test_quick_demo_writes_every_artefact(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[CLS]" in printed and "[SEP]" in printed  # the pair display
    assert "SST-2 dev accuracy, pre-trained" in printed and "SST-2 dev accuracy, random init" in printed

    report = json.loads((out / "summary.json").read_text())
    assert report["vocabulary"]["size"] == 3000
    assert report["vocabulary"]["unk_share_heldout"] < 0.01
    assert report["pretraining"]["steps"] == report["config"]["pretrain_steps"]
    heldout = report["pretraining"]["heldout"]
    assert 0.0 <= heldout["mlm_accuracy"] <= 1.0 and heldout["perplexity"] > 1.0
    assert report["nsp"]["pairs"] == 200
    assert len(report["fill_mask"]) == 5 and all(len(p["top"]) == 5 for p in report["fill_mask"])
    for name in ("pre-trained", "random init"):
        assert 0.0 <= report["finetuning"][name]["dev_accuracy"] <= 1.0

    assert (out / "tokenizer" / "vocab.txt").is_file()
    assert (out / "pretrain" / "final" / "model.safetensors").is_file()
    assert (out / "pretrain" / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "pretrain" / "metrics.jsonl").is_file()
    assert "data:image/png;base64," in (out / "summary.html").read_text()
    assert "| SST-2 dev accuracy, pre-trained |" in (out / "summary.md").read_text()
    assert "Pre-training ha" in (out / "summary.md").read_text()  # the reading of the comparison


def test_reading_states_the_gain_or_why_there_is_none():
    from bertkit.demo import DemoReport, reading

    report = DemoReport(config={}, pretraining={"heldout": {"mlm_accuracy": 0.12}},
                        finetuning={"pre-trained": {"dev_accuracy": 0.69}, "random init": {"dev_accuracy": 0.76}})
    text = reading(report)
    assert text.startswith("Pre-training has not helped yet: -7.0 accuracy points") and "0.120" in text
    report.finetuning["pre-trained"]["dev_accuracy"] = 0.80
    assert reading(report).startswith("Pre-training helped: +4.0 accuracy points")
    assert reading(DemoReport(config={})) == ""
