"""Model folders: load and save BERT weights in the layout transformers reads and writes.

A folder holds `config.json` (Hugging Face keys, `architectures`, plus bertkit's task fields), `model.safetensors`
(transformers' tensor names: `bert.` prefix on heads, the tied MLM decoder written out in full) and, when a
tokenizer was saved with it, `vocab.txt` + `tokenizer_config.json`.

Loading also reads Hugging Face folders as they are found in the wild: `pytorch_model.bin` or sharded safetensors,
weights with or without the `bert.` prefix, TF-era `LayerNorm.gamma/beta` names, `position_ids` buffers, and
checkpoints whose heads differ from the class asked for (new heads are initialised freshly, extra heads dropped;
both are reported in `model.load_report` and logged).

Folders of the BERT family (DistilBERT, RoBERTa, XLM-R, ALBERT, ELECTRA) are read and written through their
adapter (`bertkit.model.families`), which renames their tensors both ways; a tensor outside the family's layout, or
an encoder tensor missing or left over, is a CheckpointError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch
from torch import Tensor

from bertkit.errors import BertkitError, CheckpointError
from bertkit.io import atomic_path, atomic_write_json, make_dir, read_json_object
from bertkit.model import families
from bertkit.model.config import BertConfig
from bertkit.model.execution import Execution
from bertkit.pretrained import resolve_model_dir

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
TORCH_NAME = "pytorch_model.bin"
VOCAB_NAME = "vocab.txt"

BASE_PREFIX = "bert."  # where heads keep the encoder, as in transformers
_BASE_ROOTS = ("embeddings.", "encoder.", "pooler.")  # top-level modules of BertModel
# Buffers some exporters write; they hold nothing a model needs (positions are arange(seq_len)).
_IGNORED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")
# transformers' MLM decoder has a bias that is the same tensor as `cls.predictions.bias`; bertkit keeps only the latter.
_DECODER_BIAS = "cls.predictions.decoder.bias"
_LM_BIAS = "cls.predictions.bias"

# The loader builds and saves whatever model class it is handed (BertPreTrainedModel's subclasses, which call it from
# their from_pretrained/save_pretrained); it never names the class, so bert.py -> checkpoint.py is the only arrow.
Model = torch.nn.Module
M = TypeVar("M", bound=Model)


@dataclass
class LoadReport:
    """What loading a weights file did: tensors loaded, freshly initialised, dropped, or ignored on purpose."""

    source: Path
    model_class: str
    loaded: int = 0
    missing: list[str] = field(default_factory=list)
    """Model tensors the file does not have: they keep their fresh initialisation (a new head, for example)."""
    unexpected: list[str] = field(default_factory=list)
    """File tensors this class has no place for (a head it does not have): dropped."""
    ignored: list[str] = field(default_factory=list)
    """File entries that carry nothing to load: position_ids buffers, tied copies of other tensors."""
    renamed: list[str] = field(default_factory=list)
    """Old names read under their current name (LayerNorm gamma/beta -> weight/bias)."""

    @property
    def complete(self) -> bool:
        """True when every model tensor came from the file and every file tensor was used."""
        return not self.missing and not self.unexpected

    def __str__(self) -> str:
        lines = [f"{self.model_class}: loaded {self.loaded} tensors from {self.source}"]
        if self.missing:
            lines.append(f"  initialised freshly (not in the file): {_short_list(self.missing)}")
        if self.unexpected:
            lines.append(f"  dropped (no place in {self.model_class}): {_short_list(self.unexpected)}")
        if self.renamed:
            lines.append(f"  read under current names: {_short_list(self.renamed)}")
        return "\n".join(lines)


def _short_list(names: list[str], limit: int = 8) -> str:
    """Comma-separated names, at most `limit` of them, with a count of the rest."""
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")


# ----------------------------------------------------------------------------------------------------------------
# Reading files.
# ----------------------------------------------------------------------------------------------------------------


def find_weights(folder: Path) -> Path:
    """The weights file of a model folder: model.safetensors, a sharded safetensors index, or pytorch_model.bin."""
    for name in (SAFETENSORS_NAME, SAFETENSORS_INDEX_NAME, TORCH_NAME):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no weights file (expected {SAFETENSORS_NAME}, {SAFETENSORS_INDEX_NAME} or "
                          f"{TORCH_NAME})")


def shard_paths(index_path: Path) -> list[Path]:
    """The shard files a sharded safetensors index names, each checked to lie in the index's folder."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        shards = sorted(set(index["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{index_path}: not a safetensors shard index ({e})") from None
    paths = []
    for shard in shards:
        # By name ('../elsewhere.safetensors', an absolute path), not by where a link leads: the Hugging Face cache
        # links every file of a model's folder to its blob in another folder.
        shard_path = Path(os.path.normpath(index_path.parent / shard))
        if shard_path.parent != Path(os.path.normpath(index_path.parent)):
            raise CheckpointError(f"{index_path}: weight_map names {shard!r}, which is not a file of this folder")
        paths.append(shard_path)
    return paths


