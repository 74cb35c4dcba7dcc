"""Models by name wherever a model folder is expected: the ones shipped inside the bertkit package, and Hugging
Face Hub ids.

    bertkit.load("bertkit-mini")                      # the same as the folder's path
    bertkit.load("BAAI/bge-small-en-v1.5")            # the Hub's model, from the Hugging Face cache
    bertkit finetune --model bertkit-mini ...

A shipped model is a full model folder (config.json, model.safetensors with the pre-training heads, vocab.txt, the
tokenizer settings) plus how it was made (PRETRAINING.md: command, config, metrics, curves). A Hub id is resolved
through `huggingface_hub`, the files bertkit reads only (`HUB_FILES`): from its cache (HF_HUB_CACHE, else
HF_HOME/hub, else ~/.cache/huggingface/hub) when offline (HF_HUB_OFFLINE=1), else downloaded into that cache when
the Hub has newer files, and read from the cache when the Hub cannot be reached. An existing path always wins over
a name, and a shipped name over a Hub id; `resolve_model_dir` is the one resolver every verb and `bertkit.load`
go through.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from bertkit.errors import ConfigError

SHIPPED = {
    "bertkit-mini": "bertkit-mini",
}
"""Name -> folder inside bertkit/pretrained."""


# What bertkit reads of a Hub repository (config, tokenizer and sentence-transformers settings, the weights): a
# repository's other files (ONNX, TensorFlow and Flax weights, OpenVINO, ...) are left on the Hub.
HUB_FILES = ["*.json", "*.txt", "*.safetensors"]  # in subfolders too (1_Pooling/config.json)
HUB_TORCH_WEIGHTS = "pytorch_model.bin"  # fetched only when a repository has no safetensors weights
# A Hub model id: a name, or an owner and a name (letters, digits, '-', '_', '.'; huggingface_hub checks the rest).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def shipped_dir(name: str) -> Path:
    """The folder of a shipped model."""
    return Path(str(resources.files("bertkit") / "pretrained" / SHIPPED[name]))


def resolve_model_dir(folder: str | os.PathLike) -> Path:
    """`folder` itself when it exists; else the shipped model of that name; else, for a name shaped as a Hugging
    Face Hub id, its snapshot folder (`hub_snapshot`), and a ConfigError saying it is none of the three when the
    cache and the Hub do not have it. Any other missing path comes back as it is (its reader says it is missing)."""
    path = Path(folder)
    name = str(folder)
    if path.exists():
        return path
    if name in SHIPPED:
        return shipped_dir(name)
    if HUB_ID.fullmatch(name) and ".." not in name and "--" not in name:
        return hub_snapshot(name)
    return path


def offline() -> bool:
    """Whether the Hub may not be asked: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set now or when huggingface_hub
    was imported."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
                                           for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache() -> str:
    """The Hugging Face cache folder, read now (huggingface_hub reads HF_HUB_CACHE once, when it is imported)."""
    from huggingface_hub import constants

    home = os.environ.get("HF_HOME")
    return os.path.expanduser(os.environ.get("HF_HUB_CACHE") or (os.path.join(home, "hub") if home else
                                                                 constants.HF_HUB_CACHE))


def hub_snapshot(repo_id: str) -> Path:
    """The snapshot folder of a Hub model in the Hugging Face cache (refs/main's commit), with the files bertkit
    reads (`HUB_FILES`): taken from the cache when offline, else downloaded there (huggingface_hub falls back to the
    cache when the Hub cannot be reached). A ConfigError saying the name is not a folder, a shipped model or a cached
    Hub model, and why the Hub did not give it, otherwise."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    cache, local = hub_cache(), offline()
    try:
        snapshot = Path(snapshot_download(repo_id, cache_dir=cache, allow_patterns=HUB_FILES, local_files_only=local))
        if not any(snapshot.glob("*.safetensors")) and not (snapshot / HUB_TORCH_WEIGHTS).is_file():
            snapshot = Path(snapshot_download(repo_id, cache_dir=cache, allow_patterns=[HUB_TORCH_WEIGHTS],
                                              local_files_only=local))
        return snapshot
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as e:
        why = ("offline (HF_HUB_OFFLINE), so the Hub was not asked" if local else
               f"the Hub did not give it: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise ConfigError(f"{repo_id}: no such model folder, nor a shipped model's name ({', '.join(SHIPPED)}), nor a "
                          f"Hugging Face Hub model in the cache {cache} ({why})") from None
