"""`bertkit embed` as a streaming job: the same numbers as the in-memory Encoder, rows read lazily, shards that a
resume after a real SIGKILL completes bitwise, torchrun's split giving the single process's files, and every bad
row named."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import tiny_folder  # noqa: E402

import bertkit  # noqa: E402
from bertkit.cli import main  # noqa: E402
from bertkit.data.texts import count_rows, read_texts  # noqa: E402
from bertkit.errors import ConfigError, DataError, OutputError  # noqa: E402
from bertkit.inference.vector_store import Embeddings  # noqa: E402
from bertkit.jobs import embed as embed_job  # noqa: E402
from bertkit.jobs.embed import EmbedConfig, rank_shards  # noqa: E402
from bertkit.training.distributed import DistInfo  # noqa: E402

SRC = Path(bertkit.__file__).resolve().parents[1]
WORDS = "the cat sat on a mat while dogs ran in the park near old trees and quiet rivers".split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """n varied sentences (lengths 1..40 words) from a fixed seed."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 40)))) for _ in range(n)]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_folder(tmp_path_factory.mktemp("embed"), "BertModel"))


def files_of(folder: Path) -> dict[str, bytes]:
    """Every visible file's bytes (the lock and temporary files are hidden)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def test_folder_and_npy_outputs_equal_the_in_memory_encoder(model: str, tmp_path: Path) -> None:
    texts = sentences(57) + [""]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    expected = bertkit.load(model).encode(texts, precision="fp32")
    assert main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "e.npy"), "--model", model,
                 "--precision", "fp32", "--no-progress"]) == 0
    buffer = io.BytesIO()
    np.save(buffer, expected)
    assert (tmp_path / "e.npy").read_bytes() == buffer.getvalue()  # the old verb's bytes, header included
    assert main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "d"), "--model", model,
                 "--precision", "fp32", "--shard-size", "10", "--no-progress"]) == 0
    store = Embeddings(tmp_path / "d")
    assert [s.rows for s in store.shards] == [10] * 5 + [8]
    # other batch-mates can change a float32 product's last bit (the GEMM's blocking follows the batch's size):
    # one shard holding every row is bitwise the in-memory call (above), smaller ones equal it to rounding
    np.testing.assert_allclose(store.matrix(), expected, rtol=0, atol=1e-6)
    rows = list(store.iter_rows())
    assert [r["text"] for r in rows] == texts and [r["id"] for r in rows] == list(range(1, 59))
    assert store.settings["dim"] == 32 and store.settings["precision"] == "fp32" and store.rows == 58
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["rows"] == 58 and manifest["settings"]["model_sha256"] == store.settings["model_sha256"]
    # float16: the float32 vectors, rounded, in half the bytes
    assert main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "h"), "--model", model,
                 "--precision", "fp32", "--dtype", "float16", "--no-progress"]) == 0
    half = np.load(tmp_path / "h" / "shard-00000.npy")
    assert half.dtype == np.float16 and np.array_equal(half, expected.astype(np.float16))


def test_structured_inputs_with_ids_and_their_errors(model: str, tmp_path: Path) -> None:
    texts = sentences(12, seed=1)
    expected = bertkit.load(model).encode(texts, precision="fp32")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"doc": f"d{i}", "body": t}) + "\n"
                                               for i, t in enumerate(texts)))
    (tmp_path / "in.csv").write_text("doc,body\n" + "".join(f'd{i},"{t}"\n' for i, t in enumerate(texts)))
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow (pip install 'bertkit[index]')")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"doc": [f"d{i}" for i in range(12)], "body": texts}), tmp_path / "in.parquet",
                   row_group_size=5)
    for name in ("in.jsonl", "in.csv", "in.parquet"):
        out = tmp_path / name.replace(".", "-")
        assert main(["embed", str(tmp_path / name), "-o", str(out), "--model", model, "--precision", "fp32",
                     "--text-field", "body", "--id-field", "doc", "--shard-size", "5", "--no-progress"]) == 0
        store = Embeddings(out)
        np.testing.assert_allclose(store.matrix(), expected, rtol=0, atol=1e-6, err_msg=name)
        assert [r["id"] for r in store.iter_rows()] == [f"d{i}" for i in range(12)]
    # a missing text field is named with the file and line, before the model is loaded
    (tmp_path / "bad.jsonl").write_text('{"body": "fine"}\n{"text": "no body"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: no text field 'body' \(fields found: 'text'\)"):
        embed_job.run(EmbedConfig(input=str(tmp_path / "bad.jsonl"), output=str(tmp_path / "x"), model="nowhere",
                                  text_field="body", progress=False))
    with pytest.raises(DataError, match=r"in\.csv:2: no id field 'id'"):
        list(read_texts(str(tmp_path / "in.csv"), text_field="body", id_field="id"))
    with pytest.raises(DataError, match=r"in\.parquet: no text column 'text' \(columns: doc, body\)"):
        list(read_texts(str(tmp_path / "in.parquet")))
    (tmp_path / "n.jsonl").write_text('{"text": 3}\n')
    with pytest.raises(DataError, match=r"n\.jsonl:1: field 'text' is 3; expected a string"):
        list(read_texts(str(tmp_path / "n.jsonl")))
    with pytest.raises(ConfigError, match="--id-field needs JSONL"):
        list(read_texts(str(tmp_path / "in.txt"), id_field="doc"))


def test_rows_are_read_lazily_and_the_job_holds_one_shard(model: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """200,000 lines (about 10 MB) stream through: the reader's first row costs kilobytes, and a whole run (the
    encoder replaced by a cheap stand-in that checks each call's size) never holds more than a shard of texts."""
    line = "a line of text that is long enough to count for something here\n"
    (tmp_path / "big.txt").write_text(line * 200_000)
    size = (tmp_path / "big.txt").stat().st_size
    tracemalloc.start()
    rows = read_texts(str(tmp_path / "big.txt"))
    first = next(rows)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert first.text == line.strip() and first.line == 1 and peak < 200_000
    calls: list[int] = []

    def stand_in(encoder: object, texts: list[str], config: EmbedConfig, bar: object) -> np.ndarray:
        calls.append(len(texts))
        return np.zeros((len(texts), 32), np.float32)

    monkeypatch.setattr(embed_job, "encode_texts", stand_in)
    (tmp_path / "small.txt").write_text(line * 20_000)
    peaks = {}
    for name in ("small.txt", "big.txt"):  # flat: ten times the lines, the same peak (the model's load included)
        config = EmbedConfig(input=str(tmp_path / name), output=str(tmp_path / "out.npy"), model=model,
                             shard_size=2000, progress=False)
        calls.clear()
        tracemalloc.start()
        result = embed_job.run(config)
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert result.rows == 200_000 and set(calls) == {2000} and len(calls) == 100
    assert peaks["big.txt"] < peaks["small.txt"] + 1_000_000 < size, peaks  # the texts alone: over 20 MB
    assert np.load(tmp_path / "out.npy", mmap_mode="r").shape == (200_000, 32)