def read_state_dict(path: Path) -> dict[str, Tensor]:
    """All tensors of a weights file, on the CPU; a file that is not what its name says raises CheckpointError.

    A pytorch_model.bin in torch's zip format is memory-mapped: its tensors are read when they are copied into a
    model, not all at once here."""
    if path.name.endswith(".index.json"):
        state: dict[str, Tensor] = {}
        for shard_path in shard_paths(path):
            state.update(read_state_dict(shard_path))
        return state
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as e:
            raise _unreadable_safetensors(path, e) from None
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy (pre-zip) format
    except Exception as e:  # torch raises pickle, zip and runtime errors alike for a bad file
        raise CheckpointError(f"{path}: not a readable PyTorch weights file (truncated or unsafe pickle?): {e}") from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a dict of tensor names to tensors, found {type(state).__name__}")
    return state


def _unreadable_safetensors(path: Path, reason: object) -> CheckpointError:
    return CheckpointError(f"{path}: not a readable safetensors file (truncated or another format?): {reason}")


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a safetensors file (or of every shard an index names), from the headers alone:
    safetensors maps the file and reads its JSON header, a few kB however large the weights are."""
    if path.name.endswith(".index.json"):
        return {name: shape for shard in shard_paths(path) for name, shape in safetensors_shapes(shard).items()}
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise _unreadable_safetensors(path, e) from None


_LAYER_INDEX = re.compile(r"encoder\.layer\.(\d+)\.")


def check_config_sizes(config: BertConfig, shapes: dict[str, tuple[int, ...]], weights: Path,
                       where: Callable[[str], str]) -> None:
    """Raise CheckpointError if a size in the config disagrees with the weights, before a model is built.

    Building first would allocate what the config says (4.8 GB for a vocab_size of 3,000,000, 150 GB for an
    intermediate_size of 1e8) before the tensor-by-tensor shape check could refuse it. `where(field)` names
    where the field's value came from (config.json, or an override)."""
    file_names = {_current_name(k[len(BASE_PREFIX):] if k.startswith(BASE_PREFIX) else k): k for k in shapes}
    width = "embedding_size" if config.embedding_size is not None else "hidden_size"
    pins = {  # tensor -> the config field that sets each of its dimensions
        "embeddings.word_embeddings.weight": ("vocab_size", width),
        "embeddings.position_embeddings.weight": ("max_position_embeddings", width),
        **({"embeddings.token_type_embeddings.weight": ("type_vocab_size", width)} if config.type_vocab_size else {}),
        "encoder.layer.0.attention.self.query.weight": ("hidden_size", "hidden_size"),
        "encoder.layer.0.intermediate.dense.weight": ("intermediate_size", "hidden_size"),
    }
    for tensor, fields in pins.items():
        if tensor not in file_names:
            continue  # a file without it: nothing to compare (load_state_into reports it missing)
        key = file_names[tensor]
        shape = tuple(shapes[key])
        expected = tuple(config.embedding_width if f == width else getattr(config, f) for f in fields)
        if shape != expected:
            axis = next((i for i, (a, b) in enumerate(zip(shape, expected)) if a != b), 0)
            name = fields[axis]
            raise CheckpointError(f"{where(name)}: {name} is {expected[axis]}, which does not match {weights}: "
                                  f"{key!r}: shape {shape} in the file, {expected} expected; the config and the "
                                  "weights do not belong together")
    layers = sorted({int(m.group(1)) for k in file_names if (m := _LAYER_INDEX.match(k))})
    needed = 1 if config.share_layers else config.num_hidden_layers
    if len(layers) < needed:
        held = f"{len(layers)} encoder layers (encoder.layer.{layers[0]} .. encoder.layer.{layers[-1]})" \
            if layers else "no encoder layer"
        raise CheckpointError(f"{where('num_hidden_layers')}: num_hidden_layers is {config.num_hidden_layers}"
                              f"{' (one shared layer)' if config.share_layers else ''}, but {weights} holds {held}; "
                              "the config and the weights do not belong together")


