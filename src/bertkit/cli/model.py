"""`bertkit info` and `bertkit convert`: look inside a model folder; move models between bertkit and transformers."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError
from bertkit.io import make_dir, read_json_object
from bertkit.pretrained import resolve_model_dir

# Tokenizer files copied as they are when bertkit's tokenizer cannot rewrite them, and sentence-transformers'
# settings (sequence limit, pooling) that `embed` reads.
_TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "vocab.json",
                    "merges.txt", "spiece.model", "sentencepiece.bpe.model", "added_tokens.json")
# A folder's vocabulary: WordPiece's vocab.txt (BERT, DistilBERT, ELECTRA), tokenizers' tokenizer.json (any family),
# byte-level BPE's vocab.json + merges.txt (RoBERTa), SentencePiece's model (XLM-R, ALBERT).
_VOCABULARY_FILES = ("vocab.txt", "tokenizer.json", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
_SENTENCE_FILES = ("sentence_bert_config.json", "modules.json", "1_Pooling/config.json")
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                   "mask_token": "[MASK]"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `info` and `convert` verbs."""
    p = subparsers.add_parser(
        "info",
        description="Print a bertkit or Hugging Face BERT folder's config, parameter count, "
                    "vocabulary size, head class, task and labels.")
    p.add_argument("folder", metavar="DIR", help="model folder (config.json + weights) or a shipped model's name")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=info_command)

    p = subparsers.add_parser("convert", description="--from-hf: read a Hugging Face BERT folder (model.safetensors or "
                              "pytorch_model.bin, any head; BERT, DistilBERT, RoBERTa, XLM-R, ALBERT or ELECTRA) "
                              "and write a bertkit folder (a family's in its own layout). --to-hf: write a folder "
                              "that transformers' from_pretrained and AutoTokenizer load (config.json with "
                              "architectures, model.safetensors, the tokenizer's files).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-hf", metavar="DIR", help="Hugging Face folder to import")
    src.add_argument("--to-hf", metavar="DIR", help="bertkit folder to export")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (written as a whole)")
    p.add_argument("--class", dest="model_class", default=None,
                   help="load as this class (e.g. BertModel to drop heads); default: config.json's architectures")
    p.add_argument("--strict", action="store_true", help="fail if any tensor is missing or left unused")
    p.set_defaults(func=convert_command)


def describe_folder(folder: Path) -> dict[str, Any]:
    """What `info` shows: class, task, labels, parameter count, vocabulary, and whether the weights file holds
    every tensor of the config's model (the weights are read, so a truncated or mismatched folder is reported)."""
    import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config naming only its task opens)
    from bertkit.model.checkpoint import VOCAB_NAME, find_weights, read_vocab_size
    from bertkit.model.folder import load_model, read_folder

    read = read_folder(folder)
    config = read.config
    model = load_model(read)  # reads every tensor: a truncated or wrong file is reported
    name = type(model).__name__
    vocab = folder / VOCAB_NAME
    return {
        "folder": str(folder),
        "class": name,
        "task": config.task,
        "labels": config.label_names if config.label_names is not None else
        (config.num_labels if name in ("BertForSequenceClassification", "BertForTokenClassification") else None),
        "parameters": model.num_parameters(),
        "parameters_without_embeddings": model.num_parameters(exclude_embeddings=True),
        "weights": find_weights(folder).name,
        "weights_missing": model.load_report.missing,
        "weights_unused": model.load_report.unexpected,
        "vocab_size": read_vocab_size(vocab) if vocab.is_file() else None,
        "config": {k: v for k, v in config.to_dict().items() if v is not None and v != {}},
    }


