"""The `tokenize` and `train-tokenizer` verbs, run through bertkit.cli.main."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import bertkit.cli
from bertkit.cli.config_options import config_from_options
from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.trainer import VocabOptions


@pytest.fixture(autouse=True)
def only_existing_verb_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other teams' CLI modules may not exist yet; register those that do (ours always does)."""
    present = [m for m in bertkit.cli.VERB_MODULES if importlib.util.find_spec(m) is not None]
    assert "bertkit.cli.tokenize" in present
    monkeypatch.setattr(bertkit.cli, "VERB_MODULES", present)


def test_verbs_and_options_are_registered() -> None:
    parser = bertkit.cli.build_parser()
    args = parser.parse_args(["tokenize", "--model", "m", "--pairs", "in.txt", "-o", "out.jsonl"])
    assert (args.model, args.pairs, args.input, args.output) == ("m", True, "in.txt", "out.jsonl")
    args = parser.parse_args(["train-tokenizer", "--vocab-size", "100", "--min-frequency", "3", "--cased",
                              "a.txt", "b.txt", "-o", "dir"])
    options = config_from_options(VocabOptions, args)
    assert (options.vocab_size, options.min_frequency, args.cased, args.files, args.output) == (
        100, 3, True, ["a.txt", "b.txt"], "dir")


def test_tokenize_lines(tmp_path: Path, vocab_dir: str) -> None:
    src = tmp_path / "in.txt"
    src.write_text("Hello, world!\n\nCafé 中文\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert bertkit.cli.main(["tokenize", "--model", vocab_dir, str(src), "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    tok = BertTokenizer.from_pretrained(vocab_dir)
    assert len(rows) == 3
    assert rows[0]["input_ids"] == tok.encode("Hello, world!").input_ids
    assert rows[0]["offsets"][1] == [0, 5] and rows[1]["input_ids"] == [tok.cls_token_id, tok.sep_token_id]
    third = tok.encode("Café 中文")  # [CLS] cafe 中 文 [SEP]: offsets into the line as written
    assert rows[2] == {"input_ids": third.input_ids, "token_type_ids": [0] * 5,
                       "offsets": [[0, 0], [0, 4], [5, 6], [6, 7], [0, 0]]}
    assert tok.convert_ids_to_tokens(third.input_ids) == ["[CLS]", "cafe", "中", "文", "[SEP]"]


def test_tokenize_pairs(tmp_path: Path, vocab_dir: str, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "pairs.tsv"
    src.write_text("a question?\tthe context\n", encoding="utf-8")
    assert bertkit.cli.main(["tokenize", "--model", vocab_dir, "--pairs", str(src)]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["token_type_ids"] == [0, 0, 0, 0, 0, 1, 1, 1]  # [CLS] a question ? [SEP] the context [SEP]


def test_pair_line_without_tab_is_an_error(tmp_path: Path, vocab_dir: str, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "pairs.tsv"
    src.write_text("a\tb\nno tab here\n", encoding="utf-8")
    assert bertkit.cli.main(["tokenize", "--model", vocab_dir, "--pairs", str(src)]) == 1
    err = capsys.readouterr().err
    assert f"{src}:2:" in err and "tab" in err


def test_missing_model_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    assert bertkit.cli.main(["tokenize", "--model", str(tmp_path / "nope"), str(src)]) == 1
    assert "nope" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert bertkit.cli.main(["tokenize", "--model", str(tmp_path / "empty"), str(src)]) == 1
    assert "vocab.txt" in capsys.readouterr().err


def test_train_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20, encoding="utf-8")
    out = tmp_path / "tok"
    assert bertkit.cli.main(["train-tokenizer", "--vocab-size", "60", "--min-frequency", "2", str(corpus),
                             "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "wordpiece merges" in err  # the tqdm bar
    tok = BertTokenizer.from_pretrained(out)
    assert tok.vocab_size <= 60 and tok.lowercase
    assert tok.tokenize("The cat") == ["the", "cat"]
    assert bertkit.cli.main(["train-tokenizer", "--vocab-size", "60", "--cased", str(corpus), "-o",
                             str(tmp_path / "cased")]) == 0
    assert not BertTokenizer.from_pretrained(tmp_path / "cased").lowercase


def test_train_tokenizer_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert bertkit.cli.main(["train-tokenizer", "--vocab-size", "60", str(tmp_path / "absent.txt"), "-o",
                             str(tmp_path / "tok")]) == 1
    assert "absent.txt" in capsys.readouterr().err


def test_train_tokenizer_refuses_a_folder_that_holds_files(tmp_path, capsys) -> None:
    """A model folder's vocab.txt must not be replaced silently: the ids would then mean other words."""
    from bertkit.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n" * 20)
    model = tmp_path / "model"
    model.mkdir()
    (model / "vocab.txt").write_text("[PAD]\nkeep\n")
    assert main(["train-tokenizer", "--vocab-size", "40", "-o", str(model), str(corpus)]) == 1
    err = capsys.readouterr().err
    assert "already holds files (vocab.txt)" in err and "--overwrite" in err
    assert (model / "vocab.txt").read_text() == "[PAD]\nkeep\n"
    assert main(["train-tokenizer", "--vocab-size", "40", "-o", str(model), str(corpus), "--overwrite"]) == 0
    assert "the" in (model / "vocab.txt").read_text().split()


def test_empty_inputs(tmp_path, capsys) -> None:
    from bertkit.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train-tokenizer", "--vocab-size", "40", "-o", str(tmp_path / "tok"), str(empty)]) == 1
    assert "no words to learn a vocabulary from" in capsys.readouterr().err
    assert not (tmp_path / "tok").exists()
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    assert main(["tokenize", "--model", str(tmp_path / "tok"), str(empty), "-o", str(tmp_path / "out.jsonl")]) == 0
    assert (tmp_path / "out.jsonl").read_text() == ""  # no lines in, no lines out
