"""Both trees' bertkit in one process: each tree's modules kept apart, installed in sys.modules while it is used."""
import importlib, os, sys
from pathlib import Path

# benchmarks/ whose common.make_step, bench_pretrain_step and bench_before_after.step_model both trees can run: the
# checkout's, or $BENCHMARKS (the runs of this report used a copy of benchmarks/ as of the plan's commit, with
# make_step's import of Bf16Weights from bertkit.training.bf16_weights, where both trees have it).
HERE = Path(os.environ.get("BENCHMARKS") or Path(__file__).resolve().parents[3] / "benchmarks")


def ours(name: str) -> bool:
    return name == "bertkit" or name.startswith("bertkit.") or name in ("common", "bench_pretrain_step",
                                                                        "bench_before_after")


def install(modules: dict | None) -> None:
    """Put one tree's modules in sys.modules (None: neither's), so that imports inside functions find that tree."""
    for name in [m for m in sys.modules if ours(m)]:
        del sys.modules[name]
    sys.modules.update(modules or {})


def load_tree(tree: str) -> dict:
    """Import bertkit and the benchmark helpers from `tree`; its modules are kept in the returned dict."""
    install(None)
    sys.path[:0] = [str(Path(tree) / "src"), str(HERE)]
    bba = importlib.import_module("bench_before_after")
    bps = importlib.import_module("bench_pretrain_step")
    common = importlib.import_module("common")
    import bertkit
    from bertkit.runtime import keep_freed_memory
    keep_freed_memory()
    assert Path(bertkit.__file__).resolve().is_relative_to(Path(tree).resolve()), bertkit.__file__
    sys.path[:2] = []
    return {"bba": bba, "bps": bps, "common": common, "file": bertkit.__file__,
            "modules": {m: mod for m, mod in sys.modules.items() if ours(m)}}