def info_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit info`."""
    d = describe_folder(resolve_model_dir(args.folder))  # a folder, or a shipped model's name
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    vocab = f"{d['vocab_size']:,} tokens (vocab.txt)" if d["vocab_size"] is not None else "no vocab.txt"
    print(f"folder:      {d['folder']}")
    print(f"class:       {d['class']}" + (f"  (task: {d['task']})" if d["task"] else ""))
    if d["labels"] is not None:
        print(f"labels:      {d['labels']}")
    print(f"parameters:  {d['parameters']:,} ({d['parameters_without_embeddings']:,} without embeddings)")
    print(f"vocabulary:  {vocab}")
    state = "every tensor present" if not (d["weights_missing"] or d["weights_unused"]) else \
        f"{len(d['weights_missing'])} tensor(s) missing, {len(d['weights_unused'])} unused"
    print(f"weights:     {d['weights']} ({state})")
    print("config:")
    for key, value in d["config"].items():
        print(f"  {key}: {value}")
    return 0


def _hf_tokenizer_config(src: Path, max_length: int) -> dict[str, Any]:
    """tokenizer_config.json as transformers' BertTokenizer(Fast) reads it, its lower-casing and splitting settings
    from src's (HF or bertkit spelling)."""
    path = src / "tokenizer_config.json"
    d = read_json_object(path, CheckpointError) if path.is_file() else {}
    return {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(d.get("do_lower_case", d.get("lowercase", True))),
            "strip_accents": d.get("strip_accents"),
            "tokenize_chinese_chars": bool(d.get("tokenize_chinese_chars", True)), "model_max_length": max_length,
            **_SPECIAL_TOKENS}


def _copy_files(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    """Copy the named files that exist in src into dst (keeping sub-folders)."""
    for name in names:
        if (src / name).is_file():
            make_dir((dst / name).parent)
            shutil.copyfile(src / name, dst / name)


def convert_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit convert`: load with every check, write the whole output folder atomically."""
    import bertkit.tasks  # noqa: F401 (registers the tasks' heads: a config naming only its task opens)
    from bertkit.io import atomic_write_json
    from bertkit.model import MODEL_CLASSES
    from bertkit.model.checkpoint import VOCAB_NAME, family_layout, save_pretrained
    from bertkit.model.families import unexpressed
    from bertkit.model.folder import load_model
    from bertkit.tokenizer import BertTokenizer

    src = resolve_model_dir(args.from_hf or args.to_hf)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(f"{out}: already exists and is not empty; choose a new output folder")
    if args.model_class is not None and args.model_class not in MODEL_CLASSES:
        raise CheckpointError(f"--class {args.model_class!r}: expected one of {', '.join(MODEL_CLASSES)}")
    model = load_model(src, args.model_class, strict=args.strict)
    if args.to_hf and not getattr(model, "in_transformers", True):
        raise CheckpointError(f"{src}: {type(model).__name__} is a bertkit-only head that transformers has no class "
                              "for; export its encoder with --class BertModel, or keep the bertkit folder")
    family = model.config.family
    if args.to_hf and family != "bert" and not family_layout(model):
        raise CheckpointError(
            f"{src}: this {family} model has {' and '.join(unexpressed(model.config, type(model).__name__))}, which "
            f"transformers' {family} classes do not have: they would load these weights and compute something else. "
            "Keep the bertkit folder (bertkit.load / from_pretrained read it)")
    if args.to_hf and family == "bert" and not model.config.bert_compatible:
        raise CheckpointError(
            f"{src}: this model uses {' and '.join(model.config.bertkit_options())}, which transformers' BertModel "
            "does not have: it would load these weights and compute something else. Keep the bertkit folder "
            "(bertkit.load / from_pretrained read it), or pre-train with the paper's architecture")
    vocabularies = [name for name in _VOCABULARY_FILES if (src / name).is_file()]
    if not vocabularies:
        raise CheckpointError(f"{src}: no tokenizer (expected one of {', '.join(_VOCABULARY_FILES)}); a model folder "
                              "needs its vocabulary")
    wordpiece = family == "bert" and (src / VOCAB_NAME).is_file()

    def write_tokenizer(target: Path) -> None:
        if args.from_hf and wordpiece:
            BertTokenizer.from_pretrained(str(src)).save_pretrained(str(target))  # normalised by bertkit
        else:  # a family's tokenizer files go as they are: bertkit and transformers read the same ones
            _copy_files(src, target, _TOKENIZER_FILES)
        if args.to_hf and wordpiece:
            atomic_write_json(target / "tokenizer_config.json",
                              _hf_tokenizer_config(src, model.config.max_sequence_length))
            atomic_write_json(target / "special_tokens_map.json", _SPECIAL_TOKENS)
        _copy_files(src, target, _SENTENCE_FILES)

    save_pretrained(model, out, extra=write_tokenizer)
    print(str(model.load_report))
    print(f"wrote {type(model).__name__} ({model.num_parameters():,} parameters) to {out}")
    return 0
