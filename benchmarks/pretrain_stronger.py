"""One prepared accelerator call: pre-train a larger bertkit model (configs/bertkit-l6-h384-gpu.yaml) with
bertkit-mini's recipe on bertkit-mini's text, in about 8 minutes of one H100, data preparation included (issue 50).

    python3 benchmarks/pretrain_stronger.py stage                 # here, before the call: text into runs/stronger-data
    python3 benchmarks/pretrain_stronger.py run --out "$OUT"      # on the device machine (carry runs/stronger-data)
    python3 benchmarks/pretrain_stronger.py unpack FILES_AT DIR   # here, after it: the model folder that came back

`stage` writes the text of bertkit-mini's GPU run (benchmarks/pretraining_payoff.sh, RECIPE=gpu: three Wikipedia
slices, the SST-2 and CoNLL-2003 training sentences, WikiText-2 valid, the six Austen novels, Tiny Shakespeare) and
the held-out WikiText-2 test from ../shared/data ($DATA) as xz files, about 35 MB: the device machine gets the
repository's tree and the paths `carry` names, 64 MiB in all, and not ../shared.

`run` decompresses them, prepares the instances on every core (`bertkit prepare-pretraining --workers`), pre-trains
under a wall-clock budget and packs the model. At the deadline the trainer gets SIGTERM and writes a checkpoint, and
the run resumed at that step writes final/ from it, so a run cut short still returns a usable model. The model
folder (final/ with the run's config, metrics and curves: what a shipped model holds, PRETRAINING.md aside) goes back
as a tar in parts of 15 MiB, beside run.log, metrics.jsonl and summary.json (tokens/s, held-out MLM accuracy): at most
8 files of 16 MiB come back from a call. Run again with the same --work, it skips what is done and resumes the
training from its latest checkpoint; SIGTERM or Ctrl-C stops it the same way as the deadline.

`--dry-run` (stage and run): a few hundred lines of the bundled novels, a tiny shape, a few steps on the CPU, the same
code path (tests/benchmarks/test_pretrain_stronger.py). The plan, the time estimate and the command to paste into the
device tool: docs/results/stronger-model-plan-2026-11-28.md.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from common import DATA

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bertkit-l6-h384-gpu.yaml"
NAME = "bertkit-l6-h384"
STAGED = ROOT / "runs" / "stronger-data"  # runs/ is ignored by git: the call's `carry` takes the folder along
MANIFEST = "MANIFEST.json"
TOKENIZER = "bertkit-mini"  # the shipped model's 8,192-piece vocabulary: nothing to train or to carry
XZ_PRESET = 9 | lzma.PRESET_EXTREME  # a Wikipedia slice: 15.2 MB as gzip, 10.6 MB as xz
TREE_LIMIT = 64 * 2**20  # what travels to the device: tracked and untracked files plus carried paths
PART_BYTES = 15 * 2**20  # what comes back: at most 8 files of 16 MiB, 64 MiB together
RETURN_FILES, RETURN_FILE_BYTES, RETURN_BYTES = 8, 16 * 2**20, 64 * 2**20
LOG_BYTES = 2 * 2**20  # the tail of run.log that goes back
RESERVE_S = 45  # after the trainer stops: final/ from its checkpoint (a process start, one evaluation), the packing
GRACE_S = 120  # how long a stopped trainer may take to write its checkpoint before it is killed
EAGER = ("--training.compile", "none", "--execution.sparse_mlm", "true", "--execution.unpadded", "null")
STOPPED = 128 + signal.SIGTERM  # `bertkit pretrain`'s exit status after a SIGTERM, its checkpoint written

# The dry run: google-research/bert's test shape (modeling_test.py) and a few steps on the CPU
DRY_SHAPE = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 37}
DRY_OPTIONS = {"training.max_steps": 8, "training.batch_size": 8, "training.warmup": 2, "training.eval_every": 4,
               "training.save_every": 4, "training.log_every": 2, "training.num_workers": 0,
               "training.compile": "none", "training.device": "cpu", "eval_batches": 2, "eval_batch_size": 8}
DRY_LINES = {"train": 400, "heldout": 120}  # lines of the bundled novels

_stop_requested = False


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_text_bytes(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def say(text: str) -> None:
    print(f"== {text}", flush=True)


# --- stage (here) -----------------------------------------------------------------------------------------------

def corpus_texts(data: Path, wiki_slices: int, tmp: Path) -> dict[str, list[tuple[str, Path]]]:
    """bertkit-mini's GPU text, in the order of benchmarks/pretraining_payoff.sh (RECIPE=gpu; the Austen folder's
    SOURCE.txt, a provenance note, left out), and the held-out WikiText-2 test: {split: [(name, file)]}; the task
    texts are written into `tmp` as payoff.sh writes them."""
    import task_text

    sst2, conll = tmp / "sst2_train.txt", tmp / "conll_train.txt"
    task_text.write_lines(sst2, task_text.sst2_sentences(data / "sst2" / "train.tsv"), 4, 0)  # as payoff.sh: 4
    task_text.write_lines(conll, task_text.conll_sentences(data / "conll2003" / "train.txt"), 4, 0)  # copies, seed 0
    wiki = [data / "pretraining_corpus" / f"enwiki2014_{i:03d}.txt.gz" for i in range(wiki_slices)]
    austen = sorted((data / "jane_austen").glob("*.txt"))
    austen = [p for p in austen if p.name != "SOURCE.txt"]
    train = [*wiki, sst2, conll, data / "wikitext2" / "valid.txt", *austen, data / "tiny_shakespeare" / "input.txt"]
    names = [p.name.removesuffix(".gz") for p in train]
    names[names.index("valid.txt")] = "wikitext2_valid.txt"
    names[names.index("input.txt")] = "tiny_shakespeare.txt"
    return {"train": list(zip(names, train)), "heldout": [("wikitext2_test.txt", data / "wikitext2" / "test.txt")]}


def dry_texts(tmp: Path) -> dict[str, list[tuple[str, Path]]]:
    """The dry run's text: the first lines of two bundled novels (src/bertkit/demo_data), one to train on, one to
    hold out."""
    demo = ROOT / "src" / "bertkit" / "demo_data"
    texts = {}
    for split, novel in (("train", "austen_persuasion"), ("heldout", "austen_northangerabbey")):
        lines = read_text_bytes(demo / f"{novel}.txt.gz").splitlines(keepends=True)[:DRY_LINES[split]]
        (tmp / f"{novel}.txt").write_bytes(b"".join(lines))
        texts[split] = [(f"{novel}.txt", tmp / f"{novel}.txt")]
    return texts


def compress(source: Path, target: Path) -> dict[str, Any]:
    """`source` (text, or gzip) as xz at `target`; the text's size and sha256, which `run` checks when it
    decompresses."""
    text = read_text_bytes(source)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(lzma.compress(text, preset=XZ_PRESET))
    partial.replace(target)
    return {"text_bytes": len(text), "text_sha256": sha256_bytes(text), "xz_bytes": target.stat().st_size}


def travelling_bytes() -> int:
    """The bytes of the tree that travels to the device without carry: tracked and untracked, not ignored, files."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return sum((ROOT / name).stat().st_size for name in listed if name and (ROOT / name).is_file())


