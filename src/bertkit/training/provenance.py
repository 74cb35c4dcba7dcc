"""What a run is made of, so that `--resume` continues the same run: a fingerprint of its data and settings.

A fingerprint is a flat JSON-ready mapping, `name -> value`, that every checkpoint's meta.json stores and a resume
compares with its own (`differences`). Settings enter by value under their config names (`training.lr`); files and
folders by identity, the sha256 of what defines them, which ignores the path: a moved or copied file is the same
data, an edited one is not. The Trainer adds its own settings (`training_fingerprint`); each job its data and options.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable

from bertkit.data.shards import INDEX_FILE
from bertkit.errors import CheckpointError, ConfigError
from bertkit.io import file_sha256
from bertkit.training.checkpoint import META_FILE

RESUME_MAY_CHANGE = (
    "output_dir",  # the same folder by definition (the checkpoint is read from it)
    "max_steps", "epochs",  # how far to train: a resume may extend (or shorten) the run
    "eval_every", "save_every", "keep_last", "log_every",  # cadence of evaluation, checkpoints and records
    "report_to", "progress_bar", "profile_steps", "profile_from",  # display and output-only
    "early_stopping_patience", "early_stopping_min_delta",  # when to stop: like max_steps, a resume may change it
    "num_workers",  # loader processes: the batches are a function of the seed, not of the workers
    "device",  # where the same computation runs (moving a run to another machine)
    "activation_checkpointing",  # recomputes the same activations (same RNG state) to save memory
    "compile",  # the same computation in fused kernels (float rounding aside), like a move to another device
    "resume_mismatch",  # how this check itself reacts
)
"""TrainingConfig fields a resume may change freely. Every other field changes what the run computes (optimiser,
learning rate and schedule, clipping, precision, best-model metric, data order) and enters the fingerprint, except
CHECKED_BY_THE_TRAINER."""

CHECKED_BY_THE_TRAINER = ("batch_size", "grad_accum_steps", "seed")
"""TrainingConfig fields the Trainer's own checkpoint check refuses to see changed even with resume_mismatch 'warn'
(`Batches.meta`): with others the saved data position and RNG states mean nothing."""

def prepared_identity(folder: str | os.PathLike) -> dict[str, Any]:
    """Identity of a `prepare-pretraining` folder: the sha256 of its index.json, which lists every shard's sha256,
    the data settings and the vocabulary's fingerprint (cheap: the shards are not read again)."""
    return {"path": str(folder), "sha256": file_sha256(Path(folder) / INDEX_FILE)}


def flatten(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    """{prefix.key: value} for each entry, so a difference names the one option that changed."""
    return {f"{prefix}.{k}": v for k, v in values.items()}


ADDED_LATER = {"bf16_weights": False, "schedule": "linear", "decay": 0.1}
"""TrainingConfig fields added after checkpoints were written without them, and their defaults: at its default
such a field stays out of the fingerprint, so that those checkpoints still resume."""


def training_fingerprint(config: Any) -> dict[str, Any]:
    """The TrainingConfig fields that change what a run computes (all but RESUME_MAY_CHANGE and
    CHECKED_BY_THE_TRAINER, and those of ADDED_LATER at their defaults), as training.NAME."""
    values = {k: v for k, v in dataclasses.asdict(config).items()
              if k not in RESUME_MAY_CHANGE and k not in CHECKED_BY_THE_TRAINER
              and not (k in ADDED_LATER and v == ADDED_LATER[k])}
    return flatten("training", values)


def normalise(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint as meta.json will give it back (tuples become lists), so that equal means equal."""
    return json.loads(json.dumps(fingerprint))


_MISSING = object()  # an entry one fingerprint has and the other lacks


def _is_identity(value: Any) -> bool:
    return isinstance(value, dict) and "sha256" in value


def _same(old: Any, new: Any) -> bool:
    if _is_identity(old) and _is_identity(new):
        return {k: v for k, v in old.items() if k != "path"} == {k: v for k, v in new.items() if k != "path"}
    return old == new


def describe(value: Any) -> str:
    """A fingerprint value for a message: a file or folder as its path and short hash, a setting as JSON."""
    if _is_identity(value):
        selection = f"#{value['selection']}" if value.get("selection") is not None else ""
        path = value.get("path", "?")
        path = path if not selection or path.endswith(selection) else path + selection
        return f"{path} (sha256 {str(value['sha256'])[:12]})"
    return "(not set)" if value is _MISSING else json.dumps(value)


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, old value, new value) of every entry that differs, in the new fingerprint's order; an entry present
    on one side only differs from the missing one (shown as "(not set)")."""
    names = list(new) + [k for k in old if k not in new]
    return [(k, old.get(k, _MISSING), new.get(k, _MISSING)) for k in names
            if k not in old or k not in new or not _same(old[k], new[k])]


def plain(value: Any) -> Any:
    """A fingerprint value for a JSON record (a missing entry as null)."""
    return None if value is _MISSING else value


def check_resume(folder: Path, meta: dict[str, Any], fingerprint: dict[str, Any], mismatch: str,
                 say: Callable[[str], None]) -> dict[str, Any]:
    """Compare a run's data and settings with its checkpoint's (in `folder`, its `meta`): refuse a difference
    (CheckpointError naming each, the checkpoint's value vs this run's) or, with TrainingConfig.resume_mismatch
    'warn', `say` them. Returns the resume record for metrics.jsonl, whose `changed` keeps the differences."""
    path = folder / META_FILE
    record: dict[str, Any] = {"step": int(meta.get("step", 0)), "split": "resume", "checkpoint": folder.name,
                              "changed": {}}
    old = meta.get("fingerprint")
    if old is None:
        say(f"warning: {path} holds no fingerprint of the run's data and settings (written by an older bertkit): "
            "this resume cannot check that they are the same")
        record["changed"] = None
        return record
    diffs = differences(old, fingerprint)
    if not diffs:
        return record
    lines = "".join(f"\n  {name}: {describe(a)} in the checkpoint, {describe(b)} now" for name, a, b in diffs)
    if mismatch != "warn":
        raise CheckpointError(
            f"{path}: this run's data or settings differ from the checkpoint's:{lines}\nresume with the same ones, "
            "start a new output folder, or continue anyway with --resume-mismatch warn (training.resume_mismatch: "
            "warn), which notes the differences in the run's records")
    say(f"WARNING: resuming {folder} with data or settings that differ from the checkpoint's "
        f"(training.resume_mismatch = warn):{lines}\nthe run's records (metrics.jsonl, results.json) note this at "
        f"step {record['step']}")
    record["changed"] = {name: [plain(a), plain(b)] for name, a, b in diffs}
    return record


def check_output_apart(output: str | os.PathLike, folder: str | os.PathLike, role: str) -> None:
    """ConfigError when a run's output folder is `folder` (a model it reads: --model, --teacher), lies inside it or
    holds it: checkpoints/, best/ and final/ would nest inside the model folder, or replace a best/ it came from."""
    out, src = Path(output).resolve(), Path(folder).resolve()
    if out == src:
        relation = "is"
    elif out.is_relative_to(src):
        relation = "is inside"
    elif src.is_relative_to(out):
        relation = "holds"
    else:
        return
    raise ConfigError(f"the output folder {output} {relation} {role} {folder}: the run's checkpoints/, best/ and "
                      "final/ would be written into (or over) the model it reads; choose an output folder apart "
                      "from it")