def _embed_process(model: str, source: Path, out: Path, *extra: str) -> subprocess.Popen:
    # one thread in every process, so that the single process and each torchrun rank compute alike
    return subprocess.Popen([sys.executable, "-m", "bertkit", "embed", str(source), "-o", str(out), "--model", model,
                             "--precision", "fp32", "--shard-size", "25", "--batch-size", "8", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"})


def test_sigkill_then_resume_is_bitwise_the_uninterrupted_run(model: str, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sentences(800, seed=2)) + "\n")
    whole = _embed_process(model, source, tmp_path / "whole")
    killed = _embed_process(model, source, tmp_path / "killed")
    deadline = time.time() + 120
    while not (tmp_path / "killed" / "shard-00003.npy").exists():  # a few shards done, most still to come
        assert time.time() < deadline and killed.poll() is None, killed.stderr.read() if killed.stderr else ""
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "killed" / "manifest.json").exists()
    done_before = sorted(p.name for p in (tmp_path / "killed").glob("shard-*.npy"))
    assert 4 <= len(done_before) < 32, done_before
    assert whole.wait(300) == 0, whole.stderr.read() if whole.stderr else ""
    # a fresh run into the killed run's folder is refused; --resume completes it
    assert main(["embed", str(source), "-o", str(tmp_path / "killed"), "--model", model]) == 1
    resumed = _embed_process(model, source, tmp_path / "killed", "--resume")
    assert resumed.wait(300) == 0, resumed.stderr.read() if resumed.stderr else ""
    assert f"({len(done_before)} finished shards kept)" in (resumed.stderr.read() if resumed.stderr else "")
    assert files_of(tmp_path / "killed") == files_of(tmp_path / "whole")
    # a resume with other settings is refused, naming them
    with pytest.raises(ConfigError, match=r"pooling: 'mean' there, 'cls' here"):
        embed_job.run(EmbedConfig(input=str(source), output=str(tmp_path / "killed"), model=model, pooling="cls",
                                  precision="fp32", shard_size=25, progress=False), resume=True)


def test_a_fresh_run_refuses_a_used_folder(model: str, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "other.txt").write_text("x")
    with pytest.raises(OutputError, match=r"already holds files \(other\.txt\).*--resume"):
        embed_job.run(EmbedConfig(input=str(tmp_path / "in.txt"), output=str(tmp_path / "d"), model=model))
    with pytest.raises(ConfigError, match="--resume continues a folder output"):
        embed_job.run(EmbedConfig(input=str(tmp_path / "in.txt"), output=str(tmp_path / "e.npy"), model=model),
                      resume=True)


def test_progress_reports_rate_and_eta_when_not_a_terminal(model: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "in.txt").write_text("\n".join(sentences(30)) + "\n")
    assert main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "e.npy"), "--model", model,
                 "--shard-size", "10"]) == 0
    err = capsys.readouterr().err
    assert "embed: 30/30 texts (100.0%)" in err and "texts/s" in err and "ETA" in err


def test_rank_shards_are_contiguous_and_cover_everything() -> None:
    for shards in (0, 1, 5, 7, 100):
        for world in (1, 2, 3, 8):
            ranges = [rank_shards(shards, DistInfo(rank=r, world_size=world)) for r in range(world)]
            assert [k for r in ranges for k in r] == list(range(shards))


def test_torchrun_two_processes_write_the_single_process_files(model: str, tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sentences(90, seed=3)) + "\n")
    single = _embed_process(model, source, tmp_path / "one", "--no-progress")
    assert single.wait(300) == 0, single.stderr.read() if single.stderr else ""
    done = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "bertkit", "embed",
                           str(source), "-o", str(tmp_path / "two"), "--model", model, "--precision", "fp32",
                           "--shard-size", "25", "--batch-size", "8", "--no-progress"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_of(tmp_path / "two") == files_of(tmp_path / "one")
    assert count_rows(str(source)) == Embeddings(tmp_path / "two").rows == 90