def stage(args: argparse.Namespace) -> int:
    target = Path(args.to)
    if (target / MANIFEST).is_file() and not args.force:
        manifest = json.loads((target / MANIFEST).read_text())
        if manifest["dry_run"] == args.dry_run:
            say(f"{target} is staged already ({MANIFEST}); --force stages it again")
            return 0
    shutil.rmtree(target, ignore_errors=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        texts = dry_texts(Path(tmp)) if args.dry_run else corpus_texts(Path(args.data), args.wiki_slices, Path(tmp))
        jobs = []
        for split, files in texts.items():
            (target / split).mkdir(parents=True)
            for k, (name, source) in enumerate(files):
                jobs.append((f"{split}/{k:02d}-{name}.xz", source))
        with ThreadPoolExecutor(args.jobs) as pool:  # liblzma lets go of the GIL while it compresses
            entries = list(pool.map(lambda job: {"file": job[0], **compress(job[1], target / job[0])}, jobs))
    manifest = {"dry_run": args.dry_run, "tokenizer": TOKENIZER,
                "wiki_slices": None if args.dry_run else args.wiki_slices,
                "files": {split: [e for e in entries if e["file"].startswith(split + "/")] for split in texts}}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")  # last: a complete folder has it
    staged = sum(e["xz_bytes"] for e in entries)
    text = sum(e["text_bytes"] for e in entries)
    say(f"staged {len(entries)} files in {target}: {text / 1e6:.1f} MB of text as {staged / 1e6:.1f} MB of xz "
        f"({time.monotonic() - started:.0f} s)")
    if args.dry_run:
        return 0
    tree = travelling_bytes()
    total = tree + staged
    say(f"what travels: the tree {tree / 2**20:.1f} MiB + the staged folder {staged / 2**20:.1f} MiB = "
        f"{total / 2**20:.1f} MiB of the device's {TREE_LIMIT // 2**20} MiB")
    if total > TREE_LIMIT:
        print(f"error: {total / 2**20:.1f} MiB would not travel; stage with fewer Wikipedia slices "
              f"(--wiki-slices {args.wiki_slices - 1}) or make the tree smaller", file=sys.stderr)
        return 1
    return 0


# --- run (on the device) -------------------------------------------------------------------------------------------

def child_env() -> dict[str, str]:
    """The environment of the bertkit commands: this checkout's src first (the device has no bertkit installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def request_stop(signum: int, frame: Any) -> None:
    """SIGTERM or SIGINT to this script: stop the command running now as the deadline does."""
    global _stop_requested
    _stop_requested = True


def run_until(cmd: list[str], log: Path, deadline: float | None, stoppable: bool = True) -> int:
    """Run `cmd` (its output appended to `log`) in a session of its own, so that a terminal's Ctrl-C reaches only this
    script; at `deadline`, or when this script is asked to stop (if `stoppable`), it gets one SIGTERM, and is killed
    GRACE_S later."""
    with open(log, "ab") as out:
        out.write(f"$ {shlex.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
        signalled = None
        while proc.poll() is None:
            now = time.monotonic()
            if signalled is None and ((stoppable and _stop_requested) or (deadline is not None and now >= deadline)):
                proc.send_signal(signal.SIGTERM)
                signalled = now
            elif signalled is not None and now > signalled + GRACE_S:
                proc.kill()
            time.sleep(0.1)
        return proc.returncode


def log_tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def decompress(staged: Path, work: Path) -> dict[str, list[Path]]:
    """The staged xz files as text under work/text, each checked against the manifest (done ones are kept)."""
    manifest = json.loads((staged / MANIFEST).read_text())

    def one(entry: dict[str, Any]) -> Path:
        target = work / "text" / entry["file"].removesuffix(".xz")
        if target.is_file() and target.stat().st_size == entry["text_bytes"]:
            return target
        text = lzma.decompress((staged / entry["file"]).read_bytes())
        if sha256_bytes(text) != entry["text_sha256"]:
            raise SystemExit(f"error: {staged / entry['file']}: the text's sha256 is not the one {MANIFEST} records")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.with_name(target.name + ".partial").write_bytes(text)
        target.with_name(target.name + ".partial").replace(target)
        return target

    with ThreadPoolExecutor(8) as pool:
        return {split: list(pool.map(one, entries)) for split, entries in manifest["files"].items()}


def prepare(texts: dict[str, list[Path]], work: Path, workers: int, log: Path) -> None:
    """Both prepared folders at once (bertkit-mini's commands): the training text with dynamic masking on `workers`
    processes, the held-out text with its masks drawn once, as every evaluation of bertkit-mini's run saw them."""
    options = {"train": ["--dynamic-masking", "--workers", str(workers)], "heldout": []}
    todo = [split for split in texts if not (work / "data" / split / "index.json").is_file()]
    cmds = {split: [sys.executable, "-m", "bertkit", "prepare-pretraining", *map(str, texts[split]), "-o",
                    str(work / "data" / split), "--tokenizer", TOKENIZER, "--instances", "full_sentences",
                    "--dupe-factor", "1", *options[split]] for split in todo}
    with ThreadPoolExecutor(2) as pool:
        codes = dict(zip(todo, pool.map(lambda split: run_until(cmds[split], work / f"prepare-{split}.log", None),
                                        todo)))
    for split in todo:
        with open(log, "ab") as out:
            out.write((work / f"prepare-{split}.log").read_bytes())
        if codes[split] != 0:
            raise SystemExit(f"error: preparing the {split} text failed ({codes[split]}):\n"
                             + log_tail(work / f"prepare-{split}.log"))


def pretrain_command(args: argparse.Namespace, work: Path, *extra: str, steps: int | None = None) -> list[str]:
    """`bertkit pretrain` on the config with the prepared folders; the dry run's tiny shape and few steps."""
    cmd = [sys.executable, "-m", "bertkit", "pretrain", "--config", str(CONFIG), "--train_data",
           str(work / "data" / "train"), "--eval_data", str(work / "data" / "heldout"), "--training.output_dir",
           str(work / "run")]
    options: dict[str, Any] = dict(DRY_OPTIONS) if args.dry_run else {}
    if args.dry_run:
        recipe = yaml.safe_load(CONFIG.read_text())["model_overrides"]
        options["model_overrides"] = yaml.safe_dump({**recipe, **DRY_SHAPE}, default_flow_style=True,
                                                    sort_keys=False, width=1 << 30).strip()
    if steps or args.steps:
        options["training.max_steps"] = steps or args.steps
    return cmd + [item for key, value in options.items() for item in (f"--{key}", str(value))] + list(extra)


def latest_step(work: Path) -> int | None:
    from bertkit.training.checkpoint import latest_checkpoint, read_meta

    latest = latest_checkpoint(work / "run" / "checkpoints")
    return None if latest is None else int(read_meta(latest)["step"])


def train(args: argparse.Namespace, work: Path, log: Path, deadline: float) -> str:
    """Pre-train until the run ends ('complete') or is stopped with a checkpoint written ('stopped'), resuming a
    checkpoint an earlier call left. A failure with torch.compile is retried once from the latest checkpoint with the
    eager default step (sparse MLM, unpadded: 1.63 M tokens/s for bertkit-mini against the eager plain path's 1.29 M;
    a run may resume with another step), so that it cannot cost the call."""
    resume = ["--resume"] if latest_step(work) is not None else []
    code = run_until(pretrain_command(args, work, *resume), log, deadline)
    compiled = yaml.safe_load(CONFIG.read_text())["training"].get("compile", "none") != "none" and not args.dry_run
    if code not in (0, STOPPED) and compiled and not _stop_requested and time.monotonic() < deadline - 60:
        say(f"the compiled run failed ({code}); running it uncompiled:\n{log_tail(log)}")
        resume = ["--resume"] if latest_step(work) is not None else []
        code = run_until(pretrain_command(args, work, *resume, *EAGER), log, deadline)
    if code == 0:
        return "complete"
    if code != STOPPED:
        say(f"the training failed ({code}):\n{log_tail(log)}")
    return "stopped" if latest_step(work) is not None else "failed"


def finish(args: argparse.Namespace, work: Path, log: Path) -> bool:
    """final/ from the latest checkpoint: the run resumed with max_steps at that step runs no step, evaluates and
    writes final/ as at the end of a run."""
    step = latest_step(work)
    if step is None:
        return False
    code = run_until(pretrain_command(args, work, "--resume", "--training.compile", "none", steps=step), log, None,
                     stoppable=False)  # a stop asked for is what this step completes
    if code != 0:
        say(f"writing final/ from the checkpoint of step {step} failed ({code}):\n{log_tail(log)}")
    return code == 0


def pack(run: Path, source: str, work: Path, out: Path) -> dict[str, Any]:
    """The model folder to ship (run/source: final/, or best/, with the run's config, metrics and curves) as a tar in
    parts under `out`."""
    folder = work / NAME
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(run / source, folder)
    for name in ("pretrain_config.yaml", "metrics.jsonl", "curves.png"):
        if (run / name).is_file():
            shutil.copy2(run / name, folder / name)
    tar = work / f"{NAME}.tar"
    with tarfile.open(tar, "w") as archive:
        archive.add(folder, arcname=NAME)
    parts = []
    with open(tar, "rb") as f:
        for block in iter(lambda: f.read(PART_BYTES), b""):
            parts.append(f"{NAME}.tar.{len(parts):02d}")
            (out / parts[-1]).write_bytes(block)
    return {"tar_bytes": tar.stat().st_size, "tar_sha256": file_sha256(tar), "parts": parts,
            "files": sorted(p.name for p in folder.iterdir())}


def parameters(folder: Path) -> int:
    """The model's parameters, from the safetensors header (tied embeddings stored once)."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def planned_steps(args: argparse.Namespace) -> int:
    """The steps the run is to make: --steps, else the dry run's or the config's."""
    if args.steps:
        return args.steps
    if args.dry_run:
        return DRY_OPTIONS["training.max_steps"]
    return yaml.safe_load(CONFIG.read_text())["training"]["max_steps"]


def read_metrics(run: Path) -> dict[str, Any]:
    """From metrics.jsonl: the median tokens/s of the logged intervals (each process's first left out: it holds its
    start and compilation), the last step, where the last process resumed, the last evaluation."""
    path = run / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    steady, first, resumed = [], True, None
    for r in records:
        if r.get("split") == "resume":
            first, resumed = True, r["step"]
        elif r.get("split") == "train":
            if not first:
                steady.append(r["tokens_per_s"])
            first = False
    evals = [r for r in records if r.get("split") == "eval"]
    train = [r for r in records if r.get("split") == "train"]
    return {"steps": max((r["step"] for r in records if "step" in r), default=0),
            "tokens_per_s": statistics.median(steady) if steady else (train[-1]["tokens_per_s"] if train else None),
            "intervals": len(steady), "resumed_from": resumed, "eval": evals[-1] if evals else None,
            "best_mlm_accuracy": max((r["mlm_accuracy"] for r in evals), default=None)}


def check_return(out: Path) -> list[str]:
    """What would not come back from `out` (the device tool's limits)."""
    files = [p for p in out.rglob("*") if p.is_file()]
    problems = [f"{p.name}: {p.stat().st_size / 2**20:.1f} MiB" for p in files if p.stat().st_size > RETURN_FILE_BYTES]
    if len(files) > RETURN_FILES:
        problems.append(f"{len(files)} files (at most {RETURN_FILES})")
    total = sum(p.stat().st_size for p in files)
    if total > RETURN_BYTES:
        problems.append(f"{total / 2**20:.1f} MiB together (at most {RETURN_BYTES // 2**20})")
    return problems


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    deadline = started + args.budget - RESERVE_S
    staged, work, out = Path(args.data), Path(args.work), Path(args.out)
    manifest = json.loads((staged / MANIFEST).read_text())
    if manifest["dry_run"] != args.dry_run:
        raise SystemExit(f"error: {staged} holds the {'dry run' if manifest['dry_run'] else 'real'} text; "
                         f"stage it{' with --dry-run' if args.dry_run else ''} first")
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    log = work / "run.log"
    log.touch()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, request_stop)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    say(f"{NAME}: {CONFIG.relative_to(ROOT)} on {device}, torch {torch.__version__}; budget {args.budget:.0f} s, "
        f"the trainer is stopped at {args.budget - RESERVE_S:.0f} s if it has not ended")
    summary: dict[str, Any] = {"name": NAME, "config": str(CONFIG.relative_to(ROOT)), "dry_run": args.dry_run,
                               "device": device, "torch": torch.__version__, "outcome": "failed",
                               "planned_steps": planned_steps(args)}
    times: dict[str, float] = {}

    def timed(part: str, job: Any) -> Any:
        mark = time.monotonic()
        try:
            return job()
        finally:
            times[part] = round(time.monotonic() - mark, 1)

    try:
        texts = timed("decompress_s", lambda: decompress(staged, work))
        timed("prepare_s", lambda: prepare(texts, work, args.workers, log))
        say(f"text decompressed in {times['decompress_s']} s, prepared in {times['prepare_s']} s "
            f"({args.workers} workers)")
        outcome = timed("train_s", lambda: train(args, work, log, deadline))
        say(f"training {outcome} after {times['train_s']:.0f} s")
        source = "final"
        if outcome == "stopped" and not timed("finish_s", lambda: finish(args, work, log)):
            source = "best"  # the model of the best evaluation, which the trainer keeps as it goes
        summary.update(outcome=outcome, **read_metrics(work / "run"))
        if outcome != "failed" and (work / "run" / source / "model.safetensors").is_file():
            summary.update(timed("pack_s", lambda: pack(work / "run", source, work / "pack", out)), packed=source)
            summary["parameters"] = parameters(work / "pack" / NAME)
    finally:  # what went wrong goes back too
        times["total_s"] = round(time.monotonic() - started, 1)
        summary["times"] = times
        if (work / "run" / "metrics.jsonl").is_file():
            shutil.copy2(work / "run" / "metrics.jsonl", out / "metrics.jsonl")
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - LOG_BYTES))
            (out / "run.log").write_bytes(f.read())
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    report(summary)
    problems = check_return(out)
    if problems:
        say("warning: not everything under the output folder would come back: " + "; ".join(problems))
    return 0 if "parts" in summary else 1


