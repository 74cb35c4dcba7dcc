"""Every ```bash and ```python block of README.md and docs/ runs, so an example cannot rot (issue 27, item 6).

How a page's blocks run:
- each page gets one sandbox folder, and its blocks run there in page order, so a block may use the files an earlier
  block of the same page wrote (a block run alone first runs the earlier ones it may need);
- the sandbox holds links to the checkout's top-level folders (`benchmarks/`, `configs/`, `docs/`, ...), so
  commands such as `python3 benchmarks/X.py` work (a block must not write into them: they are the checkout), and
  small real data: `train.tsv` (200 SST-2 training
  sentences), `dev.tsv` (100 dev sentences), both with a `sentence<TAB>label` header, and `texts.txt` (three
  lines);
- bash blocks run with `bash -euo pipefail`, python blocks with this interpreter; both see this checkout's
  `src/` first on PYTHONPATH;
- an HTML comment on the line above a block changes that: `<!-- slow: why -->` runs it only under `-m slow`,
  `<!-- skip: why -->` never runs it, and the reason is listed by `pytest -ra` (the suite's default) with the
  block's page and line.

Blocks in other languages (```text for output, ```yaml, ```json) are not run; a fence without a language is an
error, so every block says what it is.

The README's five-minute tour also runs as a new user runs it (`-m slow`): a copy of the checkout, a new virtual
environment, and every bash and python block of the tour in page order, its install line first, as the README gives
them (markers do not apply there).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
NOT_RUN = {"text", "yaml", "json", "toml", "console", "html", "markdown"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!-- (?P<kind>skip|slow):\s*(?P<reason>.*?)\s*-->\s*$")
TIMEOUT_S = {"fast": 300, "slow": 1800}
README = ROOT / "README.md"


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its text, and how it runs (run, slow or skip)."""

    page: str
    line: int
    lang: str
    code: str
    mode: str  # "run", "slow" or "skip"
    reason: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one page, with the marker on the line above each, if any."""
    lines = path.read_text(encoding="utf-8").split("\n")
    page = str(path.relative_to(ROOT))
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m["indent"]), i
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        code = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[start + 1:j])
        above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(above)
        mode, reason = (marker["kind"], marker["reason"]) if marker else ("run", "")
        out.append(Block(page, start + 1, m["lang"].lower(), code + "\n", mode, reason))
        i = j + 1
    return out


ALL = [b for p in pages() for b in blocks_of(p)]
RUNNABLE = [b for b in ALL if b.lang in RUN]


def test_every_block_names_its_language() -> None:
    """A fence without a language (or with one this test does not know) could hide an example that never runs."""
    unknown = [f"{b.id} ({b.lang or 'no language'})" for b in ALL if b.lang not in RUN and b.lang not in NOT_RUN]
    assert not unknown, f"give these blocks a language (bash, python, text, ...): {unknown}"


def test_markers_say_why_and_sit_on_a_block() -> None:
    """A skip or slow marker names its reason and is the last line before a fence (else it marks nothing)."""
    problems = []
    for path in pages():
        lines = path.read_text(encoding="utf-8").split("\n")
        for n, line in enumerate(lines):
            m = MARKER.match(line)
            if not m:
                continue
            following = next((x for x in lines[n + 1:] if x.strip()), "")
            if not FENCE.match(following):
                problems.append(f"{path.relative_to(ROOT)}:{n + 1}: marker not followed by a code block")
            if not m["reason"]:
                problems.append(f"{path.relative_to(ROOT)}:{n + 1}: marker without a reason")
    assert not problems, "\n".join(problems)


def test_no_block_waits_forever() -> None:
    """A loop in an example is bounded (`for i in $(seq N)`): an `until` or `while true` loop waiting for a server
    that never comes up hangs a reader's terminal, and this suite, without a word."""
    loop = re.compile(r"^\s*(until\b|while\s+(true|:)\b)", re.M)
    unbounded = [b.id for b in ALL if b.lang in RUN and loop.search(b.code)]
    assert not unbounded, f"bound these loops (for i in $(seq N); ...) and stop when the server exits: {unbounded}"


def _sandbox(root: Path) -> Path:
    """A folder with the checkout's top-level folders linked in and the small data files of the module docstring."""
    root.mkdir(parents=True)
    for name in ("benchmarks", "configs", "docs", "src", "tests", "pyproject.toml", "constraints.txt"):
        if (ROOT / name).exists():
            (root / name).symlink_to(ROOT / name)
    data = ROOT / "src" / "bertkit" / "demo_data"
    for name, source, n in (("train.tsv", "sst2_train_sample.tsv", 200), ("dev.tsv", "sst2_dev.tsv", 100)):
        rows = (data / source).read_text(encoding="utf-8").split("\n")
        (root / name).write_text("\n".join(rows[:n + 1]) + "\n", encoding="utf-8")
    (root / "texts.txt").write_text("The cat sat on the mat.\nA dog barked at the postman.\nBERT reads both "
                                    "directions at once.\n", encoding="utf-8")
    return root


_SANDBOXES: dict[str, Path] = {}
_DONE: dict[str, str | None] = {}  # block id -> None if it passed, else its failure