def read_vocab_size(path: Path) -> int:
    """Number of entries in a vocab.txt (one token per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read the vocabulary ({e})") from None
    return len(text.splitlines())


def check_vocab(folder: Path, config: BertConfig) -> None:
    """Raise CheckpointError if the folder's vocab.txt has more tokens than the model has embeddings.

    Fewer is allowed with a log line: some published checkpoints pad vocab_size (e.g. to a multiple of 8) and
    the extra embedding rows are simply never used.
    """
    path = folder / VOCAB_NAME
    if path.is_file():
        size = read_vocab_size(path)
        if size > config.vocab_size:
            raise CheckpointError(f"{path}: the vocabulary has {size} tokens but {folder / CONFIG_NAME} says "
                                  f"vocab_size {config.vocab_size}; the tokenizer and the model do not belong together")
        if size < config.vocab_size:
            logger.info("%s: %d tokens for vocab_size %d; embedding rows past the vocabulary are unused",
                        path, size, config.vocab_size)


def read_config(folder: str | os.PathLike) -> tuple[BertConfig, dict[str, Any]]:
    """The BertConfig of a folder (or a shipped model's name) and the raw config.json dict (for `architectures`),
    from one parse of the file."""
    folder = resolve_model_dir(folder)
    path = folder / CONFIG_NAME
    if not folder.exists():
        raise CheckpointError(f"{folder}: no such model folder")
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: expected a model folder (config.json + weights), found a file")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (a model folder needs config.json next to its weights)")
    raw = read_json_object(path, CheckpointError)
    try:
        return BertConfig.from_dict(raw, source=str(path)), raw
    except BertkitError as e:
        raise CheckpointError(str(e)) from None


# ----------------------------------------------------------------------------------------------------------------
# Names: file -> model.
# ----------------------------------------------------------------------------------------------------------------


def _current_name(key: str) -> str:
    """TF-era LayerNorm parameter names (gamma, beta) under their current names (weight, bias)."""
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that are the same tensor as an earlier one (the MLM decoder -> word embeddings)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases[name] = first[id(p)]
        else:
            first[id(p)] = name
    return aliases


def map_file_to_model(
    file_keys: list[str], model_keys: set[str], has_base_prefix: bool, report: LoadReport
) -> dict[str, str]:
    """Model name for every usable file name, adding or removing the `bert.` prefix as the class needs.

    Fills report.ignored, report.renamed and report.unexpected; returns {file_key: model_key}.
    """
    mapping: dict[str, str] = {}
    for key in file_keys:
        if key.endswith(_IGNORED_SUFFIXES):
            report.ignored.append(key)
            continue
        name = _current_name(key)
        if name != key:
            report.renamed.append(key)
        if has_base_prefix and name.startswith(_BASE_ROOTS):
            name = BASE_PREFIX + name
        elif not has_base_prefix and name.startswith(BASE_PREFIX):
            name = name[len(BASE_PREFIX):]
        if name == _DECODER_BIAS and _LM_BIAS in model_keys:
            # The same tensor as cls.predictions.bias in transformers; read it only if the file lacks that name.
            if any(_current_name(k) == _LM_BIAS for k in file_keys):
                report.ignored.append(key)
                continue
            name = _LM_BIAS
        if name in model_keys:
            mapping[key] = name
        else:
            report.unexpected.append(key)
    return mapping


# ----------------------------------------------------------------------------------------------------------------
# Loading.
# ----------------------------------------------------------------------------------------------------------------


def _with_overrides(config: BertConfig, overrides: dict[str, Any]) -> BertConfig:
    """A copy of config with some fields changed (num_labels for a new head, dropout, ...)."""
    if not overrides:
        return config
    known = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise CheckpointError(f"unknown config field(s) {', '.join(unknown)} passed to from_pretrained")
    if "num_labels" in overrides and "label_names" not in overrides:
        names = config.label_names
        if names is not None and len(names) != overrides["num_labels"]:
            overrides = {**overrides, "label_names": None}
    return dataclasses.replace(config, **overrides)


def load_state_into(model: Model, state: dict[str, Tensor], source: Path, strict: bool = False,
                    origin: dict[str, str] | None = None) -> LoadReport:
    """Copy a file's tensors into the model by name, checking every shape; returns what was loaded and what not.

    origin: for a family's folder, {bertkit name: the file's name} of `state`, whose names are bertkit's already
    (`families.bertkit_names`); messages and the report then name the file's tensors, and a tensor of the encoder
    missing from the file or left over in it is a CheckpointError."""
    report = LoadReport(source=source, model_class=type(model).__name__)
    aliases = tied_aliases(model)
    model_state = model.state_dict()
    model_keys = set(model_state) - set(aliases)
    mapping = map_file_to_model(list(state), model_keys, has_base_prefix=hasattr(model, "bert"), report=report)

    # A decoder weight in the file is the tied copy of the word embeddings; bertkit always ties them.
    for key in list(report.unexpected):
        name = BASE_PREFIX + key if hasattr(model, "bert") and key.startswith(_BASE_ROOTS) else key
        if name in aliases:
            report.unexpected.remove(key)
            report.ignored.append(key)
            source_key = next((k for k, v in mapping.items() if v == aliases[name]), None)
            if source_key is not None and not torch.equal(state[key], state[source_key]):
                logger.warning("%s: %s differs from %s; bertkit ties them and keeps the latter",
                               source, key, source_key)

    # A float parameter read from integer or bool data (a header relabelled I32, say) would be converted value by
    # value into nonsense that still loads; refuse it instead.
    not_float = [f"{key!r} is stored as {state[key].dtype}" for key, name in mapping.items()
                 if model_state[name].is_floating_point() and not state[key].is_floating_point()]
    if not_float:
        raise CheckpointError(f"{source}: {'; '.join(not_float[:5])}{'; ...' if len(not_float) > 5 else ''}: "
                              "expected a floating-point type (F32, F16, BF16) for these float parameters")
    named = origin.get if origin is not None else (lambda key, default: key)
    mismatches = [
        f"{named(key, key)!r}: shape {tuple(state[key].shape)} in the file, {tuple(model_state[name].shape)} expected"
        for key, name in mapping.items()
        if tuple(state[key].shape) != tuple(model_state[name].shape)
    ]
    if mismatches:
        more = f"; and {len(mismatches) - 5} more" if len(mismatches) > 5 else ""
        raise CheckpointError(f"{source}: {len(mismatches)} tensor(s) do not match config.json's sizes: "
                              f"{'; '.join(mismatches[:5])}{more}")
    report.missing = sorted(model_keys - set(mapping.values()))
    if origin is not None:
        _check_family_encoder(report, origin, model.config.family)
    if strict and not report.complete:
        raise CheckpointError(f"strict loading failed:\n{report}")
    with torch.no_grad():
        model.load_state_dict({name: state[key] for key, name in mapping.items()}, strict=False)
    report.loaded = len(mapping)
    return report


def _check_family_encoder(report: LoadReport, origin: dict[str, str], family: str) -> None:
    """A family folder's encoder is all there and nothing more (a CheckpointError names what is not); the report's
    file names become the file's own."""
    missing = [name for name in report.missing if families.is_encoder(name)]
    extra = [origin.get(name, name) for name in report.unexpected if families.is_encoder(name)]
    if missing or extra:
        said = [f"missing from the file: {_short_list(missing)} (bertkit's names)" if missing else "",
                f"left over in the file: {_short_list(extra)}" if extra else ""]
        raise CheckpointError(f"{report.source}: the weights are not the {family} encoder config.json describes; "
                              + "; ".join(x for x in said if x))
    report.unexpected = [origin.get(name, name) for name in report.unexpected]
    report.ignored = [origin.get(name, name) for name in report.ignored]
    report.renamed = [origin.get(name, name) for name in report.renamed]