def report(s: dict[str, Any]) -> None:
    """The summary's lines: outcome and steps, tokens/s, held-out MLM accuracy, the parts."""
    say(f"{s['name']}: {s['outcome']}, {s.get('steps', 0)} of {s['planned_steps']} steps"
        + (f" (resumed at step {s['resumed_from']})" if s.get("resumed_from") is not None else "")
        + f"; times {json.dumps(s['times'])}")
    if s.get("tokens_per_s") is not None:
        say(f"tokens/s, median of {s['intervals']} logged intervals after the first: {s['tokens_per_s']:,.0f}")
    if s.get("eval") is not None:
        say(f"held-out MLM accuracy (WikiText-2 test) at step {s['eval']['step']}: {s['eval']['mlm_accuracy']:.4f}, "
            f"loss {s['eval']['mlm_loss']:.4f} (best {s['best_mlm_accuracy']:.4f}; bertkit-mini's: 0.642)")
    if "parts" in s:
        say(f"model folder ({s['packed']}/, {s['parameters'] / 1e6:.1f} M parameters) in {', '.join(s['parts'])}: "
            f"{s['tar_bytes'] / 1e6:.1f} MB, sha256 {s['tar_sha256'][:16]}...")


# --- unpack (here, after the call) ----------------------------------------------------------------------------------

