"""Build bert-family-xeon-amx-2026-11-28.json from the runs' own JSON files beside this script: the raw records as
they were written (under `raw`), and the report's tables, whose every figure is a pointer into them
(docs/generate.py renders the tables into the .md).

    python3 docs/results/bert-family-xeon-amx-2026-11-28/build_report.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = HERE.name
RAW = {"family_parity": "family_parity.json", "before_after_mini": "before_after_mini.json",
       "before_after_minilm": "before_after_minilm.json"}


def pointer(*path: object) -> dict:
    return {"ref": f"{NAME}.json", "pointer": "/raw/" + "/".join(str(p) for p in path)}


def main() -> None:
    raw = {key: json.loads((HERE / file).read_text()) for key, file in RAW.items()}
    parity = [{"family": family, "heads": pointer("family_parity", "summary", family, "heads"),
               "hidden": pointer("family_parity", "summary", family, "worst_hidden_state"),
               "output": pointer("family_parity", "summary", family, "worst_output"),
               "exact": pointer("family_parity", "summary", family, "exact_rows"),
               "rows": pointer("family_parity", "summary", family, "rows")}
              for family in raw["family_parity"]["summary"]]
    speed = []
    for key, what in (("before_after_mini", "bertkit-mini"), ("before_after_minilm", "all-MiniLM-L6-v2")):
        for workload in raw[key]["workloads"]:
            label = {"embed": f"embed, {what}, fp32 (`bertkit.load(...).encode`)",
                     "step": "pre-training step, bertkit-mini's shape, fp32"}[workload]
            speed.append({"what": label,
                          "before": pointer(key, "workloads", workload, "best", "before"),
                          "after": pointer(key, "workloads", workload, "best", "after"),
                          "best": pointer(key, "workloads", workload, "after_over_before"),
                          "median": pointer(key, "workloads", workload, "median_after_over_before"),
                          "rounds": pointer(key, "rounds")})
    report = {
        "title": "The BERT family's folders: parity with transformers, and BERT's own path before and after",
        "date": "2026-11-28",
        "machine": raw["family_parity"]["cpu"],
        "software": {"torch": raw["family_parity"]["torch"], "transformers": raw["family_parity"]["transformers"]},
        "raw": raw,
        "tables": {
            "parity": {"columns": [
                {"title": "family", "template": "{family}", "align": "left"},
                {"title": "head classes", "template": "{heads}", "align": "right"},
                {"title": "worst hidden state", "template": "{hidden:.2g}", "align": "right"},
                {"title": "worst head output", "template": "{output:.2g}", "align": "right"},
                {"title": "comparisons bit for bit equal", "template": "{exact} of {rows}", "align": "right"}],
                "rows": parity},
            "before_after": {"columns": [
                {"title": "workload", "template": "{what}", "align": "left"},
                {"title": "before, best tok/s", "template": "{before:,.0f}", "align": "right"},
                {"title": "after, best tok/s", "template": "{after:,.0f}", "align": "right"},
                {"title": "after / before (best)", "template": "{best:.3f}", "align": "right"},
                {"title": "after / before (median)", "template": "{median:.3f}", "align": "right"},
                {"title": "rounds", "template": "{rounds}", "align": "right"}],
                "rows": speed}}}
    (HERE.parent / f"{NAME}.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
