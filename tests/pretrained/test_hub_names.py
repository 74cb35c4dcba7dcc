"""Models by their Hugging Face Hub ids, offline: a cache laid out as huggingface_hub lays it out (blobs, a
snapshot per commit of links to them, refs/main naming the commit; huggingface_hub's own scan reads it back) serves
`bertkit.load`, the folder door, the CLI's verbs and the server by the model's id, and a name that is neither a
folder, a shipped model nor in the cache says all three."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import ConfigError
from bertkit.model.folder import open_folder
from bertkit.pretrained import resolve_model_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import tiny_folder  # noqa: E402

huggingface_hub = pytest.importorskip("huggingface_hub")

REPO_ID = "bertkit-tests/tiny-classifier"


def cache_with(cache: Path, repo_id: str, folder: Path) -> Path:
    """Put `folder` in the Hugging Face cache `cache` as `repo_id`'s main revision, laid out as huggingface_hub
    writes a download: blobs/<sha256>, snapshots/<commit>/<file> relative links to them, refs/main the commit.
    Returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A tiny fine-tuned classifier folder, and its snapshot in a fresh cache at HF_HUB_CACHE, offline."""
    folder = tiny_folder(tmp_path, "BertForSequenceClassification", task="classification", num_labels=2,
                         label_names=["neg", "pos"], task_settings={"max_length": 32, "label_names": ["neg", "pos"]})
    cache = tmp_path / "hf-cache"
    snapshot = cache_with(cache, REPO_ID, folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder, snapshot


def test_the_cache_is_laid_out_as_huggingface_hub_reads_it(hub: tuple[Path, Path]) -> None:
    folder, snapshot = hub
    scan = huggingface_hub.scan_cache_dir(os.environ["HF_HUB_CACHE"])
    assert not scan.warnings
    (repo,) = scan.repos
    assert repo.repo_id == REPO_ID and {r.refs for r in repo.revisions} == {frozenset({"main"})}
    assert huggingface_hub.try_to_load_from_cache(REPO_ID, "config.json",
                                                  cache_dir=os.environ["HF_HUB_CACHE"]) == str(snapshot / "config.json")
    assert resolve_model_dir(REPO_ID) == snapshot


def test_bertkit_load_and_the_folder_door_take_a_hub_id(hub: tuple[Path, Path]) -> None:
    folder, snapshot = hub
    by_id, by_path = bertkit.load(REPO_ID), bertkit.load(folder)
    assert by_id.path == snapshot and open_folder(REPO_ID).path == snapshot
    texts = ["a fine film", "a dull one"]
    assert by_id.classify(texts) == by_path.classify(texts)
    assert np.array_equal(by_id.encode(texts, precision="fp32"), by_path.encode(texts, precision="fp32"))


def test_a_sharded_model_loads_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache links each shard to its blob in another folder: the shards are still the folder's files."""
    from safetensors.torch import load_file, save_file

    folder = tiny_folder(tmp_path, "BertForMaskedLM")
    reference = bertkit.load(folder).model.state_dict()
    state = load_file(folder / "model.safetensors")
    names = sorted(state)
    weight_map = {}
    for part, chunk in enumerate((names[: len(names) // 2], names[len(names) // 2:]), start=1):
        shard = f"model-0000{part}-of-00002.safetensors"
        save_file({n: state[n] for n in chunk}, folder / shard)
        weight_map.update(dict.fromkeys(chunk, shard))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "model.safetensors").rename(tmp_path / "unsharded.safetensors")
    cache_with(tmp_path / "hf-cache", "bertkit-tests/sharded", folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = bertkit.load("bertkit-tests/sharded").model.state_dict()
    assert loaded.keys() == reference.keys()
    assert all(torch.equal(loaded[name], reference[name]) for name in reference)


def test_cli_verbs_take_a_hub_id(hub: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "in.tsv").write_text("sentence\na fine film\n")
    (tmp_path / "in.txt").write_text("a fine film\n")
    assert main(["info", REPO_ID]) == 0
    assert "BertForSequenceClassification" in capsys.readouterr().out
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", REPO_ID, "-o", str(tmp_path / "t.jsonl")]) == 0
    assert main(["predict", "--model", REPO_ID, "--input", str(tmp_path / "in.tsv"), "--output",
                 str(tmp_path / "p.tsv")]) == 0
    assert (tmp_path / "p.tsv").read_text().splitlines()[1].split("\t")[1] in ("neg", "pos")


def test_the_server_takes_a_hub_id(hub: tuple[Path, Path]) -> None:
    pytest.importorskip("fastapi", reason="the server needs fastapi (pip install 'bertkit[serve]')")
    from bertkit.serve.app import Predictor

    folder, snapshot = hub
    predictor = Predictor(REPO_ID, precision="fp32")
    assert predictor.folder == snapshot
    examples = predictor.examples({"texts": ["a fine film"]})
    assert predictor.task_batch(examples) == bertkit.load(folder).classify(["a fine film"])


def test_an_unreachable_hub_falls_back_to_the_cache(hub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Online (HF_HUB_OFFLINE unset) with the Hub out of reach (a closed local port stands for it), huggingface_hub
    reads the cache; a model the cache lacks says why the Hub did not give it."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    assert resolve_model_dir(REPO_ID) == hub[1]
    with pytest.raises(ConfigError, match="the Hub did not give it"):
        resolve_model_dir("bertkit-tests/not-there")


def test_a_name_found_nowhere_says_all_three(hub: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    cache = os.environ["HF_HUB_CACHE"]
    with pytest.raises(ConfigError) as error:
        bertkit.load("bertkit-tests/not-there")
    assert str(error.value) == (
        "bertkit-tests/not-there: no such model folder, nor a shipped model's name (bertkit-mini), nor a Hugging Face "
        f"Hub model in the cache {cache} (offline (HF_HUB_OFFLINE), so the Hub was not asked)")
    assert main(["info", "bertkit-tests/not-there"]) == 1
    assert "nor a Hugging Face Hub model in the cache" in capsys.readouterr().err
    assert resolve_model_dir("bertkit-mini").name == "bertkit-mini"  # a shipped name wins over a Hub id


def test_paths_that_cannot_be_hub_ids_are_not_looked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An absolute path, one that climbs (..) or has more than one folder is a missing folder, named as such by
    its reader; no Hub or cache is asked."""
    monkeypatch.setattr("bertkit.pretrained.hub_snapshot", lambda name: pytest.fail(f"looked up {name}"))
    for name in (str(tmp_path / "nope"), "../nope", "a/b/c", "./nope"):
        assert resolve_model_dir(name) == Path(name)
    with pytest.raises(bertkit.CheckpointError, match="no such model folder"):
        bertkit.load(tmp_path / "nope")


def test_a_hub_id_is_never_taken_for_a_folder_that_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.setattr("bertkit.pretrained.hub_snapshot", lambda name: pytest.fail(f"looked up {name}"))
    assert resolve_model_dir("org/name") == Path("org/name")
