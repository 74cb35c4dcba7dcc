"""How fast the CLI answers `--help`: the wall time of `python -m bertkit VERB --help` (and of `bertkit --help`) for
every verb of the CLI's table, under the code of git revision REV (a worktree) and under this checkout (or --after's
revision), in one run.

    python3 benchmarks/bench_cli_start.py --before REV [--after REV] [--runs 5] [--verbs finetune,embed] [--json OUT]

Each command runs in a fresh interpreter (what a user's shell starts), its output discarded; the two trees take turns
run by run, so both meet the same machine load. A table gives each command's median time over --runs runs in each
tree, whether the tree imported torch for it (one more run, not timed, asks the interpreter), and the after/before
ratio last. --json writes every time and the table's definition, from which docs/generate.py renders the report's
table (the medians and ratios computed from the times).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_serve import imports_from, worktree
from common import cpu_line

REPO = Path(__file__).resolve().parents[1]
# Run in the tree's interpreter after the command: whether it imported torch (SystemExit of --help caught).
PROBE = ("import contextlib, io, runpy, sys; sys.argv = ['bertkit', *sys.argv[1:]]\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         "    try: runpy.run_module('bertkit', run_name='__main__')\n"
         "    except SystemExit: pass\n"
         "print('torch' in sys.modules)")


def tree_env(src: Path) -> dict[str, str]:
    """The environment of a command run with `src` (a checkout's src/) first on the import path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))


def help_seconds(args: list[str], src: Path) -> float:
    """Wall time of `python -m bertkit ARGS` under `src`, from the start of the interpreter to its exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertkit", *args], env=tree_env(src), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def imports_torch(args: list[str], src: Path) -> bool:
    """Whether `bertkit ARGS` imports torch under `src`."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=tree_env(src), check=True, capture_output=True,
                          text=True)
    return done.stdout.strip().splitlines()[-1] == "True"


def measure(commands: dict[str, list[str]], sources: dict[str, Path], runs: int) -> list[dict]:
    """Per command: each tree's run times (the trees in turn, the first alternating run by run) and torch."""
    rows = []
    for name, args in commands.items():
        row: dict = {"command": name, **{tree: [] for tree in sources}}
        for k in range(runs):
            for tree in (list(sources) if k % 2 == 0 else list(sources)[::-1]):
                row[tree].append(round(help_seconds(args, sources[tree]), 4))
        row.update({f"torch_{tree}": "yes" if imports_torch(args, src) else "no" for tree, src in sources.items()})
        rows.append(row)
        print(f"{name}: before {statistics.median(row['before']):.2f} s, after {statistics.median(row['after']):.2f} s",
              flush=True)
    return rows


def table_spec(rows: list[dict], runs: int, revisions: dict[str, str]) -> dict:
    """The report's table as docs/generate.py renders it: median seconds and torch per tree, after/before last."""
    def columns(tree: str) -> list[dict]:
        return [{"title": f"{tree} ({revisions[tree].split()[0]}), s: median of {runs}",
                 "template": f"{{{tree}_s:.2f}}", "align": "right"},
                {"title": f"torch {tree}", "template": f"{{torch_{tree}}}", "align": "center"}]

    return {"columns": [{"title": "command", "template": "`{command}`"}, *columns("before"), *columns("after"),
                        {"title": "after/before", "template": "**{ratio:.2f}**", "align": "right"}],
            "computed": {"before_s": ["median", "before"], "after_s": ["median", "after"],
                         "ratio": ["/", "after_s", "before_s"]},
            "rows": rows}


def table(spec: dict) -> str:
    """The table as Markdown, for the console (the report's is rendered from the JSON by docs/generate.py)."""
    lines = ["| " + " | ".join(c["title"] for c in spec["columns"]) + " |",
             "| " + " | ".join("---:" if c.get("align") == "right" else "---" for c in spec["columns"]) + " |"]
    for row in spec["rows"]:
        values = {**row, "before_s": statistics.median(row["before"]), "after_s": statistics.median(row["after"])}
        values["ratio"] = values["after_s"] / values["before_s"]
        lines.append("| " + " | ".join(c["template"].format(**values) for c in spec["columns"]) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision to compare this checkout with")
    parser.add_argument("--after", default=None, help="a git revision instead of this checkout")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command in each tree")
    parser.add_argument("--verbs", default=None, help="comma-separated verbs (default: every verb of the CLI)")
    parser.add_argument("--json", default=None, help="write the machine, revisions and every time to this file")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from bertkit.cli import VERBS

    verbs = args.verbs.split(",") if args.verbs else list(VERBS)
    commands = {"bertkit --help": ["--help"], **{f"bertkit {v} --help": [v, "--help"] for v in verbs}}
    print(cpu_line(), f"{os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-cli-start-") as tmp:
        revs = {"before": args.before, "after": args.after}
        made = [worktree(rev, Path(tmp) / name) for name, rev in revs.items() if rev]
        try:
            sources = {"before": made[0] / "src", "after": made[1] / "src" if args.after else REPO / "src"}
            for tree, src in sources.items():
                assert imports_from(src).startswith(str(src)), f"{tree}: bertkit not imported from {src}"
            revisions = {tree: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src.parent, check=True,
                                              capture_output=True, text=True).stdout.strip()
                         + ("" if tree == "before" or args.after else " + this checkout's uncommitted changes")
                         for tree, src in sources.items()}
            rows = measure(commands, sources, args.runs)
        finally:
            for path in made:
                subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, check=False)
    spec = table_spec(rows, args.runs, revisions)
    print(table(spec))
    if args.json:
        record = {"title": "How fast every verb's --help answers, before and after its options read without torch",
                  "date": time.strftime("%Y-%m-%d"), "machine": f"{cpu_line()}; {os.cpu_count()} cores",
                  "commands": ["benchmarks/" + Path(sys.argv[0]).name + " " + " ".join(sys.argv[1:])],
                  "revisions": revisions, "runs": args.runs, "tables": {"cli_start": spec}}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