def unpack(parts_dir: Path, dest: Path) -> Path:
    """The model folder from the parts a call returned, the tar checked against summary.json's sha256."""
    summary = json.loads((parts_dir / "summary.json").read_text())
    data = b"".join((parts_dir / part).read_bytes() for part in summary["parts"])
    if sha256_bytes(data) != summary["tar_sha256"]:
        raise SystemExit(f"error: the parts {', '.join(summary['parts'])} in {parts_dir} do not join into the tar "
                         "summary.json records (sha256 differs): a part is missing or damaged")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(dest, filter="data")
    return dest / summary["name"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    verbs = p.add_subparsers(dest="verb", required=True)
    s = verbs.add_parser("stage", help="here: bertkit-mini's text, xz-compressed, into a folder to carry")
    s.add_argument("--data", default=str(DATA), help="the real data sets (default ../shared/data or $DATA)")
    s.add_argument("--to", default=str(STAGED), help=f"the staged folder (default {STAGED.relative_to(ROOT)})")
    s.add_argument("--wiki-slices", type=int, default=3, choices=(1, 2, 3), help="Wikipedia slices (default 3)")
    s.add_argument("--jobs", type=int, default=2, help="files compressed at once (default 2)")
    s.add_argument("--force", action="store_true", help="stage again over a staged folder")
    s.add_argument("--dry-run", action="store_true", help="the first lines of two bundled novels instead")
    r = verbs.add_parser("run", help="on the device: prepare, pre-train under the budget, pack the model")
    r.add_argument("--data", default=str(STAGED), help=f"the staged folder (default {STAGED.relative_to(ROOT)})")
    r.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bertkit-stronger"),
                   help="text, prepared data, the run's checkpoints (default $TMPDIR/bertkit-stronger); "
                        "run again with the same folder to resume")
    r.add_argument("--out", default=os.environ.get("OUT", "stronger-out"),
                   help="what comes back: the model's parts, run.log, metrics.jsonl, summary.json (default $OUT)")
    r.add_argument("--budget", type=float, default=480.0,
                   help=f"seconds for the whole run; the trainer is stopped {RESERVE_S} s before (default 480)")
    r.add_argument("--steps", type=int, default=None, help="training steps instead of the config's max_steps")
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes preparing the training text (default: every core)")
    r.add_argument("--dry-run", action="store_true", help="a tiny shape, a few steps, on the CPU")
    u = verbs.add_parser("unpack", help="here: the model folder from the parts a call returned")
    u.add_argument("parts", help="the folder the call's files are in (files_at)")
    u.add_argument("dest", help="where the model folder goes")
    args = p.parse_args(argv)
    if args.verb == "stage":
        return stage(args)
    if args.verb == "run":
        if args.dry_run:
            args.workers = 1
        return run(args)
    say(f"model folder: {unpack(Path(args.parts), Path(args.dest))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
