"""The tables of README.md and docs/ are what their JSON gives (docs/generate.py), so a figure cannot be typed by hand
(issue 27, item 3)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def test_every_generated_table_matches_its_json() -> None:
    """`python3 docs/generate.py --check` passes on the checkout: no table was edited without its JSON."""
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "generate.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def copy_of_docs(tmp_path: Path) -> Path:
    """README.md and docs/ copied into a scratch checkout."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_typed_figure_is_caught(copy_of_docs: Path) -> None:
    """Editing a figure in a generated table (here the ladder's row G gain) makes the check fail, naming the page,
    and regenerating puts the JSON's figure back."""
    page = copy_of_docs / "docs" / "results" / "pretraining-ladder-epyc-avx2-h100-2026-11-24.md"
    text = page.read_text(encoding="utf-8")
    assert "**+3.50** |" in text
    page.write_text(text.replace("**+3.50** |", "**+3.49** |"), encoding="utf-8")
    changed = list(generate.differences(copy_of_docs))
    assert [p for p, _, _ in changed] == [page]
    assert "**+3.50** |" in changed[0][2]


def test_ladder_gains_come_from_the_raw_figures() -> None:
    """Rows F and G: the raw per-seed accuracies give +0.69 and +3.50 (the README once typed +0.68 and +3.49, the
    difference of the rounded means)."""
    rows = {r["row"]: r for r in generate.Renderer().rows(
        ROOT / "docs" / "results" / "pretraining-ladder-epyc-avx2-h100-2026-11-24.json", "ladder",
        ROOT / "README.md")}
    assert f"{rows['F']['gain']:+.2f}" == "+0.69" and f"{rows['G']['gain']:+.2f}" == "+3.50"
    assert round(rows["G"]["pretrained_mean"], 2) - round(rows["G"]["random_mean"], 2) == pytest.approx(3.49)


def test_computed_fields_and_references(tmp_path: Path) -> None:
    """A table's computed fields, its rows' own figures, empty cells and a reference to another file's table."""
    (tmp_path / "a.json").write_text("""{"tables": {"t": {
        "columns": [{"title": "name", "template": "{name}"}, {"title": "mean", "template": "{mean:.2f}"},
                    {"title": "gain", "template": "{gain:+.1f}", "key": "gain"}],
        "defaults": {"base": 10},
        "computed": {"mean": ["mean", "seeds"], "gain": ["-", "mean", "base"]},
        "rows": [{"name": "x", "seeds": [11, 12], "_bold": ["gain"]}, {"name": "y", "mean": 9.0}, {"name": "z"}]}}}""")
    (tmp_path / "b.json").write_text("""{"tables": {"u": {
        "columns": [{"title": "from a", "template": "[{v:.1f}]({v_link})"}],
        "rows": [{"v": {"ref": "a.json", "table": "t", "where": {"name": "x"}, "field": "gain"}}]}}}""")
    page = tmp_path / "sub" / "page.md"
    page.parent.mkdir()
    r = generate.Renderer(tmp_path)
    assert r.render(tmp_path / "a.json", "t", page).splitlines()[2:] == [
        "| x | 11.50 | **+1.5** |", "| y | 9.00 | -1.0 |", "| z |  |  |"]
    assert r.render(tmp_path / "b.json", "u", page).splitlines()[2] == "| [1.5](../a.md) |"
    text = "<!-- table:../b.json#u -->\nstale\n<!-- /table -->\n"
    assert generate.regenerate(page, text, r) == "<!-- table:../b.json#u -->\n| from a |\n| --- |\n" \
                                                "| [1.5](../a.md) |\n<!-- /table -->\n"


def test_a_median_is_the_middle_of_the_runs(tmp_path: Path) -> None:
    """`median` (the benchmarks' usual statistic over runs), odd and even counts, and a ratio of two medians."""
    (tmp_path / "a.json").write_text("""{"tables": {"t": {
        "columns": [{"title": "m", "template": "{m}"}, {"title": "ratio", "template": "{r:.2f}"}],
        "computed": {"m": ["median", "runs"], "n": ["median", "base"], "r": ["/", "m", "n"]},
        "rows": [{"runs": [5, 1, 9, 2, 7], "base": [2, 4]}, {"runs": [4, 1, 3, 8], "base": [7]}]}}}""")
    assert generate.Renderer(tmp_path).render(tmp_path / "a.json", "t", tmp_path / "page.md").splitlines()[2:] == [
        "| 5 | 1.67 |", "| 3.5 | 0.50 |"]


def test_a_row_template_without_its_column_is_an_error(tmp_path: Path) -> None:
    """A row's own template must name a column's key: one keyed by a name no column has would leave its cells
    silently empty (the demo and serving reports' fact tables once rendered blank this way)."""
    (tmp_path / "a.json").write_text("""{"tables": {"t": {
        "columns": [{"title": "measured", "template": "{value}"}],
        "rows": [{"x": 1, "_templates": {"value": "{x}"}}]}}}""")
    with pytest.raises(generate.TableError, match=r"_templates names \['value'\], which no column has as its key"):
        generate.Renderer(tmp_path).render(tmp_path / "a.json", "t", tmp_path / "page.md")
    (tmp_path / "a.json").write_text("""{"tables": {"t": {
        "columns": [{"title": "measured", "key": "value", "template": "{value}"}],
        "rows": [{"x": 1, "_templates": {"value": "{x}"}}]}}}""")
    assert generate.Renderer(tmp_path).render(tmp_path / "a.json", "t", tmp_path / "page.md").splitlines()[2] == "| 1 |"


def test_no_session_stamps() -> None:
    """Dates live in a report's name and header, not in "session of <date>" stamps in the text."""
    stamped = [str(p.relative_to(ROOT)) for p in generate.pages()
               if re.search(r"session of|this session|previous session|last session", p.read_text(encoding="utf-8"))]
    assert not stamped, stamped


def test_no_headline_figure_reads_a_transcribed_record() -> None:
    """Every figure of the README's headline table comes from JSON a run wrote, not from a report whose JSON was
    transcribed from an earlier README (its `source` says "Transcribed"): --check cannot catch a wrong figure typed
    once into JSON. Seven rows read such JSON until 2026-11-28 (docs/results/transcribed-rows-xeon-amx-2026-11-28.md)."""
    results = ROOT / "docs" / "results"
    index = json.loads((results / "index.json").read_text(encoding="utf-8"))
    transcribed = []
    for row in index["tables"]["headline"]["rows"]:
        for field, value in row.items():
            if isinstance(value, dict) and "ref" in value:
                source = json.loads((results / value["ref"]).read_text(encoding="utf-8")).get("source", "")
                if source.lower().startswith("transcribed"):
                    transcribed.append(f"{row['what'][:60]}... ({field}: {value['ref']})")
    assert not transcribed, "\n".join(transcribed)
