"""The CLI's surface: every verb and its main options are there, and errors print a message, not a traceback."""

import pytest

from bertkit.cli import build_parser, main

VERBS = {
    "tokenize": ["--model", "--pairs"],
    "train-tokenizer": ["--vocab-size", "--min-frequency", "--cased", "-o"],
    "info": [],
    "convert": ["--from-hf", "--to-hf", "--out"],
    "prepare-pretraining": ["-o", "--tokenizer", "--max-length", "--dupe-factor", "--whole-word-mask"],
    "pretrain": ["--config", "--resume"],
    "finetune": ["--task", "--model", "--train", "--dev", "--output", "--epochs", "--lr", "--batch-size",
                 "--max-length", "--seed"],
    "distill": ["--teacher", "--student-layers", "--train", "--dev", "--output", "--temperature", "--alpha-ce",
                "--alpha-hard", "--alpha-cos", "--resume", "--config"],
    "evaluate": ["--model", "--input"],
    "predict": ["--model", "--input", "--output"],
    "embed": ["--model", "--pooling", "--normalize", "-o", "--resume", "--dtype", "--text-field", "--id-field",
              "--shard-size"],
    "index": ["-o", "--kind", "--hnsw-m", "--ef-search", "--nlist", "--nprobe", "--pq-m"],
    "search": ["--index", "--top-k", "--queries-file", "--model"],
    "fill-mask": ["--model", "--top-k"],
    "extract-features": ["--model", "--layers"],
    "attention": ["--model", "--pair"],
    "export-onnx": ["-o"],
    "serve": ["--model", "--host", "--port", "--index"],
    "demo": ["--quick", "--output-dir", "--seed"],
}


def _subparsers(parser):
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


def test_every_verb_and_its_main_options():
    verbs = _subparsers(build_parser())
    assert set(VERBS) <= set(verbs)
    for verb, options in VERBS.items():
        known = {s for a in verbs[verb]._actions for s in a.option_strings}
        assert set(options) <= known, f"{verb}: missing {set(options) - known}"


def test_bertkit_errors_print_one_line_without_traceback(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bertkit info: error:") and str(tmp_path / "missing") in err
    assert "Traceback" not in err


def test_no_verb_prints_help(capsys):
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_unknown_verb_is_an_argparse_error():
    with pytest.raises(SystemExit):
        main(["no-such-verb"])
