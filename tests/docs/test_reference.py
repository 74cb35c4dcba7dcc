"""The reference pages (docs/reference/*.md) are what the code gives (docs/reference.py), so the CLI, config and API
reference cannot drift from the code (issue 27, item 2)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)


def test_reference_pages_match_the_code() -> None:
    """`python3 docs/reference.py --check` passes on the checkout: no page was edited by hand or left stale."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "reference.py"), "--check"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_every_verb_and_option_is_in_the_cli_page() -> None:
    """Each verb of `bertkit` has a section, and each of its option strings appears in that section."""
    from bertkit.cli import build_parser

    page = reference.cli_page()
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, parser in sub.choices.items():
        start = page.index(f"## `bertkit {name}`\n")
        end = page.find("\n## ", start + 1)
        section = page[start:end if end != -1 else None]
        missing += [f"{name} {s}" for a in parser._actions for s in a.option_strings
                    if s not in ("-h", "--help") and f"`{s}`" not in section]
    assert not missing, missing


def test_a_changed_default_changes_the_config_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config field's default is read from the code: changing it changes the generated page (so --check fails)."""
    from bertkit.serve.settings import ServeSettings

    before = reference.configs_page()
    assert "| `max_batch_size` | `int` | `32` |" in before
    (field,) = [f for f in dataclasses.fields(ServeSettings) if f.name == "max_batch_size"]
    monkeypatch.setattr(field, "default", 33)
    after = reference.configs_page()
    assert "| `max_batch_size` | `int` | `33` |" in after and after.replace("`33`", "`32`", 1) == before


def test_every_task_option_is_documented() -> None:
    """Every registered task's options and settings classes have a table, with every field."""
    from bertkit.tasks import TASKS

    page = reference.configs_page()
    for task in TASKS.values():
        for cls in (task.options_class, task.settings_class):
            assert f"### `{cls.__name__}` (" in page, cls
            assert all(f"| `{f.name}` |" in page for f in dataclasses.fields(cls))
