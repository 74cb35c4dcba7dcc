"""Training-state checkpoints: checkpoints/step-N/{state.pt, meta.json}, written atomically, the last K kept.

state.pt holds model, optimizer, scheduler, grad scaler, data position, best-metric bookkeeping and every
rank's RNG states; meta.json (written last) holds its size and sha256 plus the settings a resume must match,
so a truncated, corrupted or mismatched checkpoint fails with a CheckpointError naming the file and the field.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from bertkit.errors import CheckpointError
from bertkit.io import atomic_path, atomic_write_json, check_file, file_sha256, folder_lock, make_dir, read_json_object
from bertkit.training.distributed import DistInfo

logger = logging.getLogger(__name__)

FORMAT = "bertkit-training-state"
VERSION = 1
STATE_FILE = "state.pt"
META_FILE = "meta.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


_LOCKED: set[Path] = set()  # output folders this process holds the lock of


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, dist: DistInfo) -> Iterator[None]:
    """Lock a run's output folder (rank 0; see bertkit.io.folder_lock) for everything the job writes there.
    Re-entrant in one process, so a job can take the lock before it validates anything and the Trainer it runs
    trains under the same lock. A folder the lock had to create is removed again when the job leaves it empty."""
    key = Path(folder).resolve()
    if not dist.is_main or key in _LOCKED:
        yield
        return
    created = not key.exists()
    try:
        with folder_lock(folder):
            _LOCKED.add(key)
            try:
                yield
            finally:
                _LOCKED.discard(key)
    finally:
        if created:
            with contextlib.suppress(OSError):
                key.rmdir()  # only when empty


def step_dir(root: str | os.PathLike, step: int) -> Path:
    """Folder of the checkpoint written after optimizer update `step`."""
    return Path(root) / f"step-{step}"


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, folder) of every complete-looking checkpoint under `root`, oldest first (temp folders ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((int(m[1]), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir())


def is_complete(folder: Path) -> bool:
    """Whether a checkpoint folder holds its meta.json and a state file of the size the meta records."""
    try:
        meta = read_meta(folder)
        return (folder / STATE_FILE).stat().st_size == meta["state_bytes"]
    except (CheckpointError, OSError, KeyError):
        return False


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step, or None; an incomplete newer one (a folder emptied by a
    kill during pruning, say) is passed over with a warning."""
    for _, folder in reversed(list_checkpoints(root)):
        if is_complete(folder):
            return folder
        logger.warning("%s is incomplete (no meta.json or a truncated state); using an older checkpoint", folder)
    return None


def prune_checkpoints(root: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints (each renamed to a hidden name first, so a kill leaves no
    half-deleted folder that looks like a checkpoint), and earlier leftovers; returns the deleted folders."""
    root = Path(root)
    found = list_checkpoints(root)
    doomed = [p for _, p in found[: max(0, len(found) - keep_last)]]
    for p in doomed:
        trash = p.with_name(f".{p.name}.deleting")
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(p, trash)
        shutil.rmtree(trash, ignore_errors=True)
    remove_leftovers(root)
    return doomed


def remove_leftovers(root: str | os.PathLike) -> None:
    """Hidden step folders of interrupted writes (.step-N.*.tmp) and deletions (.step-N.deleting, .step-N.old)."""
    root = Path(root)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".step-") and p.name.endswith((".tmp", ".deleting", ".old")):
                shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def atomic_replace_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty hidden sibling folder to fill; on success it replaces `target` (old one removed after)."""
    target = Path(target)
    make_dir(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_training_state(folder: str | os.PathLike, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write state.pt then meta.json (with the state's size and sha256) into `folder`, as a whole."""
    folder = Path(folder)
    with atomic_replace_folder(folder) as tmp:
        with atomic_path(tmp / STATE_FILE) as f:
            torch.save(state, f)
        written = tmp / STATE_FILE
        atomic_write_json(tmp / META_FILE, dict(format=FORMAT, version=VERSION, **meta, state_file=STATE_FILE,
                                                state_bytes=written.stat().st_size, state_sha256=file_sha256(written)))
    return folder


def read_meta(folder: str | os.PathLike) -> dict[str, Any]:
    """meta.json of a checkpoint, checked for format and version."""
    path = Path(folder) / META_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; {folder} is not a complete bertkit training checkpoint")
    meta = read_json_object(path, CheckpointError)
    found = meta.get("format")
    if found != FORMAT:
        raise CheckpointError(f"{path}: not a bertkit training checkpoint (format {found!r}, expected {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path}: format version {meta.get('version')!r}, this bertkit reads {VERSION}")
    return meta


def load_training_state(folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, meta) of a checkpoint; size and checksum are verified before unpickling."""
    folder = Path(folder)
    meta = read_meta(folder)
    entry = {"file": meta.get("state_file", STATE_FILE), "bytes": meta.get("state_bytes"),
             "sha256": meta.get("state_sha256")}
    path = check_file(folder, entry, folder / META_FILE)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # zip/pickle errors of every kind
        raise CheckpointError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    return state, meta


def check_compatible(folder: Path, meta: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise CheckpointError naming the first setting whose value differs between checkpoint and run."""
    for key, want in expected.items():
        have = meta.get(key)
        if have != want:
            raise CheckpointError(
                f"{folder / META_FILE}: written with {key} = {have!r}, but this run has {key} = {want!r}; "
                "resume with the same settings or start a new output_dir"
            )


def load_model_state(model: nn.Module, state_dict: dict[str, torch.Tensor], source: Path) -> None:
    """Load a checkpoint's model weights, naming missing, unexpected or mis-shaped tensors on mismatch."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    shapes = [
        f"{k} {tuple(state_dict[k].shape)} in the checkpoint vs {tuple(own[k].shape)} in the model"
        for k in own if k in state_dict and tuple(state_dict[k].shape) != tuple(own[k].shape)
    ]
    problems = [f"{what} {', '.join(names[:5])}" + (" ..." if len(names) > 5 else "")
                for what, names in (("missing", missing), ("unexpected", unexpected)) if names]
    if shapes:
        problems.append("shape mismatch: " + "; ".join(shapes[:5]))
    if problems:
        raise CheckpointError(f"{source}: model weights do not match the model: {'; '.join(problems)}")
    model.load_state_dict(state_dict)


# RNG states (python, numpy, torch CPU and CUDA) as plain ints and lists: they gather across ranks and load with
# torch.load(weights_only=True).


def _tensor(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def capture_rng_state() -> dict[str, Any]:
    """Every global RNG state of this process, as plain Python values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    py = random.getstate()
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_tensor(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(s) for s in state["cuda"]])


def generator_state(g: Any) -> list[int] | None:
    """A torch.Generator's state as plain ints (None for anything else)."""
    return g.get_state().tolist() if isinstance(g, torch.Generator) else None


def set_generator_state(g: Any, state: list[int] | None) -> None:
    """Inverse of `generator_state`."""
    if isinstance(g, torch.Generator) and state is not None:
        g.set_state(_tensor(state))


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block (evaluation) without changing any global RNG state the training loop sees."""
    saved = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(saved)
