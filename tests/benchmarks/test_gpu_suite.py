"""The GPU suite's CPU dry run (benchmarks/gpu_suite.py --dry-run): every section's code path runs on tiny sizes, the
report has its structure, and the parity and distributed checks pass, so the suite cannot rot while no GPU is at
hand."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_suite  # noqa: E402


def test_largest_batch_finds_the_boundary() -> None:
    for limit in (0, 1, 5, 8, 37, 64):
        calls = []

        def ok(b: int, limit: int = limit) -> bool:
            calls.append(b)
            return b <= limit

        assert gpu_suite.largest_batch(ok, cap=100) == limit
        assert max(calls) <= 100
    assert gpu_suite.largest_batch(lambda b: True, cap=24) == 24


def test_dry_run_report(tmp_path: Path, data_dir: Path, minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every section, with --compile: torch.compile is recorded and skipped here (dynamo's tracing takes minutes on a
    CPU; the slow test below runs it), so the compiled rows' code runs in the suite."""
    calls = []
    monkeypatch.setattr(gpu_suite.torch, "compile", lambda model, **kw: calls.append(kw) or model)
    out = tmp_path / "report.json"
    gpu_suite.main(["--dry-run", "--data", str(data_dir), "--minilm", str(minilm_dir), "--out", str(out), "--compile",
                    "--bf16-weights"])
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["device"] == "cpu"
    sections = report["sections"]
    assert list(sections) == list(gpu_suite.SECTIONS)
    for name, section in sections.items():
        assert "error" not in section, (name, section.get("traceback"))
    parity = sections["parity"]["random-tiny"]
    assert list(parity) == list(gpu_suite.HEADS)
    for head, row in parity.items():
        assert row["fp32_max_abs_diff"] <= 1e-5, head
        assert row["bf16_min_cosine"] >= 0.999, head
        assert head == "BertModel" or row["bf16_argmax_agreement"] >= 0.99, head
    assert sections["parity"]["passed"]
    pre = sections["pretrain"]
    assert pre["bertkit_tokens_per_s"] > 0 and pre["transformers_tokens_per_s"] > 0
    assert math.isclose(pre["speedup"], pre["bertkit_tokens_per_s"] / pre["transformers_tokens_per_s"])
    assert "6 N" in pre["mfu_formula"] and pre["bertkit_mfu"] is None  # no peak on a CPU
    # every lever's code path
    levers = ["plain", "+sparse MLM", "+sparse last layer", "+unpadded"]
    assert list(pre["levers"]) == [f"{x}{w}" for x in levers for w in ("", ", bf16 weights")]
    # --bf16-weights: both libraries' steps on bf16 weights too, each lever's ratio against that reference as well
    assert math.isclose(pre["bf16_weights_speedup"],
                        pre["bertkit_bf16_weights_tokens_per_s"] / pre["transformers_bf16_weights_tokens_per_s"])
    for lever, row in pre["levers"].items():
        assert math.isclose(row["vs_transformers_bf16_weights"],
                            row["tokens_per_s"] / pre["transformers_bf16_weights_tokens_per_s"]), lever
        assert row["tokens_per_s"] > 0 and row["mfu"] is None, lever
        assert math.isclose(row["vs_transformers"], row["tokens_per_s"] / pre["transformers_tokens_per_s"]), lever
        assert math.isclose(row["vs_transformers_compiled"],
                            row["tokens_per_s"] / pre["transformers_compiled_tokens_per_s"]), lever
    # --compile: bertkit, each lever and a second transformers compiled (like with like; the dry run's backend is
    # dynamo's eager one), beside the eager transformers row; each ratio against its own reference
    assert calls[:6] == [{"backend": "eager"}] * 6 and pre["compile"]
    assert math.isclose(pre["speedup_vs_compiled"],
                        pre["bertkit_tokens_per_s"] / pre["transformers_compiled_tokens_per_s"])
    assert not pre["meets_goal"]  # no CPU run reaches 45% MFU of an unknown peak
    embed = sections["embed"]["random-tiny"]
    assert embed["min_cosine_to_fp32"] >= 0.99 and embed["speedup"] > 0
    finetune = sections["finetune"]  # the dry run scores 32 SST-2 dev sentences: an accuracy in 32nds
    assert finetune["train_examples"] == 64 and finetune["model"] == "random-tiny"
    assert 0 <= finetune["dev_accuracy"] <= 1 and finetune["dev_accuracy"] * 32 == round(finetune["dev_accuracy"] * 32)
    memory = sections["memory"]
    assert memory["without_checkpointing"] == memory["with_checkpointing"] == 8  # the cap: a CPU never runs out
    dist = sections["distributed"]
    assert dist["backend"] == "gloo" and dist["passed"] and dist["max_weight_diff"] <= 1e-5


def test_peak_flops_override_and_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_suite.peak_flops(500.0) == 500e12
    monkeypatch.setattr(gpu_suite.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_suite.torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 PCIe")
    assert gpu_suite.peak_flops(None) == 756e12
    monkeypatch.setattr(gpu_suite.torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    assert gpu_suite.peak_flops(None) == 989.4e12
    monkeypatch.setattr(gpu_suite.torch.cuda, "get_device_name", lambda i=0: "Some Future GPU")
    assert gpu_suite.peak_flops(None) is None


@pytest.mark.slow
def test_dry_run_compiled_pretrain_step_traces(tmp_path: Path, data_dir: Path, minilm_dir: Path) -> None:
    """The pre-training rows with dynamo really tracing every model's step (its eager backend: no code generation),
    the bf16 working copies of --bf16-weights too."""
    out = tmp_path / "report.json"
    gpu_suite.main(["--dry-run", "--data", str(data_dir), "--minilm", str(minilm_dir), "--out", str(out),
                    "--sections", "pretrain", "--compile", "--levers", "plain", "--bf16-weights"])
    pre = json.loads(out.read_text())["sections"]["pretrain"]
    assert "error" not in pre, pre.get("traceback")
    assert pre["bertkit_tokens_per_s"] > 0 and pre["transformers_compiled_tokens_per_s"] > 0
    assert pre["levers"]["plain"]["vs_transformers_compiled"] > 0
    assert pre["bertkit_bf16_weights_tokens_per_s"] > 0  # the compiled bf16 working copy
    assert pre["levers"]["plain, bf16 weights"]["vs_transformers_compiled"] > 0
