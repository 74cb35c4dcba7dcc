"""Attack round 2 (issue 24), model folders, outputs and the frozen-NER feature cache: H4, N9, L1, T3, #11, C4, N5,
H5, T4, C8. Each test fails on the code before the fix and names the finding it covers."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import CheckpointError, ConfigError, OutputError
from bertkit.model import BertConfig, BertModel
from test_disk_and_files import small_disk  # noqa: F401 (a fixture: a 2 MiB tmpfs)

SRC = Path(bertkit.__file__).resolve().parents[1]  # the code under test, for the tests that run a subprocess
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the cat dog sat on mat is was good bad film movie very not and of to it this".split()


def _vocab() -> str:
    tokens = SPECIAL + WORDS + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"w{i}" for i in range(TINY["vocab_size"] - len(tokens))]
    return "".join(t + "\n" for t in tokens)


def _folder(tmp_path: Path, name: str = "m") -> Path:
    """A tiny BertModel folder with a vocabulary, as `save_pretrained` writes it (model.safetensors)."""
    folder = tmp_path / name
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY)).save_pretrained(str(folder))
    (folder / "vocab.txt").write_text(_vocab())
    return folder


def _folder_str(tmp_path: Path) -> str:
    """tmp_path/m, made by `_folder` on first use."""
    folder = tmp_path / "m"
    return str(folder if folder.is_dir() else _folder(tmp_path))


def _edit_config(folder: Path, **changes: object) -> None:
    d = json.loads((folder / "config.json").read_text())
    d.update(changes)
    (folder / "config.json").write_text(json.dumps(d))


# ---------------------------------------------------------------------------------------------------------------
# H4: size lies in config.json are refused from the safetensors header, before the model is built.
# ---------------------------------------------------------------------------------------------------------------


def _forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on fail if anything constructs an embedding table: the check must come before the model is built."""

    class Built(torch.nn.Embedding):
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError(f"a model was built (nn.Embedding{args}) before the config was checked")

    monkeypatch.setattr(torch.nn, "Embedding", Built)


def _as_shards(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(folder / shard))
    index = {"weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()


def _as_bin(folder: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize("field, value, shape", [
    ("vocab_size", 3_000_000, "(99, 32)"),
    ("num_hidden_layers", 10_000, "2 encoder layers"),
    ("intermediate_size", 100_000_000, "(37, 32)"),
    ("max_position_embeddings", 100_000_000, "(512, 32)"),
    ("type_vocab_size", 100_000_000, "(2, 32)"),
])
def test_h4_config_sizes_are_checked_against_the_header_before_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: int, shape: str) -> None:
    """H4: a size in config.json that the weights contradict fails at once, naming the field, the config's value
    and the weights' shape, without building (allocating) the model first."""
    folder = _folder(tmp_path)
    _edit_config(folder, **{field: value})
    _forbid_building(monkeypatch)
    started = time.perf_counter()
    with pytest.raises((CheckpointError, ConfigError)) as e:
        BertModel.from_pretrained(str(folder))
    assert time.perf_counter() - started < 1.0
    message = str(e.value)
    if "expected an integer" in message:  # beyond the field's declared range: refused before the weights are read
        assert f"{folder / 'config.json'}: BertConfig.{field}: expected an integer >= 1 and <= " in message
        assert message.endswith(f"found {value}")
        return
    assert f"{folder / 'config.json'}: {field} is {value}" in message
    assert shape in message and "model.safetensors" in message


@pytest.mark.parametrize("layout", [_as_shards, _as_bin])
def test_h4_sharded_and_bin_folders_are_checked_before_building(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout) -> None:  # noqa: ANN001
    """H4: the same for a sharded safetensors folder (every shard's header) and a pytorch_model.bin (its tensors,
    memory-mapped, give the shapes)."""
    folder = _folder(tmp_path)
    layout(folder)
    _edit_config(folder, vocab_size=3_000_000)
    _forbid_building(monkeypatch)
    with pytest.raises(CheckpointError, match=r"vocab_size is 3000000, which does not match .*'embeddings\."
                                              r"word_embeddings\.weight': shape \(99, 32\) in the file"):
        BertModel.from_pretrained(str(folder))


def test_h4_a_good_folder_still_loads(tmp_path: Path) -> None:
    """H4: the check refuses nothing that matches, in any of the three layouts."""
    reference = BertModel.from_pretrained(str(_folder(tmp_path, "a")))
    for name, layout in (("b", _as_shards), ("c", _as_bin)):
        folder = _folder(tmp_path, name)
        layout(folder)
        model = BertModel.from_pretrained(str(folder))
        assert model.load_report.complete
        for (k, v), (_, w) in zip(model.state_dict().items(), reference.state_dict().items()):
            assert torch.equal(v, w), k


# ---------------------------------------------------------------------------------------------------------------
# N9: numeric config fields that make no sense are refused, naming the field.
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("layer_norm_eps", -1.0), ("layer_norm_eps", 0), ("layer_norm_eps", float("nan")),
    ("hidden_dropout_prob", "0.1"), ("attention_probs_dropout_prob", None), ("classifier_dropout", 1.5),
    ("initializer_range", -0.02), ("initializer_range", float("nan")), ("num_labels", 0), ("vocab_size", True),
    ("pad_token_id", 500), ("alibi", "false"),
])
def test_n9_config_values_that_make_no_sense_name_the_field(field: str, value: object) -> None:
    """N9: every numeric field is checked for range and finiteness (and a bool for its type)."""
    with pytest.raises(ConfigError, match=rf"m/config\.json: BertConfig\.{field}: expected"):
        BertConfig.from_dict({**TINY, field: value}, "m/config.json")