def _run(block: Block, where: Path, env: dict[str, str] | None = None, python: str = sys.executable) -> str | None:
    """Run one block in `where`; None if it succeeded, else what it printed. Without `env`, with this checkout's
    `src/` and this interpreter (below); with it, as `env` and `python` say (the clean-venv tour)."""
    if env is not None:
        return _execute(_command(block, python), where, env, TIMEOUT_S["slow"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    # `python3` in a block is this interpreter, which has bertkit's dependencies. A script, not a symlink: a symlink
    # to a virtual environment's python outside its bin/ starts the base interpreter, without the venv's packages.
    shim = where / ".bin"
    if not shim.exists():
        shim.mkdir()
        for name in ("python3", "python"):
            (shim / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
            (shim / name).chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return _execute(_command(block, sys.executable), where, env, TIMEOUT_S["slow" if block.mode == "slow" else "fast"])


def _command(block: Block, python: str) -> list[str]:
    """The command that runs a block: bash with -euo pipefail, or `python` -c."""
    if RUN[block.lang] == "bash":
        return ["bash", "-euo", "pipefail", "-c", block.code]
    return [python, "-c", block.code]


def _execute(cmd: list[str], where: Path, env: dict[str, str], timeout: float) -> str | None:
    """Run `cmd` in its own process group, which is killed whole on a timeout (a server a block started in the
    background included); None if it exited 0, else its status and the end of what it printed."""
    with subprocess.Popen(cmd, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return f"timed out after {timeout} s"
    if proc.returncode != 0:
        return f"exit status {proc.returncode}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    return None


def _params() -> list:
    """One pytest case per runnable block: slow ones marked slow, skipped ones skipped with their page, line, reason."""
    params = []
    for b in RUNNABLE:
        marks = {"run": [], "slow": [pytest.mark.slow], "skip": [pytest.mark.skip(reason=f"{b.id}: {b.reason}")]}
        params.append(pytest.param(b, id=b.id, marks=marks[b.mode]))
    return params


@pytest.mark.parametrize("block", _params())
def test_code_block_runs(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The block exits 0 in its page's sandbox, after the earlier blocks of its page that it may depend on."""
    if block.page not in _SANDBOXES:
        _SANDBOXES[block.page] = _sandbox(tmp_path_factory.mktemp("docs") / "sandbox")
    where = _SANDBOXES[block.page]
    earlier = [b for b in RUNNABLE if b.page == block.page and b.line < block.line and b.mode != "skip"
               and (b.mode == "run" or block.mode == "slow")]
    for b in earlier:
        if b.id not in _DONE:
            _DONE[b.id] = _run(b, where)
        if _DONE[b.id] is not None:
            pytest.fail(f"an earlier block of the page failed, {b.id}: {_DONE[b.id]}")
    if block.id not in _DONE:
        _DONE[block.id] = _run(block, where)
    assert _DONE[block.id] is None, f"{block.id} ({block.lang}) failed: {_DONE[block.id]}\n--- the block\n{block.code}"


def section_blocks(path: Path, heading: str) -> list[Block]:
    """The runnable blocks under one `## heading` of a page, up to the next `## `, in page order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    start = lines.index(f"## {heading}") + 1
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("## ")), len(lines))
    return [b for b in blocks_of(path) if start < b.line <= end and b.lang in RUN]


def _copy_of_checkout(to: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones it does not ignore): what a fresh clone of this
    working tree holds, without build outputs or runs."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout ({listed.stderr.strip()}): cannot tell its files from build outputs")
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


def test_tour_blocks_are_the_install_line_then_the_steps() -> None:
    """The tour opens with its install line (with the serve extra its last step needs) and ends by serving."""
    tour = section_blocks(README, "A five-minute tour")
    assert len(tour) >= 5
    assert re.search(r'pip install .*-e "\.\[[^]]*\bserve\b[^]]*\]"', tour[0].code), tour[0].code
    assert "bertkit serve" in tour[-1].code and "until " not in tour[-1].code


def test_ci_runs_the_readmes_test_command() -> None:
    """.ci/run's install and test lines are the README's second fresh-machine command (its own pip install quiet):
    what CI checks is what the README tells a new user to run. The first command installs what the tour needs."""
    fresh = section_blocks(README, "Fresh machine: two commands")
    commands = [line for b in fresh for line in b.code.splitlines() if line.startswith("python3 -m pip install")]
    assert len(commands) == 2, commands
    assert re.search(r'-e "\.\[[^]]*\bserve\b[^]]*\]"', commands[0]), commands[0]
    install, test = commands[1].split(" && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert any(line.strip().replace(" -q ", " ", 1) == install for line in ci), (install, ci)
    assert test in [line.strip() for line in ci], (test, ci)


@pytest.mark.slow
def test_readme_tour_runs_in_a_clean_venv(tmp_path: Path) -> None:
    """A copy of the checkout and a new virtual environment; then every block of the README's tour, in order and as
    written: its install line (a fresh machine has nothing but Python), pre-training, fine-tuning, embedding and
    serving. Minutes: pip installs bertkit and its dependencies first."""
    checkout = _copy_of_checkout(tmp_path / "checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    # The new venv's bin/ first, and neither this environment's bin/ nor its PYTHONPATH: `bertkit` and `python3`
    # are what the tour installed, or missing.
    ours = str(Path(sys.executable).parent)
    path = [str(bin_dir)] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=os.pathsep.join(path), VIRTUAL_ENV=str(venv))
    for block in section_blocks(README, "A five-minute tour"):
        failure = _run(block, checkout, env=env, python=str(bin_dir / "python"))
        assert failure is None, f"{block.id} ({block.lang}) failed: {failure}\n--- the block\n{block.code}"