def read_family_state(model_type: str, weights: Path,
                      state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str] | None]:
    """A weights file's tensors (or shapes) under bertkit's names, and {bertkit name: file name}, for a folder whose
    config.json's model_type is a family's (its tensors have the family's names); as they are, and None, for BERT's
    and bertkit's folders (whose names are bertkit's, a family's model kept in bertkit's layout too)."""
    if model_type not in families.FAMILIES:
        return state, None
    names = families.bertkit_names(model_type, state, weights)
    renamed: dict[str, Any] = {}
    for key, name in names.items():
        if name in renamed:  # two file tensors, one place (a pooler and a classifier.dense, say)
            both = " and ".join(repr(k) for k, v in names.items() if v == name)
            raise CheckpointError(f"{weights}: {both} are both bertkit's {name}; a {model_type} folder holds one "
                                  "of them")
        renamed[name] = state[key]
    return renamed, {name: key for key, name in names.items()}


def load_pretrained(
    cls: type[M],
    folder: str | os.PathLike,
    *,
    config: BertConfig | None = None,
    config_source: str | None = None,
    model_type: str | None = None,
    strict: bool = False,
    dtype: torch.dtype | None = None,
    execution: Execution | None = None,
    **config_overrides: Any,
) -> M:
    """Build `cls` from a bertkit or Hugging Face folder; the result is in eval mode and carries `load_report`.

    config: the folder's BertConfig when the caller has read it already (`bertkit.model.folder.open_folder` reads
    config.json once and hands it down; `config_source` then names where it came from in error messages, and
    `model_type` is config.json's, which says how the tensors are named: a family's own names, or bertkit's), else
    config.json is read here. config_overrides change config fields before the model is built (e.g. num_labels=3
    for a new classifier). With strict=True any tensor missing from the file or left unused raises CheckpointError.
    execution: the plan of the model's forward passes, for the classes built with one (BertModel and the masked-LM
    heads; bertkit.model.execution); None builds `cls(config)`.
    """
    folder = resolve_model_dir(folder)
    origin = str(folder / CONFIG_NAME) if config is None else config_source or "the config given to from_pretrained"
    if config is None or model_type is None:
        read, raw = read_config(folder)
        config, model_type = config or read, raw.get("model_type", "bert")
        check_vocab(folder, config)
    elif not folder.is_dir():
        raise CheckpointError(f"{folder}: no such model folder")
    config = _with_overrides(config, config_overrides)
    weights = find_weights(folder)

    def where(name: str) -> str:
        return f"the {name} override" if name in config_overrides else origin

    # Sizes first, from the safetensors header (or the memory-mapped .bin): before any tensor data is read, and
    # before cls(config) allocates what the config says.
    if weights.suffix == ".bin":
        state, origin = read_family_state(model_type, weights, read_state_dict(weights))
        check_config_sizes(config, {k: tuple(v.shape) for k, v in state.items()}, weights, where)
    else:
        shapes = read_family_state(model_type, weights, safetensors_shapes(weights))[0]
        check_config_sizes(config, shapes, weights, where)
        state, origin = read_family_state(model_type, weights, read_state_dict(weights))
    kwargs: dict[str, Any] = {} if execution is None else {"execution": execution}
    if cls.__name__ == "BertModel" and config.family in families.NO_BASE_POOLER:
        kwargs["add_pooling_layer"] = False  # as the family's base model (DistilBertModel, ElectraModel)
    model = cls(config, **kwargs)
    report = load_state_into(model, state, weights, strict=strict, origin=origin)
    logger.log(logging.INFO if report.complete else logging.WARNING, "%s", report)
    if dtype is not None:
        model.to(dtype)
    model.load_report = report
    return model.eval()


