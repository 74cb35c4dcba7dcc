"""Atomic writes: the target appears whole or not at all."""

import os

import pytest

from bertkit.errors import OutputError
from bertkit.io import atomic_open, atomic_path, atomic_write_json, atomic_write_text, make_dir


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(os.listdir(target.parent)) == ["out.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~umask)  # as open() would make it, not 0600


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.json"
    atomic_write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write('{"half": ')
            raise RuntimeError("disk full")
    assert target.read_text().strip().startswith('{\n  "a": 1')
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


def test_atomic_path_renames_only_on_success(tmp_path):
    target = tmp_path / "weights.bin"
    with pytest.raises(OSError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise OSError("no space left on device")
    assert not target.exists() and os.listdir(tmp_path) == []
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"whole")
    assert target.read_bytes() == b"whole"


def test_make_dir_errors_name_the_path(tmp_path):
    assert make_dir(tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="file: exists and is not a folder"):
        make_dir(tmp_path / "file")
    with pytest.raises(OutputError, match="file: exists and is not a folder"):
        atomic_write_text(tmp_path / "file" / "out.txt", "x")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    with pytest.raises(OutputError, match="dangling: is a link to .*missing, which does not exist"):
        make_dir(tmp_path / "dangling")


def test_cli_reports_an_unwritable_output_without_a_traceback(tmp_path, capsys):
    from bertkit.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\n" * 50)
    os.symlink(tmp_path / "tok8k", tmp_path / "tokenizer")  # a link to a folder that does not exist
    code = main(["train-tokenizer", "--vocab-size", "60", "-o", str(tmp_path / "tokenizer"), str(corpus)])
    err = capsys.readouterr().err
    assert code == 1
    assert "tokenizer: is a link to" in err and "Traceback" not in err


def test_read_json_object_names_the_file_and_what_was_expected(tmp_path) -> None:
    from bertkit.errors import CheckpointError, DataError
    from bertkit.io import read_json_object

    good, broken, listed = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    good.write_text('{"x": 1}')
    broken.write_text('{"x": ')
    listed.write_text("[1, 2]")
    assert read_json_object(good) == {"x": 1}
    with pytest.raises(CheckpointError, match=r"b\.json: not valid JSON"):
        read_json_object(broken)
    with pytest.raises(DataError, match=r"c\.json: expected a JSON object, found list"):
        read_json_object(listed, DataError)
