"""The CLI starts light: `bertkit --help` and `bertkit VERB --help`, for every verb of the CLI's own table
(`bertkit.cli.VERBS`), run in a fresh interpreter without importing torch or another heavy package (STYLE.md: "the
CLI's `--help` does not import torch"); the verb's options come from its config dataclasses, which import none."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bertkit.cli import VERBS

# What a verb's help must not pay for: torch and the packages built on it or beside it (numpy is allowed).
HEAVY = ("torch", "faiss", "transformers", "sentence_transformers", "safetensors", "tokenizers", "huggingface_hub",
         "fastapi", "starlette", "uvicorn", "prometheus_client", "onnx", "onnxruntime", "scipy", "sklearn",
         "matplotlib", "pandas", "pyarrow")

CHILD = """
import contextlib, io, json, runpy, sys
sys.argv = ["bertkit", *{args!r}]
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("bertkit", run_name="__main__")
    except SystemExit as e:
        code = e.code
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
print(json.dumps({{"code": code, "heavy": heavy, "help": out.getvalue()}}))
"""


def run_help(*args: str) -> dict:
    """`bertkit ARGS` as a user's shell runs it (`python -m bertkit`, nothing imported before): its exit code, the
    heavy packages it imported and the help it printed."""
    done = subprocess.run([sys.executable, "-c", CHILD.format(args=list(args), heavy=HEAVY)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_verbs_help_imports_no_torch_nor_other_heavy_package(verb: str) -> None:
    result = run_help(verb, "--help")
    assert result["code"] == 0
    assert result["help"].startswith(f"usage: bertkit {verb}"), result["help"][:200]
    assert result["heavy"] == [], f"bertkit {verb} --help imported {result['heavy']}"


def test_top_level_help_lists_every_verb_of_the_table_in_order_and_imports_nothing_heavy() -> None:
    result = run_help("--help")
    assert result["code"] == 0 and result["heavy"] == [], result["heavy"]
    listed = re.findall(r"^    (\S+)", result["help"], re.MULTILINE)
    assert [name for name in listed if name in VERBS] == list(VERBS)
    for verb, (_, text) in VERBS.items():  # each with the table's one-line help beside it (or on the next line)
        assert re.search(rf"^    {re.escape(verb)}\s+{re.escape(text.split()[0])} ", result["help"], re.MULTILINE), verb
