"""What a run is made of, so that `--resume` continues the same run: a fingerprint of its data and settings.

A fingerprint is a flat JSON-ready mapping, `name -> value`, that every checkpoint's meta.json stores and a resume
compares with its own (`differences`). Settings enter by value under their config names (`training.lr`,
`options.max_length`, `distill.temperature`); files and folders by identity: the sha256 of their bytes (a data
file), of their index (a prepared data folder: index.json holds every shard's sha256) or of the files that define a
model (config, weights, vocabulary). Identity ignores the path, so a moved or copied file is the same data, and an
edited one is not. The Trainer adds its own settings (`training_fingerprint`); each job adds its data and options.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from bertkit.data.shards import INDEX_FILE
from bertkit.errors import ConfigError
from bertkit.io import file_sha256

RESUME_MAY_CHANGE = (
    "output_dir",  # the same folder by definition (the checkpoint is read from it)
    "max_steps", "epochs",  # how far to train: a resume may extend (or shorten) the run
    "eval_every", "save_every", "keep_last", "log_every",  # cadence of evaluation, checkpoints and records
    "tensorboard", "progress_bar", "profile_steps", "profile_from",  # display and output-only
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
(Trainer._meta): with others the saved data position and RNG states mean nothing."""

MODEL_FILE_SUFFIXES = (".json", ".txt", ".safetensors", ".bin")
"""Files of a model folder that define the model (config, weights, shard index, vocabulary and tokenizer settings);
notes, plots and logs beside them (PRETRAINING.md, curves.png, metrics.jsonl) are not part of its identity."""


def file_identity(spec: str | os.PathLike) -> dict[str, Any]:
    """Identity of a data file: its sha256; `FILE#START:END` (a QA article selection) adds the selection."""
    text = str(spec)
    path, selection = Path(text), None
    if not path.is_file() and "#" in text:
        name, _, selection = text.rpartition("#")
        path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{text}: no such file")
    out = {"path": text, "sha256": file_sha256(path)}
    if selection is not None:
        out["selection"] = selection
    return out


def folder_identity(folder: str | os.PathLike) -> dict[str, Any]:
    """Identity of a model folder: one sha256 over the names and bytes of the files that define the model."""
    import hashlib

    folder = Path(folder)
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith(".") and p.suffix in MODEL_FILE_SUFFIXES:
            h.update(f"{p.name}\0{file_sha256(p)}\n".encode())
    return {"path": str(folder), "sha256": h.hexdigest()}


def prepared_identity(folder: str | os.PathLike) -> dict[str, Any]:
    """Identity of a `prepare-pretraining` folder: the sha256 of its index.json, which lists every shard's sha256,
    the data settings and the vocabulary's fingerprint (cheap: the shards are not read again)."""
    return {"path": str(folder), "sha256": file_sha256(Path(folder) / INDEX_FILE)}


def flatten(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    """{prefix.key: value} for each entry, so a difference names the one option that changed."""
    return {f"{prefix}.{k}": v for k, v in values.items()}


ADDED_LATER = {"bf16_weights": False}
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