# ----------------------------------------------------------------------------------------------------------------
# Saving.
# ----------------------------------------------------------------------------------------------------------------


def family_layout(model: Model) -> bool:
    """Whether the model is written in its family's layout (a DistilBERT, RoBERTa, XLM-R, ALBERT or ELECTRA folder
    that transformers reads as such); else in BERT's or bertkit's own (model_type 'bertkit')."""
    return model.config.family != "bert" and not families.unexpressed(model.config, type(model).__name__)


def export_state_dict(model: Model) -> dict[str, Tensor]:
    """The model's tensors under transformers' names, each its own contiguous copy (safetensors forbids sharing).

    Tied weights are written out in full, as transformers 4 wrote them: `cls.predictions.decoder.weight` (a copy
    of the word embeddings) and `cls.predictions.decoder.bias` (a copy of `cls.predictions.bias`). A model with a
    bertkit-only architecture (which transformers cannot load anyway) is written without these copies: bertkit
    ties them on loading, and the file is a quarter smaller for a small model. A model of the BERT family in its
    family's layout is written under the family's names (`bertkit.model.families`).
    """
    in_family = family_layout(model)
    full_copies = model.config.bert_compatible or in_family
    aliases = set() if full_copies else set(tied_aliases(model))
    out: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        if name in aliases:
            continue
        t = tensor.detach()
        ptr = t.data_ptr()
        out[name] = t.clone().contiguous() if ptr in seen else t.contiguous()
        seen.add(ptr)
    if _LM_BIAS in out and full_copies:
        out[_DECODER_BIAS] = out[_LM_BIAS].clone()
    if in_family:
        names = families.family_names(model.config.family, type(model).__name__, out)
        out = {names[k]: v for k, v in out.items() if k in names}
    return {k: v.cpu() for k, v in out.items()}


