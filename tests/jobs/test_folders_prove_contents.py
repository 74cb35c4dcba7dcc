"""Folders that prove their contents: every folder one verb writes and another reads or resumes (an
embeddings folder, an index, prepared pre-training data, a training checkpoint, a GLUE table merged from elsewhere)
records its files' sha256 and its inputs' identity, checks them when it is opened or resumed, and commits a multi-file
update with a marker written last and removed first. Each variant below (a file deleted, truncated or with a byte
flipped, NaN in a shard, another tokenizer, an input edited in place, another stream on stdin, an interrupted
overwrite, a malformed record) must be a bertkit error naming the file or field: never a traceback, never a silent
wrong answer. Findings S1, S2, S3, S7, S8, S11, T2, T3, T6 and C1 of the 2026-11-28 attack report."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from inference_helpers import tiny_folder  # noqa: E402

from bertkit.cli import main  # noqa: E402
from bertkit.errors import BertkitError, CheckpointError, ConfigError, DataError  # noqa: E402
from bertkit.jobs import embed as embed_job  # noqa: E402
from bertkit.jobs.embed import EmbedConfig  # noqa: E402

WORDS = "river bank money loan tree forest water fish boat field city road car train music song".split()
Mutation = Callable[[Path], None]


def sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 12)))) for _ in range(n)]


def files_of(folder: Path) -> dict[str, bytes]:
    """Every visible file's bytes (the lock and temporary files are hidden)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def embed(source: str | Path, out: Path, model: str, resume: bool = False) -> None:
    embed_job.run(EmbedConfig(input=str(source), output=str(out), model=model, precision="fp32", normalize=True,
                              shard_size=10, progress=False), resume=resume)


def as_if_killed_after_shard_2(folder: Path) -> None:
    """The state a kill -9 after shard 2 of 4 leaves: no manifest, no shard 3."""
    (folder / "manifest.json").unlink()
    for p in folder.glob("shard-00003.*"):
        p.unlink()


def from_stdin(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(("\n".join(lines) + "\n").encode())))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_folder(tmp_path_factory.mktemp("model"), "BertModel"))


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory, model: str) -> Path:
    """40 texts embedded in 4 shards of 10."""
    tmp = tmp_path_factory.mktemp("embeddings")
    (tmp / "in.txt").write_text("\n".join(sentences(40, seed=0)) + "\n")
    embed(tmp / "in.txt", tmp / "emb", model)
    return tmp / "emb"


# ---------------------------------------------------------------------------------------------------------------
# Generated damage: each file of a folder deleted, truncated, a byte flipped, replaced by random bytes.
# ---------------------------------------------------------------------------------------------------------------


def _delete(p: Path) -> None:
    p.unlink()


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-7])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) * 2 // 3] ^= 0xFF
    p.write_bytes(bytes(data))


def _random(p: Path) -> None:
    p.write_bytes(np.random.default_rng(0).bytes(p.stat().st_size))


DAMAGE = {"deleted": (_delete, "missing"), "truncated": (_truncate, "corrupted or truncated"),
          "flipped": (_flip, "corrupted"), "random": (_random, "corrupted")}


def damaged(names: list[str]) -> Iterator[tuple[str, str, Mutation, str]]:
    """(what, file name, mutation, what the message must say) for every file and every kind of damage."""
    for name in names:
        for kind, (mutate, says) in DAMAGE.items():
            yield f"{name} {kind}", name, (lambda folder, m=mutate, n=name: m(folder / n)), says


def edit_json(name: str, change: Callable[[dict], None]) -> Mutation:
    def mutate(folder: Path) -> None:
        record = json.loads((folder / name).read_text())
        change(record)
        (folder / name).write_text(json.dumps(record))
    return mutate


def marker_variants(marker: str) -> list[tuple[str, str, Mutation, str]]:
    """What any marker (a folder's record of its files) may suffer: a field of another type, another version, its
    file list gone, an entry's sha256 changed, an entry naming a file outside the folder."""
    changes = [("rows a string", lambda m: m.update(rows="40"), "field 'rows' is \"40\"; expected an integer"),
               ("another version", lambda m: m.update(version=7), "version 7"),
               ("no file list", lambda m: m.pop("files"), "field 'files' is missing"),
               ("a sha256 changed", lambda m: m["files"][1].update(sha256="0" * 64), "corrupted"),
               ("a file outside the folder", lambda m: m["files"][0].update(file="../x"), "not a name inside")]
    return [(f"{marker}: {what}", marker, edit_json(marker, change), says) for what, change, says in changes]


