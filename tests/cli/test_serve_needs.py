"""`bertkit serve` without a package of the serve extra says which package is missing and how to install the extra,
as one line and exit status 1 (an error of the setup, not of the command line), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN = """
import sys
sys.modules[{name!r}] = None  # as if not installed: importing it raises ImportError naming it
from bertkit.cli import main
sys.exit(main(["serve", "--model", "bertkit-mini"]))
"""


@pytest.mark.parametrize("name", ["prometheus_client", "fastapi", "uvicorn"])
def test_a_missing_serving_package_is_named_with_the_extra_to_install(name: str) -> None:
    done = subprocess.run([sys.executable, "-c", RUN.format(name=name)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{name} is not installed" in done.stderr and "pip install 'bertkit[serve]'" in done.stderr
