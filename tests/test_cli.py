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
    "search": ["--index", "--top-k", "--queries-file", "--model", "--rerank", "--rerank-top"],
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


def _run(*code: str) -> str:
    """A fresh interpreter's output (what a user's shell gets: nothing imported beforehand)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, check=True).stdout


def test_top_level_help_builds_no_verb_and_imports_no_torch():
    """`bertkit --help` lists every verb from the VERBS table without importing a verb's module (or torch)."""
    out = _run("import sys, contextlib, io",
               "from bertkit.cli import main",
               "buf = io.StringIO()",
               "with contextlib.redirect_stdout(buf):",
               "    try: main(['--help'])",
               "    except SystemExit: pass",
               "print(sorted(m for m in sys.modules if m.startswith(('torch', 'numpy', 'bertkit.cli.', 'bertkit.jobs'))))",
               "print(buf.getvalue())")
    imported, text = out.split("\n", 1)
    assert imported == "[]", imported
    for verb in VERBS:
        assert f"    {verb} " in text or f"    {verb}\n" in text, verb


def test_a_verb_is_built_alone():
    """Running one verb builds its parser only: the other verbs are listed, their modules not imported."""
    out = _run("import sys", "from bertkit.cli import build_parser", "build_parser('tokenize')",
               "print(sorted(m for m in sys.modules if m.startswith('bertkit.cli.')))")
    assert out.strip() == "['bertkit.cli.config_options', 'bertkit.cli.tokenize']", out


def test_help_shows_one_spelling_per_option_with_its_type_and_default(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.startswith("  --")]
    assert any(line.split()[:2] == ["--lr", "FLOAT"] and "(default 0.0001)" in line for line in lines), lines
    assert not any("--training.lr" in line or "--max_steps" in line for line in lines)
    assert any(line.split()[:2] == ["--model-overrides", "MAP"] for line in lines)
    assert "VALUE" not in text
    parser = _subparsers(build_parser("pretrain"))["pretrain"]  # the other spellings are still taken
    for spelling in ("--lr", "--training.lr"):
        assert vars(parser.parse_args([spelling, "2e-4"]))["override:training.lr"] == 2e-4
    for spelling in ("--max-steps", "--max_steps", "--training.max-steps", "--training.max_steps"):
        assert vars(parser.parse_args([spelling, "7"]))["override:training.max_steps"] == 7


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verbs_help_fits_on_a_screenful_or_two(verb, capsys):
    """Under 120 lines each (finetune's was 311); --help-all has every option's whole text."""
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    short = capsys.readouterr().out
    assert len(short.splitlines()) < 120, (verb, len(short.splitlines()))
    with pytest.raises(SystemExit):
        main([verb, "--help-all"])
    full = capsys.readouterr().out
    assert len(full) >= len(short)


def test_a_misspelt_option_gets_the_verbs_usage_and_the_nearest_name(capsys):
    with pytest.raises(SystemExit) as e:
        main(["finetune", "--lrr", "3e-5"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("usage: bertkit finetune") and "unrecognized arguments: --lrr 3e-5; did you mean --lr?" in err


def test_a_misspelt_verb_gets_the_nearest_verb(capsys):
    with pytest.raises(SystemExit):
        main(["fintune"])
    assert "did you mean finetune?" in capsys.readouterr().err


def test_version(capsys):
    import bertkit

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"bertkit {bertkit.__version__}"