def hf_config_dict(model: Model) -> dict[str, Any]:
    """config.json: bertkit's config in Hugging Face's layout plus `architectures`, so transformers picks the class
    (in the family's own keys for a model of the BERT family in its layout)."""
    d = families.hf_config(model.config, type(model).__name__) if family_layout(model) else model.config.to_dict()
    if type(model).__name__ == "BertForQuestionAnswering" and d["num_labels"] != 2:
        # transformers sizes the QA output layer (start, end) from num_labels; bertkit's always has 2 outputs.
        d["num_labels"] = 2
        for key in ("label_names", "id2label", "label2id"):
            d.pop(key, None)
    d.setdefault("architectures", [type(model).__name__])
    d["tie_word_embeddings"] = True
    return d


def _default_dir_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def _write_files(model: Model, folder: Path) -> None:
    """Weights first, then config.json, each atomically."""
    from safetensors.torch import save_file

    config = model.config
    if config.family != "bert" and not family_layout(model):
        logger.warning("%s: %s with %s is written in bertkit's layout (model_type 'bertkit'): transformers' %s "
                       "classes do not compute it", folder, type(model).__name__,
                       ", ".join(families.unexpressed(config, type(model).__name__)), config.family)
    with atomic_path(folder / SAFETENSORS_NAME) as tmp:
        save_file(export_state_dict(model), str(tmp), metadata={"format": "pt"})
    atomic_write_json(folder / CONFIG_NAME, hf_config_dict(model))


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike):  # noqa: ANN201 (a context manager yielding a Path)
    """Yield a folder to fill; it appears at `folder` complete or not at all.

    A new (or empty) folder is built as a hidden sibling and renamed into place. An existing non-empty folder
    cannot be replaced in one step without losing what else is in it, so then the files are written into it
    directly (each file still atomically).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        yield folder
        return
    make_dir(folder.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        os.chmod(tmp, _default_dir_mode())
        yield tmp
        os.replace(tmp, folder)  # an empty target folder is replaced too (rename(2) allows it)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_pretrained(model: Model, folder: str | os.PathLike, extra: Callable[[Path], None] | None = None) -> None:
    """Write config.json + model.safetensors (+ whatever `extra(folder)` writes, e.g. the tokenizer) atomically."""
    with atomic_folder(folder) as target:
        _write_files(model, target)
        if extra is not None:
            extra(target)