def test_n9_embed_refuses_a_negative_layer_norm_eps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """N9: `bertkit embed` with layer_norm_eps -1 stops with the field named instead of writing NaN with rc 0."""
    folder = _folder(tmp_path)
    _edit_config(folder, layer_norm_eps=-1.0)
    (tmp_path / "s.txt").write_text("the cat sat on the mat\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder)]) == 1
    assert "BertConfig.layer_norm_eps: expected a number > 0 and <= 0.001" in capsys.readouterr().err
    assert not (tmp_path / "e.npy").exists()


def test_n9_embed_never_writes_non_finite_embeddings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """N9: whatever makes a model compute NaN (here a weight), embed refuses to write the matrix."""
    from safetensors.torch import load_file, save_file

    folder = _folder(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    state["encoder.layer.1.output.dense.bias"][0] = float("nan")
    save_file(state, str(folder / "model.safetensors"))
    (tmp_path / "s.txt").write_text("the cat\nthe dog\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder),
                 "--precision", "fp32"]) == 1
    err = capsys.readouterr().err
    assert "non-finite values (NaN or infinity) for 2 of 2 lines" in err and "s.txt:1" in err
    assert not (tmp_path / "e.npy").exists()


# ---------------------------------------------------------------------------------------------------------------
# L1: FIFOs and devices are written in place, a link's target is replaced and the link kept.
# ---------------------------------------------------------------------------------------------------------------


def _read_fifo_in_background(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    return reader, got


def test_l1_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    """L1: `-o FIFO` feeds the reader and leaves the FIFO a FIFO (atomic_open and atomic_path)."""
    from bertkit.io import atomic_path

    fifo = tmp_path / "out.npy"
    os.mkfifo(fifo)
    (tmp_path / "in.txt").write_text("the cat\n")
    reader, got = _read_fifo_in_background(fifo)
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", _folder_str(tmp_path), "-o", str(fifo)]) == 0
    reader.join(10)
    assert json.loads(got[0])["input_ids"][0] == 2  # [CLS]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    reader, got = _read_fifo_in_background(fifo)
    with atomic_path(fifo) as tmp:  # a writer that wants a file name: written elsewhere, then copied in
        np.save(tmp, np.arange(4))
    reader.join(10)
    assert got[0].startswith(b"\x93NUMPY") and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "m", "out.npy"]


def test_l1_a_symlink_stays_and_its_target_is_replaced(tmp_path: Path) -> None:
    """L1: through a link, the file it points to gets the output (atomically); the link itself stays a link."""
    from bertkit.io import atomic_path, atomic_write_text

    target = tmp_path / "real" / "out.txt"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "new\n"
    with atomic_path(link) as tmp:
        tmp.write_text("by path\n")
    assert link.is_symlink() and target.read_text() == "by path\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]  # no temporary file left
    # a link to standard output: a pipe here, written in place
    read_end, write_end = os.pipe()
    stdout = tmp_path / "stdout"
    stdout.symlink_to(f"/proc/self/fd/{write_end}")
    atomic_write_text(stdout, "to the pipe\n")
    os.close(write_end)
    assert os.read(read_end, 100) == b"to the pipe\n" and stdout.is_symlink()
    os.close(read_end)


def test_l1_a_character_device_is_written_in_place(tmp_path: Path) -> None:
    """L1: a device node (here our own copy of /dev/null, c 1 3) stays a device; the bytes go to the device."""
    from bertkit.io import atomic_path

    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    (tmp_path / "s.txt").write_text("the cat sat\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(device), "--model", _folder_str(tmp_path)]) == 0
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    with atomic_path(device) as tmp:
        torch.save({"x": torch.ones(3)}, tmp)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "null", "s.txt"]


def test_l1_dev_null_itself_stays_a_device(tmp_path: Path) -> None:
    """L1: `-o /dev/null` as root. Run in a private mount namespace with its own /dev, so that code which replaces
    the target (the old code did) damages only that namespace's /dev/null, never the machine's."""
    (tmp_path / "s.txt").write_text("the cat sat\n")
    script = (f"mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/urandom c 1 9 && "
              f"{sys.executable} -m bertkit tokenize {tmp_path / 's.txt'} --model {_folder_str(tmp_path)} "
              "-o /dev/null && stat -c %F /dev/null && ls -A /dev")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    if done.returncode != 0 and ("unshare" in done.stderr or "mount" in done.stderr):
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["character", "special", "file", "null", "urandom"]


# ---------------------------------------------------------------------------------------------------------------
# T3: an unwritable output location is an OutputError naming it, found before the work.
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def read_only_dir(small_disk: Path) -> Path:
    """The small tmpfs remounted read-only: writes fail with EROFS even for root."""
    done = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs read-only here: {done.stderr.decode().strip()}")
    return small_disk


def test_t3_embed_checks_its_output_location_before_computing(
        tmp_path: Path, read_only_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """T3: `bertkit embed -o <read-only folder>/e.npy` stops before loading the model or computing anything."""
    import bertkit.api

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the output location was checked")

    monkeypatch.setattr(bertkit.api, "load", no_load)
    (tmp_path / "s.txt").write_text("the cat\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(read_only_dir / "e.npy"), "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert f"{read_only_dir / 'e.npy'}: cannot write into {read_only_dir} (Read-only file system)" in err


def test_t3_a_read_only_output_folder_is_an_output_error(read_only_dir: Path) -> None:
    """T3: the finetune/pretrain folder lock and every atomic writer name the folder instead of a traceback."""
    from bertkit.io import atomic_path, atomic_write_text, folder_lock

    with pytest.raises(OutputError, match=rf"{read_only_dir}: cannot write into this output folder"):
        with folder_lock(read_only_dir):
            pass
    with pytest.raises(OutputError, match=r"out\.txt: cannot write into .*\(Read-only file system\)"):
        atomic_write_text(read_only_dir / "out.txt", "x")
    with pytest.raises(OutputError, match=r"w\.bin: cannot write into .*\(Read-only file system\)"):
        with atomic_path(read_only_dir / "w.bin"):
            pass


def test_t3_permission_bits_as_a_user_without_override(tmp_path: Path) -> None:
    """T3: the same with permission bits (EACCES): root without CAP_DAC_OVERRIDE obeys a 0555 folder like any user,
    so `bertkit embed` and the folder lock meet a real PermissionError."""
    folder = Path(_folder_str(tmp_path))
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o555)
    (tmp_path / "s.txt").write_text("the cat\n")
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    probe = subprocess.run([*drop, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.strip()}")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    code = ("import sys\nfrom bertkit.cli import main\nfrom bertkit.errors import OutputError\n"
            "from bertkit.io import folder_lock\n"
            f"rc = main(['embed', {str(tmp_path / 's.txt')!r}, '-o', {str(closed / 'e.npy')!r}, '--model', "
            f"{str(folder)!r}])\n"
            "try:\n"
            f"    with folder_lock({str(closed)!r}): pass\n"
            "except OutputError as e: print('lock:', e, file=sys.stderr)\n"
            "sys.exit(rc)\n")
    done = subprocess.run([*drop, sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{closed / 'e.npy'}: cannot write into {closed} (Permission denied)" in done.stderr
    assert "precision:" not in done.stderr  # refused before the model was loaded
    assert f"lock: {closed}: cannot write into this output folder (Permission denied)" in done.stderr


# ---------------------------------------------------------------------------------------------------------------
# #11: embed onto a full disk.
# ---------------------------------------------------------------------------------------------------------------


def test_11_embed_on_a_full_disk_names_the_file(tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    """#11: numpy's errno-less `OSError: N requested and M written` is an OutputError naming the file; nothing left."""
    import bertkit.jobs.embed

    monkeypatch.setattr(bertkit.jobs.embed, "encode_texts",
                        lambda encoder, texts, config, bar: np.ones((3000, 384), np.float32))
    (tmp_path / "s.txt").write_text("the cat\n" * 3000)
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(small_disk / "full" / "e.npy"),
                 "--model", _folder_str(tmp_path)]) == 1
    assert f"{small_disk / 'full' / 'e.npy'}: no space left on the device while writing it" in capsys.readouterr().err
    assert list((small_disk / "full").iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# C4: every verb that takes a model folder takes a shipped model's name.
# ---------------------------------------------------------------------------------------------------------------


def test_c4_every_verb_resolves_shipped_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """C4: `info`, `tokenize`, `convert --from-hf` accept bertkit-mini as embed and finetune do; a name that names
    nothing says what it could have been (tests/pretrained/test_hub_names.py: Hub ids)."""
    (tmp_path / "in.txt").write_text("the cat sat\n")
    assert main(["info", "bertkit-mini"]) == 0
    assert "class:       BertForPreTraining" in capsys.readouterr().out
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", "bertkit-mini", "-o", str(tmp_path / "t.jsonl")]) == 0
    assert json.loads((tmp_path / "t.jsonl").read_text())["input_ids"][0] == 2
    assert main(["convert", "--from-hf", "bertkit-mini", "--out", str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "vocab.txt").is_file()
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", "bertkit-maxi"]) == 1
    assert ("bertkit-maxi: no such model folder, nor a shipped model's name (bertkit-mini), nor a Hugging Face Hub "
            "model in the cache") in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# N5, H5, T4: the frozen-NER feature cache.
# ---------------------------------------------------------------------------------------------------------------


def _frozen_head(**config: object):  # noqa: ANN202 (BertForFrozenTokenClassification)
    from bertkit.model.heads import BertForFrozenTokenClassification

    torch.manual_seed(0)
    settings = {"frozen_features": "last", "tagger": "linear"}
    return BertForFrozenTokenClassification(BertConfig(**{**TINY, **config}, task_settings=settings)).eval()


def _features(n: int = 6) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input_ids": [2, *rng.integers(5, 99, size=3 + i % 5).tolist(), 3], "token_type_ids": [0] * (5 + i % 5)}
            for i in range(n)]


def test_n5_the_cache_key_covers_the_config(tmp_path: Path) -> None:
    """N5: the same weights with another activation are another encoder: another cache file, other features."""
    from bertkit.tasks.feature_cache import CACHED_KEY, cache_key, with_cached_layers

    gelu = _frozen_head()
    relu = _frozen_head(hidden_act="relu")
    relu.load_state_dict(gelu.state_dict())
    features = _features()
    assert cache_key(gelu, features) != cache_key(relu, features)
    a = with_cached_layers(gelu, features, tmp_path)
    b = with_cached_layers(relu, features, tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    assert not np.allclose(np.asarray(a[0][CACHED_KEY][:, -1]), np.asarray(b[0][CACHED_KEY][:, -1]))
    other_tagger = _frozen_head()  # the head's own settings do not change the features: the file is shared
    other_tagger.config.task_settings = {"frozen_features": "weighted_sum", "tagger": "bilstm"}
    other_tagger.config.num_labels = 5
    assert cache_key(other_tagger, features) == cache_key(gelu, features)


def _damage_zeroed(path: Path) -> None:
    with open(path, "r+b") as f:  # zeroed in place: same size, same header
        f.seek(128)
        f.write(bytes(path.stat().st_size - 128))


def _damage_truncated(path: Path) -> None:
    os.truncate(path, 200)


def _damage_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _damage_object_array(path: Path) -> None:
    np.save(path, np.array([{"x": 1}], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("damage", [_damage_zeroed, _damage_truncated, _damage_garbage, _damage_object_array])
def test_n5_t4_a_damaged_cache_file_is_computed_again(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      damage) -> None:  # noqa: ANN001
    """N5 / T4: a cache file zeroed in place, truncated, replaced by garbage or by an object array is not used
    (silently, or with a ValueError traceback): its sha256 no longer matches its record, so it is computed again
    with a warning naming the file; the features equal the first ones."""
    from bertkit.tasks.feature_cache import CACHED_KEY, with_cached_layers

    head, features = _frozen_head(), _features()
    first = [np.array(f[CACHED_KEY]) for f in with_cached_layers(head, features, tmp_path)]
    (path,) = tmp_path.glob("*.npy")
    damage(path)
    with caplog.at_level(logging.WARNING, logger="bertkit.tasks.feature_cache"):
        again = with_cached_layers(head, features, tmp_path)
    assert f"{path}: damaged cache file" in caplog.text and "computing the features again" in caplog.text
    for f, expected in zip(again, first):
        np.testing.assert_array_equal(np.asarray(f[CACHED_KEY]), expected)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bertkit.tasks.feature_cache"):
        with_cached_layers(head, features, tmp_path)  # intact again: reused
    assert "reusing the cached encoder features" in caplog.text and "damaged cache file" not in caplog.text


def test_h5_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    """H5: a temporary cache file left by a killed run (kill -9: unlocked, not fresh) is removed by the next run;
    one a live run is writing (it holds the file's lock) is left alone, so two runs can share one cache."""
    import fcntl

    from bertkit.tasks.feature_cache import with_cached_layers

    head, features = _frozen_head(), _features()
    dead = tmp_path / f".{'a' * 64}.npy.x1y2z3.tmp"
    live = tmp_path / f".{'b' * 64}.npy.q7r8s9.tmp"
    other = tmp_path / ".notes.tmp"  # not a cache file's name: not ours to remove
    for p in (dead, live, other):
        p.write_bytes(b"\0" * 4096)
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with_cached_layers(head, features, tmp_path)
        assert not dead.exists() and live.exists() and other.exists()


_SIGTERM_SCRIPT = """
import sys, time
import numpy as np, torch
from bertkit.errors import Interrupted
from bertkit.model import BertConfig
from bertkit.model.heads import BertForFrozenTokenClassification
from bertkit.tasks import feature_cache

forward = feature_cache._LayerFeatures.forward
def slow(self, *args, **kwargs):
    time.sleep(0.2)
    return forward(self, *args, **kwargs)
feature_cache._LayerFeatures.forward = slow
head = BertForFrozenTokenClassification(BertConfig(**{tiny}, task_settings={{"frozen_features": "last"}}))
features = [{{"input_ids": [2, 7, 8, 3], "token_type_ids": [0] * 4}} for _ in range(64 * 100)]
print("encoding", flush=True)
try:
    feature_cache.with_cached_layers(head, features, sys.argv[1])
except Interrupted as e:
    print(e, file=sys.stderr)
    sys.exit(128 + e.signal)
"""


def test_h5_sigterm_during_encoding_removes_the_temporary_file(tmp_path: Path) -> None:
    """H5: SIGTERM while the cache is being encoded stops with exit code 143 and a message, leaving no file."""
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_SCRIPT.format(tiny=TINY), str(cache)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        deadline = time.time() + 60
        while not list(cache.glob(".*.tmp")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert list(cache.glob(".*.tmp")), "the encoding never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "stopped by signal 15 while encoding the frozen features; the partial cache file was removed" in err
    assert list(cache.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# C8: an integer tensor for a float parameter; unknown config keys; empty lines in embed.
# ---------------------------------------------------------------------------------------------------------------


def _relabel_dtype(path: Path, tensor: str, dtype: str) -> None:
    """Change one tensor's dtype in a safetensors header (same item size, so the byte ranges stay valid)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header[tensor]["dtype"] = dtype
    new = json.dumps(header, separators=(",", ":")).encode()
    assert len(new) <= n
    path.write_bytes(data[:8] + new + b" " * (n - len(new)) + data[8 + n:])


def test_c8_an_integer_tensor_for_a_float_parameter_is_refused(tmp_path: Path) -> None:
    """C8: a tensor relabelled I32 in the header was converted value by value into a float parameter."""
    folder = _folder(tmp_path)
    _relabel_dtype(folder / "model.safetensors", "embeddings.word_embeddings.weight", "I32")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: 'embeddings\.word_embeddings\.weight' is stored "
                                              r"as torch\.int32: expected a floating-point type"):
        BertModel.from_pretrained(str(folder))


def test_c8_config_keys_for_architectures_bertkit_lacks_are_refused(tmp_path: Path) -> None:
    """C8: rotary embeddings, relative positions or a decoder would compute something else: refused, named."""
    folder = _folder(tmp_path)
    for key, value in (("rotary_embeddings", True), ("rotary_emb_base", 10000), ("rope_theta", 10000.0),
                       ("position_embedding_type", "relative_key"), ("is_decoder", True)):
        _edit_config(folder, **{key: value})
        with pytest.raises(CheckpointError, match=rf"config\.json: {key}"):
            BertModel.from_pretrained(str(folder))
        d = json.loads((folder / "config.json").read_text())
        del d[key]
        (folder / "config.json").write_text(json.dumps(d))
    BertModel.from_pretrained(str(folder))


def test_c8_unknown_keys_warn_once_in_a_bertkit_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """C8: an unknown key in a folder bertkit wrote (bertkit_version: "99.0") is named in one warning; the
    harmless extras of a Hugging Face config (use_cache, transformers_version, ...) pass quietly."""
    folder = _folder(tmp_path)
    _edit_config(folder, bertkit_version="99.0")
    with caplog.at_level(logging.WARNING):
        BertModel.from_pretrained(str(folder))
        BertModel.from_pretrained(str(folder))
    warnings = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(warnings) == 1 and "bertkit_version" in warnings[0] and str(folder / "config.json") in warnings[0]
    caplog.clear()
    hf = {"architectures": ["BertModel"], "model_type": "bert", "use_cache": True, "gradient_checkpointing": False,
          "transformers_version": "4.40.0", "torch_dtype": "float32", "rope_scaling": None, **TINY}
    with caplog.at_level(logging.WARNING):
        config = BertConfig.from_dict(hf, "hf/config.json")
    assert config.hidden_size == 32 and "does not know" not in caplog.text


def test_c8_embed_keeps_empty_lines_like_the_api(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """C8: the CLI embeds an empty line as the empty text, as `encode([""])` does, so row i is line i; a warning
    names the lines (refusing them made the CLI and the API disagree, dropping them would shift every row)."""
    folder = _folder_str(tmp_path)
    lines = ["the cat sat", "", "a good film", "   "]
    (tmp_path / "s.txt").write_text("\n".join(lines) + "\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(tmp_path / "e.npy"), "--model", folder,
                 "--precision", "fp32"]) == 0
    assert "2 empty line(s) (2, 4), each kept as the empty text" in capsys.readouterr().err
    matrix = np.load(tmp_path / "e.npy")
    api = bertkit.load(folder).encode(lines, precision="fp32")
    assert matrix.shape == (4, 32)
    np.testing.assert_allclose(matrix, api, atol=1e-6)
    np.testing.assert_allclose(matrix[1], bertkit.load(folder).encode("", precision="fp32"), atol=1e-6)