def resealed(name: str, change: Callable[[np.ndarray], np.ndarray]) -> Mutation:
    """A shard rewritten AND its manifest entry updated to match (as a writer of bad vectors would leave it): what
    the checks of the values themselves must catch."""
    def mutate(folder: Path) -> None:
        np.save(folder / name, change(np.load(folder / name)))
        manifest = json.loads((folder / "manifest.json").read_text())
        data = (folder / name).read_bytes()
        entry = {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        manifest["files"] = [entry if e["file"] == name else e for e in manifest.get("files", [])]
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return mutate


def _nan_row(a: np.ndarray) -> np.ndarray:
    a[3] = np.nan
    return a


def _inf_value(a: np.ndarray) -> np.ndarray:
    a[7, 5] = np.inf
    return a


def _negated_row(folder: Path) -> None:  # the report's altered shard: a finite change, manifest untouched
    a = np.load(folder / "shard-00000.npy")
    a[0] = -a[0]
    np.save(folder / "shard-00000.npy", a)


def _no_shards(m: dict) -> None:
    m["shards"], m["rows"], m["files"] = [], 0, []


def check_every_variant(pristine: Path, tmp_path: Path, variants: list[tuple[str, str, Mutation, str]],
                        error: type[BertkitError], open_it: Callable[[Path], object]) -> None:
    """Apply each variant to a fresh copy of `pristine`; opening it must raise `error` naming the file and saying
    what is wrong (collected, so one run lists every variant that does not hold)."""
    failures = []
    for i, (what, name, mutate, says) in enumerate(variants):
        copy = tmp_path / f"v{i}"
        shutil.copytree(pristine, copy)
        try:
            mutate(copy)
        except (KeyError, IndexError, OSError) as e:  # a folder of another layout (the code before this one)
            failures.append(f"{what}: the variant cannot be made ({type(e).__name__}: {e})")
            continue
        try:
            open_it(copy)
        except error as e:
            if name not in str(e) or says not in str(e):
                failures.append(f"{what}: {type(e).__name__}: {e} (expected {name!r} and {says!r})")
        except Exception as e:  # noqa: BLE001 (what the test is about: any other exception is a failure)
            failures.append(f"{what}: {type(e).__name__}: {e}")
        else:
            failures.append(f"{what}: accepted")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------------------------
# Embeddings folders: resume (S1, S2) and reading (S7, T3).
# ---------------------------------------------------------------------------------------------------------------


def test_embed_resume_refuses_an_input_edited_in_place(model: str, tmp_path: Path) -> None:
    """S1: the input edited in place (same size, same line count) after a kill: the resume is refused, naming
    embed.json and the input's sha256, and the folder is left as it was (no stale shard kept under a manifest)."""
    texts = sentences(40, seed=1)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n")
    out = tmp_path / "e"
    embed(source, out, model)
    as_if_killed_after_shard_2(out)
    before = files_of(out)
    size = source.stat().st_size
    source.write_text("\n".join(["x" + texts[0][1:]] + texts[1:]) + "\n")
    assert source.stat().st_size == size
    with pytest.raises(ConfigError, match=r"e/embed\.json: written by a run with other inputs .*input_sha256"):
        embed(source, out, model, resume=True)
    assert files_of(out) == before


def test_embed_resume_from_stdin_compares_each_kept_shard_with_the_rows_read(model: str, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """S2: stdin has no content to hash in advance, so a resume compares every finished shard's rows with the rows
    as they arrive: another corpus, a shorter stream or one that ends before the kept shards do is refused naming
    the shard (and the line); the same stream resumes to the bytes of a run never stopped."""
    first, other = sentences(40, seed=2), sentences(40, seed=3)
    out = tmp_path / "e"
    from_stdin(monkeypatch, first)
    embed("-", out, model)
    complete = files_of(out)
    as_if_killed_after_shard_2(out)
    killed = files_of(out)
    from_stdin(monkeypatch, other)
    with pytest.raises(CheckpointError, match=r"shard-00000\.jsonl:1: holds .* where the input \(<stdin>\) now "
                                              r"gives .*: the input changed"):
        embed("-", out, model, resume=True)
    from_stdin(monkeypatch, first[:25])  # shards 0 and 1 as before, then 5 of shard 2's 10 rows
    with pytest.raises(CheckpointError, match=r"shard-00002\.jsonl:6: holds .* now gives \(no row\)"):
        embed("-", out, model, resume=True)
    assert files_of(out) == killed  # nothing written by a refused resume
    from_stdin(monkeypatch, first)
    embed("-", out, model, resume=True)
    assert files_of(out) == complete
    from_stdin(monkeypatch, first[:30])  # every row it gives is kept, but the folder holds a fourth shard
    with pytest.raises(CheckpointError, match=r"shard-00003\.\w+: a shard past the input's end"):
        embed("-", out, model, resume=True)
    assert files_of(out) == complete  # the complete folder keeps its manifest


def test_embed_resume_computes_a_damaged_shard_again(model: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                     ) -> None:
    """A kept shard whose matrix holds NaN (or is truncated) is computed again, named in a warning: the run ends
    with the bytes of one never stopped, instead of a manifest that seals the NaN in."""
    (tmp_path / "in.txt").write_text("\n".join(sentences(40, seed=4)) + "\n")
    out = tmp_path / "e"
    embed(tmp_path / "in.txt", out, model)
    complete = files_of(out)
    as_if_killed_after_shard_2(out)
    np.save(out / "shard-00001.npy", _nan_row(np.load(out / "shard-00001.npy")))
    _truncate(out / "shard-00002.npy")
    embed(tmp_path / "in.txt", out, model, resume=True)
    assert files_of(out) == complete
    assert "shard-00001.npy: holds NaN or infinity; computing shard 1 again" in caplog.text
    assert "shard-00002.npy: cannot be read" in caplog.text


def test_every_file_of_an_embeddings_folder_is_checked_when_read(embeddings: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """S7, T3: `bertkit index` over an embeddings folder with any shard file damaged, a NaN/Inf row (even with the
    manifest updated to match), shards of another width, no shards, or a malformed manifest: a CheckpointError
    naming the file and field (exit code 1, the message, no traceback), never an index of wrong vectors."""
    shards = sorted(p.name for p in embeddings.glob("shard-*"))
    variants = list(damaged(shards))
    variants += [
        ("NaN row, manifest updated", "shard-00001.npy", resealed("shard-00001.npy", _nan_row), "NaN or infinity"),
        ("Inf value, manifest updated", "shard-00002.npy", resealed("shard-00002.npy", _inf_value),
         "NaN or infinity"),
        ("a row negated", "shard-00000.npy", _negated_row, "corrupted"),
        ("another width", "shard-00002.npy", resealed("shard-00002.npy", lambda a: a[:, :16].copy()),
         "vectors of width 16"),
        ("no shards", "manifest.json", edit_json("manifest.json", _no_shards), "lists no shards"),
        ("rows a lie", "manifest.json", edit_json("manifest.json", lambda m: m.update(rows=41)), "says 41 rows"),
        ("no settings", "manifest.json", edit_json("manifest.json", lambda m: m.pop("settings")),
         "field 'settings' is missing"),
        ("shard rows negative", "manifest.json",
         edit_json("manifest.json", lambda m: m["shards"][0].update(rows=-1)), "has -1 rows"),
        ("a shard's sha256 dropped", "manifest.json",
         edit_json("manifest.json", lambda m: m.update(files=m["files"][1:])), "lists no sha256 for shard-00000"),
    ] + marker_variants("manifest.json")

    def index_it(folder: Path) -> None:
        rc = main(["index", str(folder), "-o", str(folder.parent / f"{folder.name}-index")])
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if rc == 1:
            raise CheckpointError(err)
        assert rc == 0, err

    check_every_variant(embeddings, tmp_path, variants, CheckpointError, index_it)


# ---------------------------------------------------------------------------------------------------------------
# Index folders: an interrupted overwrite (S3), broken files (T2), a malformed index.json (T2, C1).
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def index(embeddings: Path) -> Path:
    pytest.importorskip("faiss", reason="vector indexes need faiss-cpu (pip install 'bertkit[index]')")
    from bertkit.inference.index import IndexOptions, build_index

    build_index(embeddings, embeddings.parent / "index", IndexOptions())
    return embeddings.parent / "index"


def test_an_interrupted_index_overwrite_leaves_no_index(model: str, embeddings: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """S3: `bertkit index --overwrite` stopped while writing index.faiss (after the new rows.jsonl and offsets.npy)
    leaves a folder without index.json, which search refuses, instead of new texts paired with the old vectors; the
    next build completes it, its killed writer's temporary files removed."""
    import faiss

    from bertkit.inference.index import IndexOptions, VectorIndex, build_index

    (tmp_path / "other.txt").write_text("\n".join(sentences(40, seed=5)) + "\n")
    embed(tmp_path / "other.txt", tmp_path / "other", model)
    out = tmp_path / "ix"
    build_index(tmp_path / "other", out, IndexOptions())

    def killed(*args: object) -> None:
        (out / ".index.faiss.killed.tmp").write_bytes(b"half")  # what a kill -9 leaves behind
        raise KeyboardInterrupt("killed while writing index.faiss")

    monkeypatch.setattr(faiss, "write_index", killed)
    with pytest.raises(KeyboardInterrupt):
        build_index(embeddings, out, IndexOptions(), overwrite=True)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match=r"ix: no index\.json"):
        VectorIndex(out)
    build_index(embeddings, out, IndexOptions(), overwrite=True)
    index = VectorIndex(out)
    from bertkit.inference.vector_store import Embeddings

    assert [index.row(i)["text"] for i in range(len(index))] == [r["text"] for r in Embeddings(embeddings).iter_rows()]
    assert not list(out.glob(".*.tmp"))
    index.close()


def test_every_file_of_an_index_folder_is_checked_when_opened(index: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """T2, C1: each of index.faiss, rows.jsonl and offsets.npy damaged, and index.json without options, with an
    unknown option, a kind that is not the FAISS index's, rows as a string, a width lie, no file list, another
    version: `bertkit search` fails with a CheckpointError naming the file or field (no traceback)."""
    variants = list(damaged(["index.faiss", "rows.jsonl", "offsets.npy"]))
    variants += [
        ("no options", "index.json", edit_json("index.json", lambda m: m.pop("options")),
         "field 'options' is missing"),
        ("an unknown option", "index.json", edit_json("index.json", lambda m: m["options"].update(bogus=1)),
         "unknown index options 'bogus'"),
        ("another kind", "index.json", edit_json("index.json", lambda m: m["options"].update(kind="hnsw")),
         "says kind 'hnsw'"),
        ("a width lie", "index.json", edit_json("index.json", lambda m: m.update(dim=16)), "of width 16"),
        ("version 1", "index.json", edit_json("index.json", lambda m: m.update(version=1)),
         "version 1, which records no sha256"),
    ] + marker_variants("index.json")

    def search_it(folder: Path) -> None:
        rc = main(["search", "--index", str(folder), "river bank"])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        if rc == 1:
            raise CheckpointError(captured.err)
        assert rc == 0, captured.err

    check_every_variant(index, tmp_path, variants, CheckpointError, search_it)


def test_every_kind_of_index_opens_and_refuses_a_kind_lie(embeddings: Path, tmp_path: Path) -> None:
    """The kind check knows each FAISS class a kind builds (hnsw, ivf, IVF-PQ open; each one relabelled is refused)."""
    pytest.importorskip("faiss")
    from bertkit.inference.index import IndexOptions, VectorIndex, build_index

    for kind, options in [("hnsw", IndexOptions(kind="hnsw")), ("ivf", IndexOptions(kind="ivf", nlist=4)),
                          ("ivfpq", IndexOptions(kind="ivf", nlist=4, pq_m=4, pq_bits=4))]:
        out = tmp_path / kind
        build_index(embeddings, out, options)
        VectorIndex(out).close()
        edit_json("index.json", lambda m: m["options"].update(kind="exact"))(out)
        with pytest.raises(CheckpointError, match=r"index\.faiss: a IndexIVF|index\.faiss: a IndexHNSW"):
            VectorIndex(out)


# ---------------------------------------------------------------------------------------------------------------
# Prepared pre-training data: the stored tokenizer (S8) and every file.
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    from bertkit.data.config import PretrainingDataConfig
    from bertkit.data.prepare import prepare_pretraining

    tmp = tmp_path_factory.mktemp("prepared")
    (tmp / "c.txt").write_text("".join(f"The river ran past bank {i}.\nA boat went by the field {i}.\n\n"
                                       for i in range(40)), encoding="utf-8")
    prepare_pretraining([tmp / "c.txt"], tmp / "data", tokenizer,
                        PretrainingDataConfig(layout="lines", chunk_documents=10, max_length=32))
    return tmp / "data"


def test_pretraining_data_refuses_a_swapped_tokenizer(prepared: Path, tmp_path: Path) -> None:
    """S8: the data folder's tokenizer/ replaced by another model's (bertkit-mini's): its vocabulary is not the one
    the shards' token ids were made with (index.json's vocab_sha256), also in a folder whose index.json lists no
    files (prepared before it did)."""
    from bertkit.data.dataset import PretrainingDataset
    from bertkit.pretrained import resolve_model_dir

    swapped = tmp_path / "swapped"
    shutil.copytree(prepared, swapped)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(resolve_model_dir("bertkit-mini") / name, swapped / "tokenizer" / name)
    says = r"tokenizer/vocab\.txt: not the vocabulary the shards' token ids were made with: .*vocab_sha256"
    with pytest.raises(DataError, match=says):
        PretrainingDataset(swapped)
    edit_json("index.json", lambda m: m.pop("files"))(swapped)
    with pytest.raises(DataError, match=says):
        PretrainingDataset(swapped)
    PretrainingDataset(prepared)  # the folder as prepared opens


def test_every_file_of_a_pretraining_folder_is_checked_when_opened(prepared: Path, tmp_path: Path) -> None:
    """Each shard, the stored tokenizer's files and data_config.json deleted, truncated, a byte flipped or replaced:
    a DataError naming the file (index.json, the marker, lists them all; it is itself checked by its format)."""
    from bertkit.data.dataset import PretrainingDataset

    names = sorted(str(p.relative_to(prepared)) for p in prepared.rglob("*")
                   if p.is_file() and p.name != "index.json" and not p.name.startswith("."))
    assert "data_config.json" in names and "tokenizer/tokenizer_config.json" in names
    variants = []
    for what, name, mutate, says in damaged(names):
        if name == "tokenizer/vocab.txt" and not what.endswith("deleted"):
            says = "vocab.txt"  # read as a vocabulary first: not UTF-8, or other tokens
        variants.append((what, name, mutate, says))
    variants += [("index.json deleted", "index.json", lambda f: _delete(f / "index.json"), "no index"),
                 ("index.json truncated", "index.json", lambda f: _truncate(f / "index.json"), "not valid JSON")]
    check_every_variant(prepared, tmp_path, variants, DataError, PretrainingDataset)


# ---------------------------------------------------------------------------------------------------------------
# Training checkpoints (audit): meta.json is the marker of state.pt.
# ---------------------------------------------------------------------------------------------------------------


def test_a_training_checkpoint_reads_only_the_state_its_meta_records(tmp_path: Path) -> None:
    """state.pt damaged in every way, meta.json's record of it malformed, or naming a file outside its folder
    (another checkpoint's state, loaded silently before): a CheckpointError naming state.pt or meta.json."""
    from bertkit.training.checkpoint import load_training_state, save_training_state

    root = tmp_path / "checkpoints"
    save_training_state(root / "step-2", {"weight": torch.zeros(4)}, {"global_step": 2})
    save_training_state(root / "step-4", {"weight": torch.ones(4)}, {"global_step": 4})

    def another_state(folder: Path) -> None:
        meta = json.loads((folder.parent / "step-2" / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "state_file": "../step-2/state.pt"}))

    variants = list(damaged(["state.pt"]))
    variants += [("no sha256", "meta.json", edit_json("meta.json", lambda m: m.update(state_sha256=None)),
                  "sha256 of state.pt is null"),
                 ("size a string", "meta.json", edit_json("meta.json", lambda m: m.update(state_bytes="12")),
                  "field 'bytes' is \"12\""),
                 ("another checkpoint's state", "meta.json", another_state, "not a name inside")]
    shutil.copytree(root / "step-2", tmp_path / "step-2")  # beside each copy, for the '../step-2' variant
    check_every_variant(root / "step-4", tmp_path, variants, CheckpointError, load_training_state)


# ---------------------------------------------------------------------------------------------------------------
# GLUE tables merged from another invocation: identity of starts and data (S11), malformed files (T6).
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def glue_rte(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A dry run of RTE alone (a tiny start and its random twin): its glue.json."""
    import glue_table

    out = tmp_path_factory.mktemp("glue")
    glue_table.main(["--dry-run", "--out", str(out), "--data", str(data_dir), "--tasks", "rte"])
    return out / "glue.json"


def _without_tasks(record: dict) -> dict:
    """A glue.json's report as an invocation that measured none of its tasks holds it before merging."""
    return {**record, "tasks": {}, "runs": {}, "scores": {s: {} for s in record["scores"]},
            "paired": {s: {} for s in record["paired"]}}


def test_a_glue_merge_checks_the_models_data_and_lengths_it_was_measured_with(glue_rte: Path, data_dir: Path,
                                                                              tmp_path: Path) -> None:
    """S11, T6: a glue.json measured on another model folder (the sha256 of its files), as another dry-run setting,
    at another max length, on another dev file (its sha256), or malformed (a list, no budget, no paired tests, a run
    or a score missing) is refused with a DataError naming the file and what differs; the same measurements with
    other paths (another machine) merge."""
    import glue_table

    record = json.loads(glue_rte.read_text())

    def merge(change: Callable[[dict], object]) -> list[str]:
        other = json.loads(json.dumps(record))
        changed = change(other)
        (tmp_path / "other.json").write_text(json.dumps(changed if isinstance(changed, list) else other))
        return glue_table.merge_tasks(_without_tasks(record), tmp_path / "other.json", data_dir, tmp_path / "out")

    def moved(g: dict) -> None:  # another machine: other paths, the same files
        g["starts"]["tiny"] = "/elsewhere/tiny"
        g["tasks"]["rte"]["budget"]["dev"] = "/elsewhere/rte/dev-subset.tsv"

    assert merge(moved) == ["rte"]
    refused = [
        (lambda g: g["start_sha256"].update(tiny="0" * 64), r"start 'tiny' was another model \(the sha256"),
        (lambda g: g.pop("start_sha256"), "field 'start_sha256' is missing"),
        (lambda g: g.update(dry_run=False), "dry_run False, this table's True"),
        (lambda g: g["tasks"]["rte"]["budget"].update(max_length=512), "task rte ran at max_length 512"),
        (lambda g: g["tasks"]["rte"]["data_sha256"].update(dev="0" * 64), "task rte read another dev file"),
        (lambda g: [1, 2], "expected a JSON object, found list"),
        (lambda g: g["tasks"]["rte"].pop("budget"), "no tasks.rte.budget"),
        (lambda g: g.pop("paired"), "no paired"),
        (lambda g: g["runs"]["rte"]["tiny"].clear(), "no runs.rte.tiny."),
        (lambda g: g["scores"]["tiny"]["rte"].update(score="high"), "scores.tiny.rte.score is not a number"),
    ]
    for change, says in refused:
        with pytest.raises(DataError, match=rf"other\.json: .*{says}"):
            merge(change)


def test_glue_table_merge_refuses_another_models_table_without_a_traceback(glue_rte: Path, data_dir: Path,
                                                                           tmp_path: Path) -> None:
    """S11, T6 through the script: `--merge` of a list, or of a table whose start was another model, exits with the
    message (the runs of this invocation, read back, are kept)."""
    import glue_table

    (tmp_path / "list.json").write_text("[1, 2]")
    other = json.loads(glue_rte.read_text())
    other.setdefault("start_sha256", {})["random init"] = "0" * 64
    (tmp_path / "other.json").write_text(json.dumps(other))
    args = ["--dry-run", "--out", str(glue_rte.parent), "--data", str(data_dir), "--tasks", "rte", "--merge"]
    with pytest.raises(SystemExit, match=r"--merge .*list\.json: expected a JSON object"):
        glue_table.main(args + [str(tmp_path / "list.json")])
    with pytest.raises(SystemExit, match=r"--merge .*other\.json: start 'random init' was another model"):
        glue_table.main(args + [str(tmp_path / "other.json")])
