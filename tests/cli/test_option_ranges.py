"""Values the options layer must refuse by name, as the 2026-11-28 attack report found them (T1, C2, S9, S4, C1, T4) and
their earlier variants: non-finite trainer settings, an Adam epsilon that turns the updates off, a LayerNorm epsilon
that makes every text embed alike, FAISS dials of zero or below, and options handed to FAISS, torch and ONNX out of
their range. Each goes through the path the report used (the CLI, a config.json, the Python API); the walk over every
field of every config is tests/test_dataclass_io.py and tests/cli/test_option_values.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import ConfigError
from bertkit.training.config import TrainingConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import tiny_folder  # noqa: E402

SST2 = Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2"


def _finetune(tmp_path: Path, *extra: str) -> list[str]:
    rows = "sentence\tlabel\n" + "".join(f"text number {i}\t{i % 2}\n" for i in range(8))
    (tmp_path / "t.tsv").write_text(rows)
    return ["finetune", "--task", "classification", "--glue", "sst2", "--model", "bertkit-mini", "--train",
            str(tmp_path / "t.tsv"), "--dev", str(tmp_path / "t.tsv"), "--training.max-steps", "1", "--no-progress",
            "--training.output-dir", str(tmp_path / "out"), *extra]


@pytest.mark.parametrize("option,value,field", [
    ("--training.warmup", "nan", "warmup"), ("--training.warmup", "inf", "warmup"),
    ("--training.weight-decay", "nan", "weight_decay"), ("--training.seed", "100000000000000000000000", "seed"),
    ("--training.adam-eps", "inf", "adam_eps"), ("--training.adam-eps", "0.5", "adam_eps"),
    ("--training.lr", "inf", "lr"), ("--training.max-grad-norm", "nan", "max_grad_norm"),
])
def test_a_non_finite_or_huge_trainer_setting_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                 option: str, value: str, field: str) -> None:
    assert main(_finetune(tmp_path, option, value)) == 1
    err = capsys.readouterr().err
    assert f"FinetuneConfig.training.{field}: expected" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_an_adam_epsilon_that_would_turn_the_updates_off_is_refused() -> None:
    """C2: adam_eps inf made every update 0 (only weight decay ran), rc 0. Any eps above 1e-3 is refused."""
    for eps in (float("inf"), 1.0, 0.01):
        with pytest.raises(ConfigError, match=r"TrainingConfig.adam_eps: expected a (finite number|number > 0 and <= 0.001)"):
            TrainingConfig(adam_eps=eps)
    assert TrainingConfig(adam_eps=1e-8).adam_eps == 1e-8  # torch's default stays valid


@pytest.mark.parametrize("eps", [0.9, 0.5, 0.01, 0.0, -1e-12, float("nan")])
def test_a_layer_norm_epsilon_no_real_checkpoint_uses_is_refused_at_load(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture,
                                                                         eps: float) -> None:
    """S9: a config.json with layer_norm_eps 0.9 embedded every text to the same vector, rc 0."""
    folder = tiny_folder(tmp_path, "BertModel")
    config = json.loads((folder / "config.json").read_text())
    config["layer_norm_eps"] = eps
    (folder / "config.json").write_text(json.dumps(config))
    (tmp_path / "t.txt").write_text("a great film\n")
    assert main(["embed", str(tmp_path / "t.txt"), "-o", str(tmp_path / "x.npy"), "--model", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "layer_norm_eps" in err and "Traceback" not in err and not (tmp_path / "x.npy").exists()


def test_published_layer_norm_epsilons_load() -> None:
    from bertkit.model import BertConfig

    for eps in (1e-12, 1e-7, 1e-6, 1e-5):  # BERT/ALBERT/ELECTRA, DeBERTa, ..., RoBERTa/XLM-R
        assert BertConfig(layer_norm_eps=eps).layer_norm_eps == eps


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("faiss")
    tmp = tmp_path_factory.mktemp("ranges")
    model = tiny_folder(tmp, "BertModel")
    rng = np.random.default_rng(0)
    words = "river bank money loan tree forest water fish boat field city road".split()
    (tmp / "c.txt").write_text("".join(" ".join(rng.choice(words, 5)) + "\n" for _ in range(60)))
    assert main(["embed", str(tmp / "c.txt"), "-o", str(tmp / "e"), "--model", str(model), "--normalize",
                 "--precision", "fp32", "--no-progress"]) == 0
    assert main(["index", str(tmp / "e"), "-o", str(tmp / "hnsw"), "--kind", "hnsw"]) == 0
    assert main(["index", str(tmp / "e"), "-o", str(tmp / "ivf"), "--kind", "ivf", "--nlist", "4"]) == 0
    return {"tmp": tmp, "e": tmp / "e", "hnsw": tmp / "hnsw", "ivf": tmp / "ivf"}


@pytest.mark.parametrize("index,option,value", [
    ("hnsw", "--ef-search", "-5"), ("hnsw", "--ef-search", "0"), ("ivf", "--nprobe", "-1"), ("ivf", "--nprobe", "0"),
    ("hnsw", "--top-k", "0"), ("hnsw", "--top-k", "1e30"),
])
def test_a_search_dial_of_zero_or_below_is_an_error_not_the_default(indexes: dict[str, Path],
                                                                    capsys: pytest.CaptureFixture, index: str,
                                                                    option: str, value: str) -> None:
    """S4: --ef-search -5 gave one wrong hit; C1: 0 silently meant the index's default; T4: --nprobe -1 gave a
    FAISS OverflowError traceback."""
    assert main(["search", "--index", str(indexes[index]), option, value, "river bank"]) == 1
    out = capsys.readouterr()
    name = option.removeprefix("--").replace("-", "_")
    assert f"SearchConfig.{name}" in out.err and "Traceback" not in out.err and out.out == ""


def test_the_python_api_checks_the_search_dials_as_the_cli_does(indexes: dict[str, Path]) -> None:
    from bertkit.inference.index import VectorIndex

    index = VectorIndex(indexes["hnsw"])
    try:
        for bad in (0, -5):
            with pytest.raises(ConfigError, match="ef_search"):
                index.set_search_options(ef_search=bad)
        index.set_search_options(ef_search=7)
        assert index.index.hnsw.efSearch == 7
    finally:
        index.close()


@pytest.mark.parametrize("argv,field", [
    (["--kind", "ivf", "--nlist", "4", "--pq-m", "8", "--pq-bits", "30"], "pq_bits"),
    (["--kind", "ivf", "--nlist", "4", "--pq-m", "-8"], "pq_m"),
    (["--kind", "ivf", "--nlist", "4", "--pq-m", "5"], "pq_m"),
    (["--kind", "ivf", "--nlist", "0"], "nlist"),
    (["--kind", "hnsw", "--hnsw-m", "100000"], "hnsw_m"),
])
def test_index_options_handed_to_faiss_are_refused_by_name(indexes: dict[str, Path], capsys: pytest.CaptureFixture,
                                                          argv: list[str], field: str) -> None:
    """T4: --pq-bits 30 was a FAISS RuntimeError traceback; C1: --pq-m -8 said 'dimension None'."""
    out = indexes["tmp"] / f"bad-{field}"
    assert main(["index", str(indexes["e"]), "-o", str(out), *argv]) == 1
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err and "None" not in err
    if field == "pq_m" and "5" in argv:
        assert "dimension 32" in err
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("argv,field", [
    (["embed", "IN", "-o", "OUT", "--model", "bertkit-mini", "--device", "tpu"], "EmbedConfig.device"),
    (["export-onnx", "bertkit-mini", "-o", "OUT.onnx", "--opset", "5"], "ExportOptions.opset"),
    (["export-onnx", "bertkit-mini", "-o", "OUT.onnx", "--opset", "99"], "ExportOptions.opset"),
    (["export-onnx", "bertkit-mini", "-o", "OUT.onnx", "--opset", "-1"], "ExportOptions.opset"),
    (["fill-mask", "--model", "bertkit-mini", "--top-k", "0", "a [MASK] ."], "FillMaskOptions.top_k"),
    (["serve", "--model", "bertkit-mini", "--port", "70000"], "ServeAddress.port"),
])
def test_options_handed_to_torch_and_onnx_are_refused_before_the_work(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                     argv: list[str], field: str) -> None:
    """T4: --device tpu and --opset 5 / 99 / -1 were torch RuntimeError / OnnxExporterError tracebacks."""
    (tmp_path / "in.txt").write_text("a sentence\n")
    argv = [a.replace("IN", str(tmp_path / "in.txt")).replace("OUT", str(tmp_path / "out")) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not any(tmp_path.glob("out*"))


def test_the_onnx_export_takes_every_opset_its_range_declares(tmp_path: Path) -> None:
    """The declared range is what the exporter does: its ends export a model ONNX Runtime runs."""
    pytest.importorskip("onnxruntime")
    import onnxruntime

    from bertkit.dataclass_io import field_spec
    from bertkit.inference.onnx_export import export_folder
    from bertkit.inference.options import ExportOptions

    folder = tiny_folder(tmp_path, "BertModel")
    declared = field_spec(ExportOptions, "opset")
    for opset in (declared.ge, declared.le):
        export_folder(folder, tmp_path / f"m{opset}.onnx", int(opset))
        onnxruntime.InferenceSession(str(tmp_path / f"m{opset}.onnx"))
