"""The documentation site builds with `mkdocs build --strict` (issue 27, item 5): a broken link, a missing page or a
page left out of the nav fails the suite. Needs the docs extra (`pip install -e ".[docs]"`, part of `.[test]`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the project folder into `site`, offline."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(project / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env=env, timeout=300)


def test_site_builds_strictly(tmp_path: Path) -> None:
    """The checkout's docs build without a warning, and every page of the nav is in the site."""
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "guide/embeddings.html", "guide/pretraining.html", "guide/finetuning.html",
                 "guide/serving.html", "reference/cli.html", "reference/configs.html", "reference/api.html",
                 "results/index.html", "results/pretraining-ladder-epyc-avx2-h100-2026-11-24.html", "design.html"):
        assert (tmp_path / "site" / page).is_file(), page
    ladder = (tmp_path / "site" / "results" / "pretraining-ladder-epyc-avx2-h100-2026-11-24.html").read_text()
    assert "<table>" in ladder and "+3.50" in ladder


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """A link to a page that does not exist makes the strict build fail, naming it."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    guide = project / "docs" / "guide" / "embeddings.md"
    guide.write_text(guide.read_text() + "\nSee [the missing page](missing-page.md).\n")
    done = build(project, tmp_path / "site")
    assert done.returncode != 0
    assert "missing-page.md" in done.stdout + done.stderr


def test_the_home_page_tour_is_the_readmes() -> None:
    """docs/index.md shows the README's five-minute tour with its blocks skipped (the code-block test runs them in
    README.md): the two must hold the same commands, so the site's copy cannot drift."""
    import re

    def tour_blocks(text: str) -> list[str]:
        tour = text[text.index("## A five-minute tour"):text.index("## Measured results")]
        return re.findall(r"^```\w+\n(.*?)^```$", tour, re.M | re.S)

    readme = tour_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    home = tour_blocks((ROOT / "docs" / "index.md").read_text(encoding="utf-8"))
    assert len(readme) >= 4 and home == readme
