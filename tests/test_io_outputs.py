"""Outputs stay whole or absent, where they were asked for: a full disk keeps the previous file and names the one it
could not write; written files have the umask's mode; `-o` a FIFO, a device or /dev/null is written in place and a
link's target replaced with the link kept; a read-only or closed output folder is an OutputError naming it, found
before the work. (The 2026-11-24 attack report's findings #11, #12, L1 and T3.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import OutputError
from bertkit.model import BertConfig, BertForPreTraining

sys.path.insert(0, str(Path(__file__).resolve().parent / "model"))
from model_helpers import tiny_model_folder_str  # noqa: E402

SRC = Path(bertkit.__file__).resolve().parents[1]  # the code under test, for the tests that run a subprocess
# A tiny model with BERT's vocabulary size: about 4 MB of weights, more than the small disk holds.


TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


@pytest.fixture()
def small_disk(tmp_path: Path):
    """A 2 MiB tmpfs (root only; skipped with the reason elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: even if a test left a file open


# --- a full disk, file modes ------------------------------------------------------------------------------------
def test_full_disk_gives_a_named_error_and_keeps_the_previous_model(small_disk: Path) -> None:
    small = BertForPreTraining(BertConfig(**{**TINY, "vocab_size": 500}))
    small.save_pretrained(str(small_disk / "m"))
    before = (small_disk / "m" / "model.safetensors").read_bytes()
    big = BertForPreTraining(BertConfig(**TINY))  # about 4 MB of weights: does not fit
    with pytest.raises(OutputError, match=r"model\.safetensors: no space left on the device"):
        big.save_pretrained(str(small_disk / "m"))
    assert (small_disk / "m" / "model.safetensors").read_bytes() == before
    assert not [p for p in (small_disk / "m").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_full_disk_during_a_training_checkpoint(small_disk: Path) -> None:
    from bertkit.training import checkpoint as ckpt

    state = {"model": BertForPreTraining(BertConfig(**TINY)).state_dict()}
    with pytest.raises(OutputError, match=r"state\.pt: no space left on the device"):
        ckpt.save_training_state(small_disk / "checkpoints" / "step-1", state, {"step": 1})
    assert not (small_disk / "checkpoints" / "step-1").exists()


def test_saved_files_are_readable_by_others(tmp_path: Path) -> None:
    """safetensors recreates its file with mode 0600; every file bertkit writes gets the umask's mode."""
    old = os.umask(0o022)
    try:
        BertForPreTraining(BertConfig(**{**TINY, "vocab_size": 500})).save_pretrained(str(tmp_path / "m"))
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "m" / name).stat().st_mode & 0o777 == 0o644, name


def test_embed_on_a_full_disk_names_the_file(tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    """#11: numpy's errno-less `OSError: N requested and M written` is an OutputError naming the file; nothing left."""
    import bertkit.jobs.embed

    monkeypatch.setattr(bertkit.jobs.embed, "encode_texts",
                        lambda encoder, texts, config, bar: np.ones((3000, 384), np.float32))
    (tmp_path / "s.txt").write_text("the cat\n" * 3000)
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(small_disk / "full" / "e.npy"),
                 "--model", tiny_model_folder_str(tmp_path)]) == 1
    assert f"{small_disk / 'full' / 'e.npy'}: no space left on the device while writing it" in capsys.readouterr().err
    assert list((small_disk / "full").iterdir()) == []


# --- FIFOs and devices are written in place, a link's target is replaced and the link kept ---------------------
def _read_fifo_in_background(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    return reader, got


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    """L1: `-o FIFO` feeds the reader and leaves the FIFO a FIFO (atomic_open and atomic_path)."""
    from bertkit.io import atomic_path

    fifo = tmp_path / "out.npy"
    os.mkfifo(fifo)
    (tmp_path / "in.txt").write_text("the cat\n")
    reader, got = _read_fifo_in_background(fifo)
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", tiny_model_folder_str(tmp_path),
                 "-o", str(fifo)]) == 0
    reader.join(10)
    assert json.loads(got[0])["input_ids"][0] == 2  # [CLS]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    reader, got = _read_fifo_in_background(fifo)
    with atomic_path(fifo) as tmp:  # a writer that wants a file name: written elsewhere, then copied in
        np.save(tmp, np.arange(4))
    reader.join(10)
    assert got[0].startswith(b"\x93NUMPY") and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "m", "out.npy"]


def test_a_symlink_stays_and_its_target_is_replaced(tmp_path: Path) -> None:
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


def test_a_character_device_is_written_in_place(tmp_path: Path) -> None:
    """L1: a device node (here our own copy of /dev/null, c 1 3) stays a device; the bytes go to the device."""
    from bertkit.io import atomic_path

    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    (tmp_path / "s.txt").write_text("the cat sat\n")
    assert main(["embed", str(tmp_path / "s.txt"), "-o", str(device), "--model", tiny_model_folder_str(tmp_path)]) == 0
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    with atomic_path(device) as tmp:
        torch.save({"x": torch.ones(3)}, tmp)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "null", "s.txt"]


def test_dev_null_itself_stays_a_device(tmp_path: Path) -> None:
    """L1: `-o /dev/null` as root. Run in a private mount namespace with its own /dev, so that code which replaces
    the target (the old code did) damages only that namespace's /dev/null, never the machine's."""
    (tmp_path / "s.txt").write_text("the cat sat\n")
    script = (f"mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/urandom c 1 9 && "
              f"{sys.executable} -m bertkit tokenize {tmp_path / 's.txt'} --model {tiny_model_folder_str(tmp_path)} "
              "-o /dev/null && stat -c %F /dev/null && ls -A /dev")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    if done.returncode != 0 and ("unshare" in done.stderr or "mount" in done.stderr):
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["character", "special", "file", "null", "urandom"]


# --- an unwritable output location is an OutputError naming it, found before the work --------------------------
@pytest.fixture()
def read_only_dir(small_disk: Path) -> Path:
    """The small tmpfs remounted read-only: writes fail with EROFS even for root."""
    done = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs read-only here: {done.stderr.decode().strip()}")
    return small_disk


def test_embed_checks_its_output_location_before_computing(
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


def test_a_read_only_output_folder_is_an_output_error(read_only_dir: Path) -> None:
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


def test_permission_bits_as_a_user_without_override(tmp_path: Path) -> None:
    """T3: the same with permission bits (EACCES): root without CAP_DAC_OVERRIDE obeys a 0555 folder like any user,
    so `bertkit embed` and the folder lock meet a real PermissionError."""
    folder = Path(tiny_model_folder_str(tmp_path))
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
